"""Lanes a test leaves up (it failed before its own `down`) stop at the test's end: the
`tailpod_home` fixture downs the home's active local runs (tests/helpers/local_runs.py), so their
lane servers and HAProxy never outlive the test and collide with the next one's ports (issue 38
item 9)."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from tailpod.config import load_settings
from tailpod.ledger import Ledger
from tailpod.pods import lanes
from tests.helpers.local_runs import stop_local_runs

from .test_lanes_haproxy import _free_ports, _synthetic

pytestmark = pytest.mark.skipif(lanes.shutil.which("haproxy") is None
                                and not Path("/usr/sbin/haproxy").exists(),
                                reason="haproxy is not installed (scripts/system-requirements.sh)")


def _open(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) == 0


def test_lanes_left_up_by_a_test_are_stopped_with_its_home(tailpod_home: Path) -> None:
    settings = load_settings()
    ledger = Ledger(settings.state_dir)
    front, spec_port, plain_port = _free_ports(3)
    record = lanes.up_lanes(settings, ledger, [_synthetic("spec", spec_port),
                                               _synthetic("plain", plain_port)],
                            admission_limit=1, front_port=front, startup_timeout_s=60)
    assert all(_open(p) for p in (front, spec_port, plain_port))  # what a failed test leaves

    stop_local_runs(tailpod_home)  # what `tailpod_home` does when the test ends

    assert not any(_open(p) for p in (front, spec_port, plain_port))
    final = Ledger(settings.state_dir).get(record.run_tag)
    assert final is not None and final.status == "terminated"
