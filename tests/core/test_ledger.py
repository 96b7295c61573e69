from __future__ import annotations

import json
import multiprocessing
from pathlib import Path

import pytest

from tailpod.errors import TailpodError
from tailpod.ledger import Ledger, PodRecord


def _writer(home: str, worker: int, count: int) -> None:
    ledger = Ledger(Path(home))
    for i in range(count):
        ledger.put(PodRecord(run_tag=f"tp-w{worker}-{i}", provider="local"))
        ledger.update(f"tp-w{worker}-{i}", event="bump", status="running")


def test_concurrent_writers_lose_nothing(tmp_path: Path) -> None:
    ctx = multiprocessing.get_context("fork")
    procs = [ctx.Process(target=_writer, args=(str(tmp_path), w, 25)) for w in range(4)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
        assert p.exitcode == 0
    records = Ledger(tmp_path).all()
    assert len(records) == 100
    assert all(r.status == "running" and r.events[-1]["event"] == "bump" for r in records)


def test_failed_transaction_writes_nothing(tmp_path: Path) -> None:
    ledger = Ledger(tmp_path)
    ledger.put(PodRecord(run_tag="tp-a", provider="local"))
    with pytest.raises(RuntimeError), ledger.transaction() as pods:
        pods["tp-b"] = PodRecord(run_tag="tp-b", provider="local")
        raise RuntimeError("crash mid-way")
    assert [r.run_tag for r in ledger.all()] == ["tp-a"]
    assert not list(tmp_path.glob(".ledger.*.tmp"))


def test_file_is_private_and_versioned(tmp_path: Path) -> None:
    ledger = Ledger(tmp_path)
    ledger.put(PodRecord(run_tag="tp-a", provider="runpod", pod_id="abc"))
    assert (ledger.path.stat().st_mode & 0o777) == 0o600
    assert json.loads(ledger.path.read_text())["version"] == 1


def test_corrupt_ledger_is_refused_not_reset(tmp_path: Path) -> None:
    ledger = Ledger(tmp_path)
    ledger.put(PodRecord(run_tag="tp-a", provider="runpod"))
    ledger.path.write_text("{not json")
    with pytest.raises(TailpodError, match="unreadable"):
        ledger.all()
    assert ledger.path.read_text() == "{not json"


def test_resolve_rules(tmp_path: Path) -> None:
    ledger = Ledger(tmp_path)
    with pytest.raises(TailpodError, match="nothing is running") as nothing:
        ledger.resolve(None)
    assert nothing.value.exit_code == 2  # a usage error, like the others (docs/exit-codes.md)
    ledger.put(PodRecord(run_tag="tp-a", provider="local", status="running"))
    assert ledger.resolve(None).run_tag == "tp-a"
    ledger.put(PodRecord(run_tag="tp-b", provider="local", status="running"))
    with pytest.raises(TailpodError, match="several"):
        ledger.resolve(None)
    ledger.update("tp-b", status="terminated")
    assert ledger.resolve(None).run_tag == "tp-a"
    with pytest.raises(TailpodError, match="no pod"):
        ledger.resolve("tp-zzz")
