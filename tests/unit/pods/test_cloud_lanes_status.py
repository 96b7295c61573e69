"""A rented pod serving lanes that cannot be reached: `status` says the lanes are unknown and
exits 3, never showing them up or down; `down`'s settle step leaves lanes.json's counts as they
were and says they are not final."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from tailpod.cli.main import app
from tailpod.config import load_settings
from tailpod.errors import TailpodError
from tailpod.ledger import Ledger, PodRecord
from tailpod.pods import cloud_lanes, lanes
from tailpod.provision.teardown import run_dir_for

LANES = {"on_pod": True, "admission_limit": 2,
         "haproxy": {"state_dir": "/pod/lanes/proxy", "stats_socket": "/pod/lanes/proxy/s.sock"},
         "lanes": {"spec": {"port": 8001, "state_dir": "/pod/lanes/spec"},
                   "plain": {"port": 8002, "state_dir": "/pod/lanes/plain"}}}


@pytest.fixture()
def unreachable(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.chdir(tmp_path)

    def refuse(*_a: Any) -> Any:
        raise TailpodError("ssh 127.0.0.1:9: connection refused")

    monkeypatch.setattr(cloud_lanes, "_agent", refuse)


def _record(settings: Any) -> PodRecord:
    ledger = Ledger(settings.state_dir)
    return ledger.put(PodRecord(run_tag="tp-lanes-away", provider="runpod", status="running",
                                endpoint="http://tailpod-x:8000",
                                ssh={"host": "127.0.0.1", "port": 9, "user": "root"},
                                extra={"lanes": LANES}))


def test_status_of_unreachable_pod_lanes_is_unknown_and_exits_3(
        tailpod_home: Path, unreachable: None) -> None:
    settings = load_settings()
    record = _record(settings)
    res = CliRunner().invoke(app, ["status", record.run_tag, "--json", "--no-beat"])
    assert res.exit_code == 3, res.output
    (row,) = json.loads(res.stdout)["pods"]
    assert row["lanes"]["unknown"] == "ssh 127.0.0.1:9: connection refused"
    assert row["lanes"]["proxy"]["alive"] is None and row["lanes"]["lanes"] == {}
    plain = CliRunner().invoke(app, ["status", record.run_tag, "--no-beat"])
    assert plain.exit_code == 3
    text = " ".join(plain.output.split())  # rich folds long lines
    assert "tp-lanes-away: lanes not read (ssh 127.0.0.1:9: connection refused)" in text


def test_settle_of_an_unreachable_pod_keeps_the_counts_and_says_not_final(
        tailpod_home: Path, unreachable: None) -> None:
    settings = load_settings()
    record = _record(settings)
    run_dir = run_dir_for(settings, record.run_tag)
    lanes.write_lanes_json(record, run_dir, {"spec": {"stot": 7, "smax": 2},
                                             "plain": {"stot": 3, "smax": 1}})
    settled = cloud_lanes.settle_lanes_run(settings, Ledger(settings.state_dir), record)
    assert settled.extra.lanes_down["unknown"].endswith("connection refused")
    saved = json.loads((run_dir / lanes.LANES_FILE).read_text())
    assert saved["counts_final"] is False
    assert {n: r["requests"] for n, r in saved["lanes"].items()} == {"spec": 7, "plain": 3}
