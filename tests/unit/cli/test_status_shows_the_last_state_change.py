"""One journal of a pod's states (issue 37 item 1): the record's events are the journal, and
`status` shows the last change of state with its time: when a pod began serving, or when a failed
arm switch left it with no engine (the entry that carries no `status` of its own)."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tailpod.cli.main import app
from tailpod.ledger import Ledger, PodRecord

TAG = "tp-20261206-090000-abcdef"


def _at(t: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(t))


@pytest.fixture()
def ledger(tailpod_home: Path) -> Ledger:
    led = Ledger(tailpod_home)
    led.put(PodRecord(run_tag=TAG, provider="local", status="intent", gpu="local CPU",
                      price_per_hr=0.0))
    return led


def _status() -> tuple[str, dict[str, object]]:
    text = CliRunner().invoke(app, ["status", "--no-beat"], env={"COLUMNS": "250"})
    assert text.exit_code == 0, text.output
    doc = CliRunner().invoke(app, ["status", "--no-beat", "--json"])
    assert doc.exit_code == 0, doc.output
    (row,) = json.loads(doc.stdout)["pods"]
    return text.stdout, row


def test_status_shows_when_the_pod_began_serving(ledger: Ledger) -> None:
    ledger.update(TAG, event="engine-healthy", status="running")
    served = (ledger.get(TAG) or PodRecord(run_tag=TAG)).events[-1]["t"]
    text, row = _status()
    assert row["last_change"] == {"state": "running", "event": "engine-healthy", "at": served}
    assert f"{TAG}: running since {_at(served)} (engine-healthy)" in text


def test_a_failed_switch_is_the_last_change_though_the_status_stays_running(
        ledger: Ledger) -> None:
    ledger.update(TAG, event="engine-healthy", status="running")
    ledger.update(TAG, event="engine-relaunched")  # no change of state
    ledger.update(TAG, event="no-engine")
    lost = (ledger.get(TAG) or PodRecord(run_tag=TAG)).events[-1]["t"]
    text, row = _status()
    assert row["last_change"] == {"state": "no engine", "event": "no-engine", "at": lost}
    assert f"{TAG}: no engine since {_at(lost)} (no-engine)" in text
