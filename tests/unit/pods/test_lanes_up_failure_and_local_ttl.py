"""A lanes `up` that fails with a lane still alive, and the TTL of local lanes (issue 37 item 10;
docs/lanes.md). A failed `up` calls its record terminated only once every lane it started is
proven gone; a lane that outlived its stop leaves the record `failed`, for `down` to settle. The
lanes' record carries the TTL the settings give (TAILPOD_TTL_HOURS from the moment of `up`),
whether `up` succeeds or fails."""

from __future__ import annotations

import os
import signal
import sys
import time
from pathlib import Path

import pytest

from tailpod.agent.bootstrap import engine
from tailpod.config import load_settings
from tailpod.errors import TailpodError
from tailpod.ledger import Ledger
from tailpod.pods import lanes
from tailpod.pods.kinds import kind_for
from tailpod.provision.local.provider import LocalProvider

from .test_lanes_haproxy import _free_ports, _synthetic

pytestmark = pytest.mark.skipif(lanes.shutil.which("haproxy") is None
                                and not Path("/usr/sbin/haproxy").exists(),
                                reason="haproxy is not installed (scripts/system-requirements.sh)")

TTL_HOURS = 0.5


@pytest.fixture(autouse=True)
def _ttl_and_results(tmp_path: Path, tailpod_home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("TAILPOD_TTL_HOURS", str(TTL_HOURS))


def _dying(name: str, port: int) -> lanes.LaneLaunch:
    """A lane whose engine exits at once: `up` fails on it after the spec lane is healthy."""
    launch = _synthetic(name, port)
    launch.argv = [sys.executable, "-c", "import sys; print('engine died'); sys.exit(1)"]
    return launch


def _up_failing(monkeypatch: pytest.MonkeyPatch, stop_works: bool) -> tuple[Ledger, float]:
    settings = load_settings()
    ledger = Ledger(settings.state_dir)
    if not stop_works:  # the spec lane outlives the stop `up` sends it on failure
        monkeypatch.setattr(lanes, "_stop_started", lambda provider, tags: None)
    front, spec_port, plain_port = _free_ports(3)
    t0 = time.time()
    with pytest.raises(TailpodError, match="lane plain"):
        lanes.up_lanes(settings, ledger, [_synthetic("spec", spec_port),
                                          _dying("plain", plain_port)],
                       admission_limit=1, front_port=front, startup_timeout_s=30)
    return ledger, t0


def test_a_failed_up_with_a_lane_still_alive_stays_failed_for_down(
        monkeypatch: pytest.MonkeyPatch) -> None:
    ledger, t0 = _up_failing(monkeypatch, stop_works=False)
    (record,) = ledger.all()
    settings = load_settings()
    state = LocalProvider(lanes.lanes_home(settings, record.run_tag)).engine_state(
        f"{record.run_tag}-spec")
    assert state is not None
    try:
        assert engine.group_alive(int(state["pgid"]))  # the spec lane is still running
        assert record.status == "failed" and record.active  # not "terminated": it may still run
        assert record.ttl_expires_at is not None
        assert t0 + TTL_HOURS * 3600 <= record.ttl_expires_at <= time.time() + TTL_HOURS * 3600
    finally:
        os.killpg(int(state["pgid"]), signal.SIGKILL)


def test_a_failed_up_with_every_lane_stopped_is_terminated(
        monkeypatch: pytest.MonkeyPatch) -> None:
    ledger, _ = _up_failing(monkeypatch, stop_works=True)
    (record,) = ledger.all()
    assert record.status == "terminated"
    assert [e["event"] for e in record.events][-1] == "lanes-failed"


def test_local_lanes_carry_the_settings_ttl(monkeypatch: pytest.MonkeyPatch) -> None:
    settings = load_settings()
    ledger = Ledger(settings.state_dir)
    front, spec_port, plain_port = _free_ports(3)
    t0 = time.time()
    record = lanes.up_lanes(settings, ledger, [_synthetic("spec", spec_port),
                                               _synthetic("plain", plain_port)],
                            admission_limit=1, front_port=front, startup_timeout_s=30)
    try:
        assert record.status == "running"
        assert record.ttl_expires_at is not None
        assert t0 + TTL_HOURS * 3600 <= record.ttl_expires_at <= time.time() + TTL_HOURS * 3600
    finally:
        kind_for("local").down(settings, ledger, ledger.get(record.run_tag) or record)
