"""`down --all` and `down --expired` settle a lanes run whole: both lane engines and the HAProxy
in front, each process group gone and each port closed, also when the ledger record is lost (the
lanes directory is the local provider's own truth, like `<home>/local/<tag>/engine.json`)."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from tailpod.agent.bootstrap import engine
from tailpod.cli.main import app
from tailpod.config import load_settings
from tailpod.ledger import Ledger, PodRecord
from tailpod.pods import lanes
from tailpod.provision.local.provider import LocalProvider
from tailpod.provision.teardown import PROOF_FILE, run_dir_for

from .test_lanes_haproxy import _free_ports, _stream, _synthetic


@pytest.fixture(autouse=True)
def _results_in_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)  # the run directories (proofs, lanes.json) land under tmp_path


pytestmark = pytest.mark.skipif(lanes.shutil.which("haproxy") is None
                                and not Path("/usr/sbin/haproxy").exists(),
                                reason="haproxy is not installed (scripts/system-requirements.sh)")


def _group_exists(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    return True


def _port_open(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) == 0


@contextlib.contextmanager
def _lanes_up(settings: Any, ledger: Ledger
              ) -> Iterator[tuple[PodRecord, dict[str, int], dict[str, int]]]:
    """Two synthetic lanes behind HAProxy, one request streamed through them: the record, and
    the process groups and ports of the proxy and each lane, all killed on exit (_kill)."""
    front, spec_port, plain_port = _free_ports(3)
    record = lanes.up_lanes(settings, ledger, [_synthetic("spec", spec_port),
                                               _synthetic("plain", plain_port)],
                            admission_limit=1, front_port=front, startup_timeout_s=60)
    _stream(record.endpoint or "")
    proxy = LocalProvider(settings.home).engine_state(record.run_tag)
    assert proxy is not None
    pgids = {"proxy": int(proxy["pgid"])}
    for name, row in record.extra.lanes["lanes"].items():
        state = engine.read_state(Path(row["state_dir"]))
        assert state is not None
        pgids[name] = int(state["pgid"])
    ports = {"proxy": front, "spec": spec_port, "plain": plain_port}
    try:
        assert len(_left(pgids, ports)) == 6  # all three really up before the teardown under test
        yield record, pgids, ports
    finally:
        _kill(pgids)


def _left(pgids: dict[str, int], ports: dict[str, int]) -> list[str]:
    """What is still alive, read straight from the OS (kill -0, connect)."""
    return ([f"{what}: process group {pgid}" for what, pgid in pgids.items() if _group_exists(pgid)]
            + [f"{what}: port {port}" for what, port in ports.items() if _port_open(port)])


def _kill(pgids: dict[str, int]) -> None:
    """The test's own cleanup, by the recorded process groups, never through the code under test."""
    for pgid in pgids.values():
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pgid, signal.SIGKILL)


def _lanes_json(settings: Any, tag: str) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads((run_dir_for(settings, tag) / lanes.LANES_FILE).read_text())
    return doc


def _final_counts(settings: Any, tag: str) -> tuple[bool, dict[str, Any]]:
    doc = _lanes_json(settings, tag)
    return doc["counts_final"], {n: row["requests"] for n, row in doc["lanes"].items()}


def _lane_checks(settings: Any, tag: str) -> dict[str, bool]:
    proof = json.loads((run_dir_for(settings, tag) / PROOF_FILE).read_text())
    text = json.dumps(proof)
    return {name: f"lane {name} process group gone" in text and f"lane {name} port closed" in text
            for name in ("spec", "plain")}


@pytest.mark.parametrize("verb", ["--all", "--expired"])
def test_down_all_and_expired_stop_both_lanes_and_the_proxy(tailpod_home: Path, verb: str) -> None:
    settings = load_settings()
    ledger = Ledger(settings.state_dir)
    with _lanes_up(settings, ledger) as (record, pgids, ports):
        if verb == "--expired":
            ledger.update(record.run_tag, ttl_expires_at=time.time() - 1)
        res = CliRunner().invoke(app, ["down", verb, "--json"])
        left = _left(pgids, ports)
    assert res.exit_code == 0, res.output
    assert left == []
    final = Ledger(settings.state_dir).get(record.run_tag)
    assert final is not None and final.status == "terminated"
    assert _lane_checks(settings, record.run_tag) == {"spec": True, "plain": True}
    # lanes.json at `up` counted nothing; `down` rewrote it from the proxy's last counts: the one
    # request _up streamed, one at a time, went to the spec lane.
    assert _final_counts(settings, record.run_tag) == (True, {"spec": 1, "plain": 0})


def test_expired_spares_a_lanes_run_within_its_ttl(tailpod_home: Path) -> None:
    settings = load_settings()
    ledger = Ledger(settings.state_dir)
    with _lanes_up(settings, ledger) as (_record, pgids, ports):
        res = CliRunner().invoke(app, ["down", "--expired", "--json"])
        left = _left(pgids, ports)
    assert res.exit_code == 0, res.output
    assert len(left) == 6, f"stopped though its TTL has not passed; left only {left}"


@pytest.mark.parametrize("proxy_dead", [False, True])
def test_down_all_sweeps_lanes_whose_ledger_record_is_lost(tailpod_home: Path,
                                                           proxy_dead: bool) -> None:
    settings = load_settings()
    ledger = Ledger(settings.state_dir)
    with _lanes_up(settings, ledger) as (record, pgids, ports):
        with ledger.transaction() as pods:  # the record is lost: only the lanes directory knows
            pods.pop(record.run_tag)
        assert ledger.get(record.run_tag) is None
        if proxy_dead:  # the hardest case: only the lane engines are left running
            proxy = LocalProvider(settings.home).engine_state(record.run_tag)
            assert proxy is not None and engine.stop(proxy)
        listed = [i.run_tag for i in LocalProvider(settings.home).list_by_tag(None)]
        assert listed == [record.run_tag]
        res = CliRunner().invoke(app, ["down", "--all", "--json"])
        left = _left(pgids, ports)
    assert res.exit_code == 0, res.output
    assert left == []
    final = Ledger(settings.state_dir).get(record.run_tag)
    assert final is not None and final.status == "terminated"
    assert any(e.get("event") == "local-orphan-adopted" for e in final.events)
    assert _lane_checks(settings, record.run_tag) == {"spec": True, "plain": True}
    # With the record lost the counts come through the lanes directory's haproxy.cfg; with the
    # proxy dead there are none to read, and lanes.json says so, keeping `up`'s zero counts.
    assert _final_counts(settings, record.run_tag) == (
        (False, {"spec": 0, "plain": 0}) if proxy_dead else (True, {"spec": 1, "plain": 0}))
    assert LocalProvider(settings.home).list_by_tag(None) == []
