"""`logs TAG` of a pod the ledger holds as ended prints what was kept of it on this machine and
says the pod is gone, without any SSH attempt (adversary #31: after `down`, `logs TAG` spent
35.6 s on SSH to a pod the ledger knew was gone). What is kept is the container log `up` saves in
the run directory (provision/bootlog.py `container.log`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from tailpod.cli.main import app
from tailpod.config import load_settings
from tailpod.ledger import Ledger, PodRecord
from tailpod.pods import kinds

TAG = "tp-20261206-130000-abc123"
KEPT = [f"container line {i}" for i in range(10)]


@pytest.fixture()
def ended_pod(tailpod_home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """A RunPod pod `down` proved gone, its SSH address still in the record; every SSH attempt
    of the cloud kind is recorded (and refused, as the gone pod would)."""
    monkeypatch.setenv("TAILPOD_RESULTS_DIR", str(tmp_path / "results"))
    Ledger(load_settings().state_dir).put(PodRecord(
        run_tag=TAG, provider="runpod", status="terminated", pod_id="pod0001",
        ssh={"host": "100.64.0.9", "port": 22}))
    tried: list[str] = []

    def engine_log(self: Any, settings: Any, record: Any, say: Any) -> Any:
        tried.append(record.run_tag)
        raise AssertionError("an SSH attempt to a pod the ledger holds as ended")

    monkeypatch.setattr(kinds.CloudPods, "engine_log", engine_log)
    return tried


def test_logs_of_an_ended_pod_prints_the_kept_container_log_without_ssh(
        ended_pod: list[str], tmp_path: Path) -> None:
    run_dir = tmp_path / "results" / TAG
    run_dir.mkdir(parents=True)
    (run_dir / "container.log").write_text("".join(f"{line}\n" for line in KEPT))
    result = CliRunner().invoke(app, ["logs", TAG, "-n", "3"])
    assert result.exit_code == 0, result.output
    assert result.stdout.splitlines() == KEPT[-3:]
    said = " ".join(result.stderr.split())
    assert f"{TAG} has ended" in said and "the pod is gone" in said
    assert str(run_dir / "container.log") in said
    assert ended_pod == []


def test_logs_of_an_ended_pod_with_nothing_kept_says_so_without_ssh(
        ended_pod: list[str]) -> None:
    result = CliRunner().invoke(app, ["logs", TAG])
    assert result.exit_code == 1, result.output
    said = " ".join(result.output.split())
    assert f"{TAG} has ended" in said and "the pod is gone" in said
    assert "no container log was kept" in said
    assert "Traceback" not in said
    assert ended_pod == []
