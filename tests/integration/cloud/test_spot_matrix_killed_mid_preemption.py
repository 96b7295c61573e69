"""The laptop side dies mid-preemption (issue 40, "done when"): a real `tailpod matrix --spot`
process on the sandbox cloud is killed with SIGKILL while its vast spot pod loses its bid (the
emulator's `outbid` fault: the instance stopped, its disk still billing). Nothing of the killed
process settles anything; then `tailpod status` says the pod was preempted and what it still
bills, and `tailpod down --all` destroys the instance and proves it and its disk gone, exit 0,
with the sandbox's meter showing nothing billing.

The storage rate is worked out from the emulator's own offer (what "vast" sells): storage_cost
$/GB/month x the rented disk / 720 h (docs/providers.md "Spot"; the same figure as
test_vast_spot_preemption.py)."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from typer.testing import CliRunner

from tailpod.cli.main import app
from tailpod.config import Settings
from tailpod.ledger import Ledger
from tailpod.sandbox import Sandbox
from tailpod.sandbox.model import SandboxPod
from tests import paths

from .test_matrix_faults import IMAGE, VAST4090
from .test_matrix_faults import settings as settings  # noqa: F401 - the fixture, as there

HELPER = "tests.integration.cloud.killed_spot_matrix"  # run from the repository, as a module
DISK_GB = 20  # test_matrix_faults.SandboxSteps rents this disk


def _env(sandbox: Sandbox, settings: Settings) -> dict[str, str]:
    return {**sandbox.env(), "TAILPOD_HOME": str(settings.home),
            "TAILPOD_RESULTS_DIR": str(settings.results_dir), "TAILPOD_MODEL": "org/tiny",
            "TAILPOD_IMAGE": IMAGE, "TAILPOD_TTL_HOURS": "1", "TAILPOD_ENV_FILE": os.devnull}


ARGS = ["matrix", "--spot", "--card", VAST4090, "--budget", "5", "--spec-k", "0",
        "--spec-method", "ngram", "--concurrency", "1,2", "--reps", "1", "--max-tokens", "16",
        "--setup-minutes", "0.01", "--restart-minutes", "0", "--cell-minutes", "0.001"]


@contextlib.contextmanager
def _spot_matrix(sandbox: Sandbox, settings: Settings, ready: Path
                 ) -> Iterator[subprocess.Popen[bytes]]:
    """`tailpod matrix --spot` over the vast card in its own process, hanging in its second cell
    (killed_spot_matrix.py); SIGKILLed, with its process group, whatever the test does."""
    child = subprocess.Popen([sys.executable, "-m", HELPER, str(ready), *ARGS], cwd=paths.REPO,
                             env={**os.environ, **_env(sandbox, settings)},
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                             start_new_session=True)
    try:
        deadline = time.monotonic() + 120  # a bound against a hang, not a speed claim
        while not ready.exists() and child.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        if not ready.exists():
            os.killpg(child.pid, signal.SIGKILL)
            pytest.fail(child.communicate(timeout=10)[0].decode(errors="replace"))
        yield child
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(child.pid, signal.SIGKILL)
        child.wait(timeout=30)


def _lose_the_bid(sandbox: Sandbox, settings: Settings, tag: str) -> SandboxPod:
    """The spot pod `tag` loses its bid now: vast stops the instance on its next request and its
    disk bills on."""
    record = Ledger(settings.state_dir).get(tag)
    assert record is not None and record.extra.spot is True and record.pod_id
    pod = sandbox.cloud.pods[f"vast:{record.pod_id}"]
    assert pod.meta["is_bid"] is True
    sandbox.add_fault("outbid", provider="vast", times=1)
    httpx.get(f"{sandbox.vast_url}/api/v0/users/current/", timeout=10.0,
              headers={"Authorization": f"Bearer {sandbox.vast_key}"})
    assert pod.status == "stopped"
    return pod


def _down_all_proves_everything_gone(sandbox: Sandbox, settings: Settings) -> None:
    down = CliRunner().invoke(app, ["down", "--all"], terminal_width=250)
    assert down.exit_code == 0, down.output
    assert sandbox.billing_now() == [] and sandbox.meter()["billing_count"] == 0
    assert all(p["status"] == "terminated" for p in sandbox.cloud.pods_public())
    ledger = Ledger(settings.state_dir)
    assert ledger.active() == []
    for record in ledger.all():  # every pod of the account, each with its proof
        proof = Path(settings.results_dir) / record.run_tag / "billing-proof.json"
        assert json.loads(proof.read_text())["proven"] is True, record.run_tag


def test_status_then_down_all_settle_a_spot_pod_preempted_after_its_matrix_was_killed(
        sandbox: Sandbox, settings: Settings, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    ready = tmp_path / "ready"
    with _spot_matrix(sandbox, settings, ready) as child:
        tag = ready.read_text()
        pod = _lose_the_bid(sandbox, settings, tag)
        os.killpg(child.pid, signal.SIGKILL)  # the laptop side dies with the bid just lost
    record = Ledger(settings.state_dir).get(tag)
    assert record is not None and record.active  # the killed process settled nothing
    storage = pod.storage_cost_gb_month * DISK_GB / 720.0
    # what bills while nobody watches: the stopped instance's disk, nothing else
    assert [(r["id"], r["rate_per_hr"]) for r in sandbox.billing_now()] == \
        [(record.pod_id, pytest.approx(storage, abs=1e-6))]

    for key, value in _env(sandbox, settings).items():
        monkeypatch.setenv(key, value)
    status = CliRunner().invoke(app, ["status", "--no-beat"], terminal_width=250)
    assert status.exit_code == 0, status.output
    flat = " ".join(status.output.split())
    assert f"{tag}: preempted at" in flat, status.output
    assert f"storage still bills ${storage:.4f}/h; settle it with: tailpod down {tag}" in flat
    [directory] = Path(settings.results_dir).glob("mx-*")
    assert f"interrupted matrix {directory.name}" in flat and f"pid {child.pid} on" in flat
    # the journal's last "running" is not said of a pod its provider stopped
    assert f"{tag}: running since" not in flat, status.output
    as_json = json.loads(CliRunner().invoke(app, ["status", "--no-beat", "--json"]).stdout)
    assert as_json["cloud"]["rate_per_hr_now"] == pytest.approx(storage, abs=1e-5)

    _down_all_proves_everything_gone(sandbox, settings)
    assert pod.status == "terminated"


def test_down_all_settles_the_new_pod_of_a_matrix_killed_while_renting_after_a_preemption(
        sandbox: Sandbox, settings: Settings, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Killed one step later: the matrix saw the lost bid, destroyed the stopped pod with its
    proof and asked vast for a new one, whose create the provider holds when the process dies;
    the provider then makes it, and nobody waits for it."""
    ready = tmp_path / "ready"
    with _spot_matrix(sandbox, settings, ready) as child:
        lost = ready.read_text()
        old = _lose_the_bid(sandbox, settings, lost)
        hold = sandbox.add_fault("hold_create", provider="vast", times=1, seconds=120)
        ready.with_suffix(".go").write_text("")  # the cut cell fails as on a dead pod
        if not sandbox.cloud.faults.wait_held(hold, timeout=120):
            os.killpg(child.pid, signal.SIGKILL)
            pytest.fail(child.communicate(timeout=10)[0].decode(errors="replace"))
        os.killpg(child.pid, signal.SIGKILL)
    sandbox.cloud.faults.release(hold)  # the provider finishes the create nobody waits for
    deadline = time.monotonic() + 30
    while len(sandbox.cloud.pods) < 2 and time.monotonic() < deadline:
        time.sleep(0.02)
    assert old.status == "terminated"  # the lost pod was proven gone before the new create
    assert (Path(settings.results_dir) / lost / "billing-proof.json").exists()
    [new] = [p for p in sandbox.cloud.pods.values() if p is not old]
    assert [r["id"] for r in sandbox.billing_now()] == [new.pod_id]
    [intent] = Ledger(settings.state_dir).active()  # known to the ledger before its create
    assert intent.run_tag != lost and intent.extra.spot is True
    [directory] = Path(settings.results_dir).glob("mx-*")
    state = json.loads((directory / "matrix.json").read_text())
    assert [p["pod"] for p in state["cards"][VAST4090]["preemptions"]] == [lost]

    for key, value in _env(sandbox, settings).items():
        monkeypatch.setenv(key, value)
    status = CliRunner().invoke(app, ["status", "--no-beat"], terminal_width=250)
    assert status.exit_code == 0, status.output
    assert intent.run_tag in status.output
    _down_all_proves_everything_gone(sandbox, settings)
