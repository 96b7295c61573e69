"""A team on one account (issue 38 item 3, adversary F4 / scenario 38): two TAILPOD_HOMEs rent on
one RunPod account. Each home's `down` proves its own pods and names the other home's as
others' (never STILL BILLING for this run, never a `tailpod down` of a colleague's pod); `down
--all` leaves them alone unless `--all-homes`; `status` lists them as another home's. A tag
without a home id (written before homes had one) stays this home's orphan, as before."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tailpod.cli.demo_world import demo_ssh_key
from tailpod.cli.main import app
from tailpod.ledger import HOME_ID_FILE, Ledger, tag_home
from tailpod.provision.base import PodSpec
from tailpod.provision.create import up_remote
from tailpod.sandbox import Sandbox
from tests import paths
from tests.helpers.api_timings import fast_timings
from tests.helpers.lifecycle_policy import fast_policy

from .conftest import settings_for

# The tags each home's `up` writes: tp-<home id>-<UTC time>-<6 hex> (docs/providers.md).
ALICE_TAG = "tp-alice-20261206-150000-aaaaaa"
BOB_TAG = "tp-bob-20261206-150100-bbbbbb"


def _enter(monkeypatch: pytest.MonkeyPatch, sandbox: Sandbox, home: Path, home_id: str) -> None:
    """The shell of one home: its TAILPOD_HOME and identity, the shared RunPod account."""
    env = {**sandbox.env(), "TAILPOD_PROVIDER": "runpod", "TAILPOD_HOME": str(home),
           "TAILPOD_HOME_ID": home_id, "TAILPOD_RESULTS_DIR": str(home / "results")}
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    monkeypatch.delenv("VAST_API_KEY", raising=False)


def _rent(sandbox: Sandbox, home: Path, home_id: str, tag: str) -> None:
    settings = settings_for(sandbox, home, TAILPOD_PROVIDER="runpod", TAILPOD_HOME_ID=home_id)
    up_remote(settings, Ledger(settings.state_dir),
              PodSpec(run_tag=tag, gpu_preference=["A40"], image="img",
                      start_command=["sleep", "30"]),
              policy=fast_policy(), timings=fast_timings())


def _billing(sandbox: Sandbox) -> list[str]:
    return sorted(str(r["name"]) for r in sandbox.billing_now())


@pytest.fixture()
def two_homes(sandbox: Sandbox, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Alice's and Bob's pods billing on one account; the shell is Bob's. Returns Alice's home."""
    alice, bob = tmp_path / "alice", tmp_path / "bob"
    monkeypatch.setenv("TAILPOD_ENV_FILE", "/dev/null")
    _rent(sandbox, alice, "alice", ALICE_TAG)
    _rent(sandbox, bob, "bob", BOB_TAG)
    _enter(monkeypatch, sandbox, bob, "bob")
    assert _billing(sandbox) == sorted([ALICE_TAG, BOB_TAG])
    return alice


def test_down_proves_its_own_pod_and_names_another_homes_pod_as_theirs(
        sandbox: Sandbox, two_homes: Path) -> None:
    down = CliRunner().invoke(app, ["down", BOB_TAG])
    flat = " ".join(down.output.split())
    assert down.exit_code == 0, down.output
    assert "STILL BILLING" not in flat.upper()
    assert f"tailpod down {ALICE_TAG}" not in flat  # never a colleague's pod to kill
    assert "another home" in flat and ALICE_TAG in flat and "not this run's" in flat
    assert _billing(sandbox) == [ALICE_TAG]


def test_down_all_leaves_another_homes_pod_unless_all_homes_is_given(
        sandbox: Sandbox, two_homes: Path) -> None:
    alone = CliRunner().invoke(app, ["down", "--all-homes"])  # says what it adds to: --all
    assert alone.exit_code == 2 and "--all-homes goes with --all" in alone.output
    assert _billing(sandbox) == sorted([ALICE_TAG, BOB_TAG])
    down = CliRunner().invoke(app, ["down", "--all"])
    flat = " ".join(down.output.split())
    assert down.exit_code == 0, down.output
    assert _billing(sandbox) == [ALICE_TAG]  # Bob's own pod proven, Alice's left alone
    assert "another home" in flat and ALICE_TAG in flat
    assert Ledger(Path(str(two_homes).replace("alice", "bob"))).get(ALICE_TAG) is None

    everyone = CliRunner().invoke(app, ["down", "--all", "--all-homes"])
    assert everyone.exit_code == 0, everyone.output
    assert _billing(sandbox) == []


def test_status_lists_another_homes_pod_as_theirs_not_as_an_orphan(
        sandbox: Sandbox, two_homes: Path) -> None:
    out = CliRunner().invoke(app, ["status", "--json", "--no-beat"])
    assert out.exit_code == 0, out.output
    rows = {r["run_tag"]: r for r in json.loads(out.stdout)["cloud"]["rows"]}
    assert "orphan" not in rows[ALICE_TAG]["flags"]
    assert any(f.startswith("other home") for f in rows[ALICE_TAG]["flags"])
    assert rows[ALICE_TAG]["settle"] is None
    assert rows[BOB_TAG]["flags"] == []
    CliRunner().invoke(app, ["down", BOB_TAG])


def test_a_tag_without_a_home_id_stays_this_homes_orphan(
        sandbox: Sandbox, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Tags written before homes had an id: as before, an untracked one fails the proof."""
    monkeypatch.setenv("TAILPOD_ENV_FILE", "/dev/null")
    old = "tp-20261201-120000-cccccc"
    _rent(sandbox, tmp_path / "old", "old", old)
    _rent(sandbox, tmp_path / "bob", "bob", BOB_TAG)
    _enter(monkeypatch, sandbox, tmp_path / "bob", "bob")
    down = CliRunner().invoke(app, ["down", BOB_TAG])
    assert down.exit_code == 3, down.output
    assert old in down.output
    assert CliRunner().invoke(app, ["down", "--all"]).exit_code == 0
    assert _billing(sandbox) == []


def test_up_names_its_pod_with_its_homes_id(
        sandbox: Sandbox, tailpod_home: Path, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The real `up` (stopped once the provider named the pod, as tests/integration/cloud/
    interrupted_up.py does): the pod's name at the provider carries the id the home keeps."""
    env = {**sandbox.env(), "TAILPOD_PROVIDER": "runpod", "TAILPOD_GPUS": "NVIDIA A40",
           "TAILPOD_HOME": str(tailpod_home), "TAILPOD_ENV_FILE": os.devnull,
           "TAILPOD_RESULTS_DIR": str(tailpod_home / "results"),
           "TAILPOD_SSH_KEY": str(demo_ssh_key(tailpod_home))}
    ready = tmp_path / "ready"
    child = subprocess.Popen([sys.executable, "-m", "tests.integration.cloud.interrupted_up",
                              "create", str(ready)], cwd=paths.REPO, env={**os.environ, **env},
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 120  # a bound against a hang, not a speed claim
        while not ready.exists() and child.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert ready.exists(), child.communicate(timeout=10)[0]
    finally:
        if child.poll() is None:
            os.kill(child.pid, signal.SIGKILL)
        child.wait()
    kept = (tailpod_home / HOME_ID_FILE).read_text().strip()
    [tag] = _billing(sandbox)
    assert tag_home(tag) == kept and tag.startswith(f"tp-{kept}-")
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    assert CliRunner().invoke(app, ["down", tag]).exit_code == 0
    assert _billing(sandbox) == []
