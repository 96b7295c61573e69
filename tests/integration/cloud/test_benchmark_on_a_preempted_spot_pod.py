"""`benchmark` on a vast.ai spot pod that lost its bid (issue 40, the emulator's `outbid` fault):
it says plainly that the pod was preempted, when, that its disk still bills and at what rate, and
how the run resumes (`down`, `up --spot`, `benchmark --run-id RUN` from the last finished cell),
with exit 3 (something may still bill), instead of an SSH error; nothing is measured on it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest
from typer.testing import CliRunner

from tailpod.cli.main import app
from tailpod.engines.base import EngineConfig
from tailpod.errors import TailpodError
from tailpod.sandbox import Sandbox

from .test_vast_spot_preemption import DISK_GB, _rent_spot

BENCH = ["--spec-k", "0", "--concurrency", "1", "--reps", "1", "--max-tokens", "8",
         "--run-id", "spot-run-1"]


def _spot_pod(sandbox: Sandbox, home: Path, monkeypatch: pytest.MonkeyPatch, tag: str
              ) -> tuple[Any, float]:
    ledger, record, pod = _rent_spot(sandbox, home, monkeypatch, tag, None)
    ledger.update(tag, engine=EngineConfig(engine="vllm", model="org/tiny").to_json(),
                  status="running")
    return pod, pod.storage_cost_gb_month * DISK_GB / 720.0


def _says_preempted(output: str, tag: str, storage: float) -> None:
    flat = " ".join(output.split())
    assert f"{tag} was preempted at" in flat
    assert f"storage still bills ${storage:.4f}/h" in flat
    assert "the cell it was measuring is void and not counted" in flat
    assert f"tailpod down {tag}" in flat
    assert "tailpod benchmark --run-id spot-run-1" in flat
    assert "Traceback" not in output


def test_benchmark_on_a_pod_already_preempted_says_so_before_any_wait(
        sandbox: Sandbox, tailpod_home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pod, storage = _spot_pod(sandbox, tailpod_home, monkeypatch, "tp-spot-b1")

    def no_host(*_a: Any, **_k: Any) -> Any:
        raise AssertionError("the stopped pod was connected to")

    monkeypatch.setattr("tailpod.measure.hosts.sweep_host", no_host)
    sandbox.add_fault("outbid", provider="vast", times=1)
    res = CliRunner().invoke(app, ["benchmark", "tp-spot-b1", *BENCH], env={"COLUMNS": "250"})
    assert res.exit_code == 3, res.output
    _says_preempted(res.output, "tp-spot-b1", storage)
    assert pod.status == "stopped"
    assert not list((tailpod_home / "results").rglob("rows.jsonl"))  # nothing measured


def test_a_preemption_mid_sweep_is_said_as_one_not_as_the_ssh_error(
        sandbox: Sandbox, tailpod_home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pod, storage = _spot_pod(sandbox, tailpod_home, monkeypatch, "tp-spot-b2")

    class Host:
        measured_from = "pod"

        def close(self) -> None:
            pass

    def cut_sweep(*_a: Any, **_k: Any) -> Any:
        # the bid is lost mid-cell: vast stops the instance and the cell's SSH session dies
        sandbox.add_fault("outbid", provider="vast", times=1)
        httpx.get(f"{sandbox.vast_url}/api/v0/users/current/", timeout=10.0,
                  headers={"Authorization": f"Bearer {sandbox.vast_key}"})
        raise TailpodError("the pod stopped answering over SSH (connection reset)")

    monkeypatch.setattr("tailpod.measure.hosts.sweep_host", lambda *a, **k: Host())
    monkeypatch.setattr("tailpod.measure.sweep.run_sweep", cut_sweep)
    res = CliRunner().invoke(app, ["benchmark", "tp-spot-b2", *BENCH], env={"COLUMNS": "250"})
    assert res.exit_code == 3, res.output
    _says_preempted(res.output, "tp-spot-b2", storage)
    assert pod.status == "stopped"


def test_an_on_demand_pod_s_failure_is_left_as_it_was(
        sandbox: Sandbox, tailpod_home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _pod, _storage = _spot_pod(sandbox, tailpod_home, monkeypatch, "tp-spot-b3")

    class Host:
        measured_from = "pod"

        def close(self) -> None:
            pass

    def failing(*_a: Any, **_k: Any) -> Any:  # the pod still runs: not a preemption
        raise TailpodError("the pod stopped answering over SSH (connection reset)")

    monkeypatch.setattr("tailpod.measure.hosts.sweep_host", lambda *a, **k: Host())
    monkeypatch.setattr("tailpod.measure.sweep.run_sweep", failing)
    res = CliRunner().invoke(app, ["benchmark", "tp-spot-b3", *BENCH], env={"COLUMNS": "250"})
    assert res.exit_code == 1, res.output
    assert "connection reset" in res.output and "preempted" not in res.output
