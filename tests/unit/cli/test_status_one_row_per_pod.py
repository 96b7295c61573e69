"""`status` shows one row per pod with one set of figures per call, and the engine's health for a
cloud pod (newcomer 2.25; issue 37 item 6): the provider's figures are folded into the pod's row
instead of a second table whose uptime and spend differed from the first, and the health comes
from the pod's engine, asked over SSH in the heartbeat's session, not "unknown"."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from tailpod.cli import pods as pods_cli
from tailpod.cli import remote
from tailpod.cli.main import app
from tailpod.ledger import Ledger, PodRecord
from tailpod.pods import kinds
from tailpod.provision.reconcile import StatusReport, StatusRow

TAG = "tp-20261206-124116-fefc93"
CREATED = time.time() - 600.0
# what the provider side says at its instant: 660 s up at $0.40/h -> $0.0733
PROVIDER_UPTIME, PROVIDER_SPEND = 660.0, round(0.4 * 660.0 / 3600.0, 4)


class _Kind:
    """A cloud kind whose heartbeat answers as the pod agent does, with the engine's health."""

    name = "runpod"

    def engine_healthy(self, settings: Any, record: Any) -> None:
        return None

    def heartbeat(self, settings: Any, record: Any) -> dict[str, Any]:
        return {"state": "armed", "ttl_left_s": 3600.0,
                "engine": {"running": True, "healthy": True}}


def _report(*extra: StatusRow) -> StatusReport:
    row = StatusRow(run_tag=TAG, provider="runpod", pod_id="pod0001", ledger_status="running",
                    provider_state="running", gpu="NVIDIA A40", gpu_count=1, price_per_hr=0.4,
                    uptime_s=PROVIDER_UPTIME, spend_usd=PROVIDER_SPEND, ttl_expires_at=None)
    return StatusReport(rows=[row, *extra], errors=[], checked_at=time.time())


def _status_at(monkeypatch: pytest.MonkeyPatch, columns: int) -> Any:
    """`tailpod status` on a terminal `columns` wide. The console's width is set, not COLUMNS:
    a console made while COLUMNS was set (an xdist worker's) keeps that width for good."""
    from tailpod.cli import common

    monkeypatch.setattr(common.console, "_width", columns)
    return CliRunner().invoke(app, ["status"])


@pytest.fixture()
def one_cloud_pod(tailpod_home: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    Ledger(tailpod_home).put(PodRecord(run_tag=TAG, provider="runpod", status="running",
                                       pod_id="pod0001", gpu="NVIDIA A40", price_per_hr=0.4,
                                       created_at=CREATED))
    monkeypatch.setattr(pods_cli, "kind_for", lambda _provider: _Kind())
    monkeypatch.setattr(pods_cli.volume_cli, "down_storage", lambda *a, **k: None)
    yield


def test_status_shows_one_row_per_pod_with_the_providers_figures(
        one_cloud_pod: None, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(remote, "remote_report", lambda s, ledger: _report())
    result = _status_at(monkeypatch, 250)
    assert result.exit_code == 0, result.output
    out = result.stdout
    assert "provider truth" not in out  # no second table for the same pod
    (line,) = [ln for ln in out.splitlines() if TAG in ln and "│" in ln]  # its table row
    assert "pod0001" in line and f"{PROVIDER_UPTIME / 60:.1f} min" in line
    assert f"${PROVIDER_SPEND:.4f}" in line and "healthy" in line


def test_status_json_carries_one_set_of_figures(
        one_cloud_pod: None, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(remote, "remote_report", lambda s, ledger: _report())
    result = CliRunner().invoke(app, ["status", "--json"])
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    (pod,) = doc["pods"]
    (cloud,) = doc["cloud"]["rows"]
    assert pod["uptime_s"] == cloud["uptime_s"] == PROVIDER_UPTIME
    assert pod["spend_usd"] == cloud["spend_usd"] == PROVIDER_SPEND
    assert pod["healthy"] is True


def test_a_pod_the_ledger_does_not_hold_keeps_its_provider_row(
        one_cloud_pod: None, monkeypatch: pytest.MonkeyPatch) -> None:
    orphan = StatusRow(run_tag="tp-orphan-1", provider="runpod", pod_id="pod0002",
                       ledger_status=None, provider_state="running", gpu="NVIDIA A40",
                       gpu_count=1, price_per_hr=0.4, uptime_s=60.0, spend_usd=0.0067,
                       ttl_expires_at=None, flags=["orphan"])
    monkeypatch.setattr(remote, "remote_report", lambda s, ledger: _report(orphan))
    result = _status_at(monkeypatch, 250)
    assert result.exit_code == 0, result.output
    out = result.stdout
    assert "provider truth" in out and "tp-orphan-1" in out
    # the ledger's pod, once, in the pods' table only
    assert sum(TAG in ln and "│" in ln for ln in out.splitlines()) == 1


def test_a_narrow_terminal_keeps_the_run_tag_whole(
        one_cloud_pod: None, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(remote, "remote_report", lambda s, ledger: _report())
    result = _status_at(monkeypatch, 40)
    assert result.exit_code == 0, result.output
    assert f"tailpod pod {TAG}" in result.stdout


def test_the_cloud_heartbeat_asks_the_engine_in_the_same_session(
        monkeypatch: pytest.MonkeyPatch) -> None:
    opened: list[str] = []

    class Agent:
        def deadman_heartbeat(self) -> dict[str, Any]:
            opened.append("beat")
            return {"state": "armed"}

        def engine_status(self) -> dict[str, Any]:
            opened.append("engine")
            return {"running": True, "healthy": False, "state": {"argv": ["secret"]}}

    @contextmanager
    def agent(*_a: Any, **_k: Any) -> Iterator[Agent]:
        opened.append("open")
        yield Agent()

    monkeypatch.setattr(kinds.cloud, "open_pod_agent", agent)
    record = PodRecord(run_tag=TAG, provider="runpod", status="running",
                       ssh={"host": "100.64.0.1", "port": 22, "user": "root"})
    beat = kinds.kind_for("runpod").heartbeat(None, record)  # type: ignore[arg-type]
    assert opened == ["open", "beat", "engine"]
    # the engine's answer, its two facts only (its recorded state stays on the pod)
    assert beat == {"state": "armed", "engine": {"running": True, "healthy": False}}
