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
    assert (ledger.last_good_path.stat().st_mode & 0o777) == 0o600


@pytest.mark.parametrize("damage", [
    b'{"version": 1, "pods": {"tp-a": {"run_tag": "tp-a", "prov',  # a write torn mid-object
    bytes(range(256)) * 4,  # random bytes: not even UTF-8
    b"[]",  # valid JSON, not a ledger
])
def test_damaged_ledger_is_set_aside_and_restored_from_its_last_good_copy(
        tmp_path: Path, damage: bytes) -> None:
    ledger = Ledger(tmp_path)
    ledger.put(PodRecord(run_tag="tp-a", provider="runpod", pod_id="abc", status="running"))
    ledger.path.write_bytes(damage)
    assert [(r.run_tag, r.pod_id) for r in Ledger(tmp_path).active()] == [("tp-a", "abc")]
    kept = list(tmp_path.glob("ledger.damaged-*.json"))
    assert len(kept) == 1 and kept[0].read_bytes() == damage  # kept, byte for byte
    [notice] = ledger.pending_recovery()
    assert notice["restored_from"] == "ledger.last-good.json" and notice["set_aside"]
    ledger.settle_recovery("checked")
    assert ledger.pending_recovery() == []


def test_deleted_ledger_is_restored_from_the_copy(tmp_path: Path) -> None:
    ledger = Ledger(tmp_path)
    ledger.put(PodRecord(run_tag="tp-a", provider="runpod", status="running"))
    ledger.path.unlink()
    assert [r.run_tag for r in ledger.active()] == ["tp-a"]
    assert ledger.pending_recovery()[0]["damaged"] == {"ledger.json": "missing"}


def test_both_copies_damaged_starts_empty_and_says_so(tmp_path: Path) -> None:
    ledger = Ledger(tmp_path)
    ledger.put(PodRecord(run_tag="tp-a", provider="runpod", status="running"))
    ledger.path.write_bytes(b"\xff\xfe")
    ledger.last_good_path.write_text("{")
    assert ledger.all() == []
    [notice] = ledger.pending_recovery()
    assert notice["restored_from"] is None and len(notice["set_aside"]) == 2


def test_a_crash_between_the_two_writes_keeps_the_newer_generation(tmp_path: Path) -> None:
    ledger = Ledger(tmp_path)
    ledger.put(PodRecord(run_tag="tp-a", provider="runpod"))
    older = ledger.path.read_bytes()
    ledger.put(PodRecord(run_tag="tp-b", provider="runpod"))
    ledger.path.write_bytes(older)  # as if the second rename never happened
    assert [r.run_tag for r in ledger.all()] == ["tp-a", "tp-b"]
    assert ledger.pending_recovery() == []  # two readable generations are not damage


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


def test_a_home_other_users_can_write_is_refused_with_the_fix(tmp_path: Path) -> None:
    import os

    from tailpod.errors import ConfigError
    from tailpod.ledger import Ledger

    home = tmp_path / "shared-home"
    home.mkdir()
    os.chmod(home, 0o777)
    with pytest.raises(ConfigError) as err:
        Ledger(home).all()
    assert err.value.exit_code == 2 and f"chmod 700 {home}" in (err.value.hint or "")
    os.chmod(home, 0o700)
    assert Ledger(home).all() == []


def test_a_planted_lock_or_ledger_symlink_is_never_followed(tmp_path: Path) -> None:
    import os

    from tailpod.errors import ConfigError
    from tailpod.ledger import Ledger

    home = tmp_path / "home"
    home.mkdir(mode=0o700)
    target = tmp_path / "victim-file"
    os.symlink(target, home / "ledger.lock")
    with pytest.raises(ConfigError, match="symbolic link"):
        Ledger(home).all()
    assert not target.exists()  # tailpod created nothing through the link
    os.unlink(home / "ledger.lock")
    os.symlink(target, home / "ledger.json")
    with pytest.raises(ConfigError, match="symbolic link"):
        Ledger(home).all()
    assert not target.exists()
