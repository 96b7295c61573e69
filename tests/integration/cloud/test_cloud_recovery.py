"""Crash recovery (issue 14): a damaged or lost ledger, `up` killed mid-way, `down` that cannot
prove. The providers are the truth: each scenario ends with the sandbox meter at zero after the
one command docs/providers.md ("When things break") names for it."""

from __future__ import annotations

import json
import sys
from contextlib import nullcontext
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from typer.testing import CliRunner

from tailpod.agent_client.driver import EngineStarted
from tailpod.cli.demo_world import demo_ssh_key
from tailpod.cli.main import app
from tailpod.engines.adapters import get_adapter
from tailpod.engines.base import EngineConfig
from tailpod.ledger import Ledger
from tailpod.pods import cloud as cloud_up
from tailpod.provision.base import PodSpec
from tailpod.provision.create import up_remote
from tailpod.provision.ssh.client import SshTarget
from tailpod.sandbox import Sandbox
from tests.helpers.api_timings import fast_timings
from tests.helpers.lifecycle_policy import fast_policy

from .conftest import kill_9_when_ready, settings_for

runner = CliRunner()
TRUNCATED = b'{"generation": 1, "pods": {"tp-x": {"run_tag": "tp-x", "provider": "run'
RANDOM_BYTES = bytes((i * 151 + 7) % 256 for i in range(4096))  # not UTF-8, not JSON
HELPER = "tests.integration.cloud.interrupted_up"  # run from the repository, as a module


def LAST_GOOD(home: Path) -> Path:  # noqa: N802 - a path, named like the file it is
    return home / "ledger.last-good.json"


@pytest.fixture()
def env(sandbox: Sandbox, tailpod_home: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    values = {**sandbox.env(), "TAILPOD_PROVIDER": "runpod", "TAILPOD_GPUS": "NVIDIA A40",
              "TAILPOD_RESULTS_DIR": str(tailpod_home / "results"),
              "TAILPOD_SSH_KEY": str(demo_ssh_key(tailpod_home))}
    for key, value in values.items():
        monkeypatch.setenv(key, value)
    return values


def rent(sandbox: Sandbox, home: Path, env: dict[str, str], tag: str) -> Ledger:
    settings = settings_for(sandbox, home, **env)
    ledger = Ledger(settings.state_dir)
    up_remote(settings, ledger, PodSpec(run_tag=tag, gpu_preference=["NVIDIA A40"], image="img",
                                        start_command=["sleep", "60"]),
              policy=fast_policy(), timings=fast_timings())
    assert sandbox.meter()["billing_count"] == 1
    return ledger


def kept_aside(home: Path) -> list[bytes]:
    return sorted(p.read_bytes() for p in home.glob("ledger*.damaged-*.json"))


# -- 1. a damaged ledger ---------------------------------------------------------------------------
@pytest.mark.parametrize("damage", [TRUNCATED, RANDOM_BYTES], ids=["truncated", "random-bytes"])
@pytest.mark.parametrize("copies", ["ledger.json", "both copies"])
def test_down_all_with_a_damaged_ledger_settles_from_the_provider(
        sandbox: Sandbox, tailpod_home: Path, env: dict[str, str], damage: bytes,
        copies: str) -> None:
    ledger = rent(sandbox, tailpod_home, env, "tp-damaged-1")
    damaged = [ledger.path] + ([LAST_GOOD(tailpod_home)] if copies == "both copies" else [])
    for path in damaged:
        path.write_bytes(damage)

    down = runner.invoke(app, ["down", "--all"])
    assert down.exit_code == 0, down.output
    assert sandbox.meter()["billing_count"] == 0
    assert "ledger was damaged" in down.output and "tp-damaged-1" in down.output
    assert kept_aside(tailpod_home) == [damage] * len(damaged)  # set aside, byte for byte
    record = Ledger(tailpod_home).get("tp-damaged-1")
    assert record is not None and record.status == "terminated"
    assert Ledger(tailpod_home).pending_recovery() == []  # settled by the provider check


def test_status_with_both_copies_damaged_shows_the_provider_truth_then_down_tag(
        sandbox: Sandbox, tailpod_home: Path, env: dict[str, str]) -> None:
    ledger = rent(sandbox, tailpod_home, env, "tp-damaged-2")
    (pod,) = sandbox.cloud.pods.values()
    pod.created_at -= 3 * 3600.5  # it has billed for three hours when the ledger is lost
    ledger.path.write_bytes(RANDOM_BYTES)
    LAST_GOOD(tailpod_home).write_bytes(TRUNCATED)

    status = runner.invoke(app, ["status", "--json", "--no-beat"])
    assert status.exit_code == 0, status.output
    cloud = json.loads(status.stdout)["cloud"]
    rows = {r["run_tag"]: r for r in cloud["rows"]}
    assert rows["tp-damaged-2"]["provider_state"] in ("pending", "running")
    assert rows["tp-damaged-2"]["ledger_status"] is not None  # rebuilt, no longer an orphan
    notices = " ".join(cloud["ledger_notices"])
    assert "damaged" in notices and "rebuilt" in notices and "tp-damaged-2" in notices
    # the rebuilt record counts from the pod's createdAt (RFC 3339, whole seconds), not from the
    # rebuild: its uptime is the three hours it has billed
    rebuilt = Ledger(tailpod_home).get("tp-damaged-2")
    assert rebuilt is not None and rebuilt.created_at == float(int(pod.created_at))

    down = runner.invoke(app, ["down", "tp-damaged-2"])
    assert down.exit_code == 0, down.output
    assert sandbox.meter()["billing_count"] == 0


def test_down_tag_with_the_ledger_deleted_finds_the_pod_at_the_provider(
        sandbox: Sandbox, tailpod_home: Path, env: dict[str, str]) -> None:
    ledger = rent(sandbox, tailpod_home, env, "tp-deleted-1")
    for path in (ledger.path, LAST_GOOD(tailpod_home)):
        path.unlink(missing_ok=True)

    down = runner.invoke(app, ["down", "tp-deleted-1"])
    assert down.exit_code == 0, down.output
    assert "not in the ledger" in down.output
    assert sandbox.meter()["billing_count"] == 0
    assert (tailpod_home / "results" / "tp-deleted-1" / "billing-proof.json").exists()


def test_ledger_deleted_while_up_runs_is_written_back_not_a_traceback(
        sandbox: Sandbox, tailpod_home: Path, env: dict[str, str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    from tailpod.config import load_settings

    settings = load_settings()
    ledger = Ledger(settings.state_dir)

    agent = SimpleNamespace(state_dir="/pod/state")  # the pod's side: connected, then

    def start_arm(*_a: Any, **_k: Any) -> EngineStarted:  # the ledger vanishes at engine start
        for path in (ledger.path, LAST_GOOD(tailpod_home)):
            path.unlink(missing_ok=True)
        return EngineStarted({"ok": True, "startup_s": 1.0},
                             get_adapter("vllm").parse_startup(""), [])  # fmt: skip

    monkeypatch.setattr(cloud_up, "pinned_image", lambda *_a: ("img@sha256:" + "ab" * 32, None))
    monkeypatch.setattr(cloud_up, "reach_pod", lambda *_a: SshTarget("127.0.0.1", name="pod"))
    monkeypatch.setattr(cloud_up, "open_pod_agent", lambda *_a: nullcontext(agent))
    monkeypatch.setattr(cloud_up, "arm_deadman", lambda *_a: {"armed": True, "pid": 1})
    monkeypatch.setattr(cloud_up, "start_arm", start_arm)
    said: list[str] = []
    record, _info = cloud_up.up_cloud(settings, EngineConfig(engine="vllm", model="org/m"),
                                      ledger, said.append, use_tailnet=False, preflight=False)
    assert any("lost" in line and record.run_tag in line for line in said)
    kept = Ledger(tailpod_home).get(record.run_tag)
    assert kept is not None and kept.status == "running" and kept.pod_id == record.pod_id
    assert kept.operation == {}  # `up` finished: nothing is in progress

    down = runner.invoke(app, ["down", record.run_tag])
    assert down.exit_code == 0, down.output
    assert sandbox.meter()["billing_count"] == 0


# -- 2. `up` killed with SIGKILL: status names the step and the command -----------------------------
@pytest.mark.parametrize("step", ["create", "ssh-wait", "engine-start"])
def test_kill_9_during_up_status_says_interrupted_and_down_tag_settles_it(
        sandbox: Sandbox, tailpod_home: Path, env: dict[str, str], tmp_path: Path,
        step: str) -> None:
    ready = tmp_path / "ready"
    pid = kill_9_when_ready([sys.executable, "-m", HELPER, step, str(ready)], env, ready)
    [record] = Ledger(tailpod_home).active()

    status = runner.invoke(app, ["status", "--no-beat"], terminal_width=200)
    assert status.exit_code == 0, status.output
    out = " ".join(status.output.split())
    assert f"interrupted during {step}" in out
    assert f"settle it with: tailpod down {record.run_tag}" in out
    assert f"pid {pid} on" in out

    down = runner.invoke(app, ["down", record.run_tag])
    assert down.exit_code == 0, down.output
    assert sandbox.meter()["billing_count"] == 0


# -- 4. `down` that cannot prove: progress while it waits, bounded by --timeout ---------------------
def test_down_that_cannot_prove_shows_progress_and_honours_timeout(
        sandbox: Sandbox, tailpod_home: Path, env: dict[str, str]) -> None:
    rent(sandbox, tailpod_home, env, "tp-stuck-1")
    fault = sandbox.add_fault("terminate_fail", provider="runpod", status=500)

    down = runner.invoke(app, ["down", "tp-stuck-1", "--timeout", "2"])
    assert down.exit_code == 3, down.output
    out = " ".join(down.output.split())
    assert "terminate" in out and "failed" in out  # progress while it retries
    assert "--timeout" in out and "tailpod down tp-stuck-1" in out
    assert fault.fired >= 1
    assert sandbox.meter()["billing_count"] == 1

    sandbox.clear_faults()
    again = runner.invoke(app, ["down", "tp-stuck-1"])
    assert again.exit_code == 0, again.output
    assert sandbox.meter()["billing_count"] == 0
