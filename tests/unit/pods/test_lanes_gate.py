"""`up --lanes` gates the spec lane against the plain lane for token identity (the sweep's gate,
run by the agent) once both are healthy and before the proxy starts: a lane that changes greedy
output is refused with the reason, and nothing is left running or unrecorded."""

from __future__ import annotations

import json
import socket
from pathlib import Path
from typing import Any

import pytest

from tailpod.config import load_settings
from tailpod.errors import TailpodError
from tailpod.ledger import Ledger
from tailpod.pods import lanes
from tailpod.provision.teardown import run_dir_for

from .test_lanes_haproxy import TOKENS, _free_ports, _synthetic

pytestmark = pytest.mark.skipif(lanes.shutil.which("haproxy") is None
                                and not Path("/usr/sbin/haproxy").exists(),
                                reason="haproxy is not installed (scripts/system-requirements.sh)")

DIVERGE_AT = 3  # planted: the spec lane's greedy tokens differ from this position on


@pytest.fixture(autouse=True)
def _results_in_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)


def _diverging(name: str, port: int) -> lanes.LaneLaunch:
    launch = _synthetic(name, port)
    launch.argv += ["--diverge-position", str(DIVERGE_AT)]
    return launch


def _closed(*ports: int) -> bool:
    for port in ports:
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return False
    return True


def _saved(settings: Any, tag: str) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads((run_dir_for(settings, tag) / lanes.LANES_FILE).read_text())
    return doc


def test_a_token_identical_spec_lane_passes_the_gate_before_the_proxy_starts(
        tailpod_home: Path) -> None:
    settings = load_settings()
    ledger = Ledger(settings.state_dir)
    front, spec_port, plain_port = _free_ports(3)
    record = lanes.up_lanes(settings, ledger, [_synthetic("spec", spec_port),
                                               _synthetic("plain", plain_port)],
                            admission_limit=1, front_port=front, startup_timeout_s=60,
                            gate=lanes.local_gate(settings))
    try:
        gate = record.extra.lanes["gate"]
        events = [e["event"] for e in record.events]
    finally:
        lanes.settle_lanes(settings, ledger, record)
        from tailpod.pods.kinds import kind_for

        kind_for("local").down(settings, ledger, ledger.get(record.run_tag) or record)
    assert gate["status"] == "pass" and gate["method"] == "token_ids"
    assert gate["token_source"] == "return_token_ids"
    assert gate["reference"] == "plain lane" and gate["candidate"] == "spec lane"
    # the gate ran between the plain lane's health and the proxy
    assert events.index("lanes-gate-pass") == events.index("lane-plain-healthy") + 1
    assert events.index("lanes-gate-pass") < events.index("lanes-up")
    assert _saved(settings, record.run_tag)["gate"]["status"] == "pass"
    assert _closed(front, spec_port, plain_port)


def test_a_diverging_spec_lane_is_refused_and_nothing_is_left_running(tailpod_home: Path) -> None:
    settings = load_settings()
    ledger = Ledger(settings.state_dir)
    front, spec_port, plain_port = _free_ports(3)
    with pytest.raises(lanes.LaneGateFailed) as caught:
        lanes.up_lanes(settings, ledger, [_diverging("spec", spec_port),
                                          _synthetic("plain", plain_port)],
                       admission_limit=1, front_port=front, startup_timeout_s=60,
                       gate=lanes.local_gate(settings))
    # The first prompt already differs at the planted position (the synthetic server answers
    # TOKENS tokens, more than DIVERGE_AT).
    assert DIVERGE_AT < TOKENS
    assert "prompt 0 differs from the plain lane at token 3" in caught.value.message
    assert _closed(front, spec_port, plain_port)  # the proxy never started; both lanes stopped
    (record,) = ledger.all()
    assert record.status == "terminated"
    assert record.extra.lanes["gate"]["status"] == "fail"
    assert "lanes-up" not in [e["event"] for e in record.events]
    saved = _saved(settings, record.run_tag)
    assert saved["gate"]["first_mismatch"]["position"] == DIVERGE_AT
    assert saved["endpoint"] is None


def test_a_gate_that_cannot_run_refuses_the_lanes_too(tailpod_home: Path) -> None:
    settings = load_settings()
    ledger = Ledger(settings.state_dir)
    front, spec_port, plain_port = _free_ports(3)

    def broken(request: dict[str, Any]) -> dict[str, Any]:
        assert request["reference_url"].endswith(f":{plain_port}")
        assert request["candidate"].endswith(f":{spec_port}")
        raise TailpodError("agent gate: connection refused")

    with pytest.raises(lanes.LaneGateFailed, match="could not run: agent gate: connection"):
        lanes.up_lanes(settings, ledger, [_synthetic("spec", spec_port),
                                          _synthetic("plain", plain_port)],
                       admission_limit=1, front_port=front, startup_timeout_s=60, gate=broken)
    assert _closed(front, spec_port, plain_port)
    (record,) = ledger.all()
    assert record.status == "terminated" and record.extra.lanes["gate"]["status"] == "error"

