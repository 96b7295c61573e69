from __future__ import annotations

import json
import multiprocessing
from pathlib import Path

import pytest

from tailpod.errors import TailpodError
from tailpod.ledger import Ledger, PodRecord
from tests import paths


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


OLD_LEDGER = paths.FIXTURES / "ledger-extra-dict" / "ledger.json"


def test_a_ledger_written_when_extra_was_a_dict_reads_and_writes_the_same(tmp_path: Path) -> None:
    """Issue 24: PodRecord.extra has typed fields; a ledger written before (the fixture, by main
    c4d5cf6) reads each key into its field, keeps an unknown key, and is written back as it was."""
    raw = json.loads(OLD_LEDGER.read_text(encoding="utf-8"))
    (tmp_path / "ledger.json").write_text(OLD_LEDGER.read_text(encoding="utf-8"))
    ledger = Ledger(tmp_path)
    cloud = ledger.get("tp-20261201-aaaa")
    local = ledger.get("tp-20261201-bbbb")
    lanes = ledger.get("tp-20261201-cccc")
    assert cloud is not None and local is not None and lanes is not None
    assert cloud.extra.provider_ids == ["pod-1"] and cloud.extra.max_price is None
    assert cloud.extra.fallback_from == "NVIDIA H100"
    assert cloud.extra.image == {"ref": "vllm/vllm-openai:v0.11.0", "digest": "sha256:" + "ab" * 32}
    assert cloud.extra.arms["plain"]["startup_s"] == 41.5
    assert cloud.extra.deadman == {"ttl_at": 1_796_014_400.0, "pid": 4242,
                                   "heartbeat_timeout_s": 1800.0}
    assert cloud.extra.emulated is False and cloud.extra.ended_at == 1_796_003_590.0
    assert cloud.extra.other == {"a_later_key": {"kept": True}}
    assert local.extra.llama_server == "/usr/bin/llama-server" and local.extra.launch_warnings == []
    assert local.extra.mtp_ignore_patch == {"served_from": "/m/patched", "added": ["mtp.0"]}
    assert lanes.extra.lanes["admission_limit"] == 4
    assert [d["gone"] for d in lanes.extra.lanes_down] == [True, True]
    assert not cloud.extra.lanes  # not a lanes run
    for tag, record in raw["pods"].items():
        assert ledger.get(tag).to_json() == record  # type: ignore[union-attr]  # nulls kept too
    ledger.update("tp-20261201-bbbb", event="touch")  # a write of the whole ledger
    again = json.loads((tmp_path / "ledger.json").read_text(encoding="utf-8"))
    assert again["pods"]["tp-20261201-aaaa"] == raw["pods"]["tp-20261201-aaaa"]
    assert again["pods"]["tp-20261201-bbbb"]["extra"] == raw["pods"]["tp-20261201-bbbb"]["extra"]


def test_extra_given_as_its_json_form_is_read_into_its_fields() -> None:
    record = PodRecord(run_tag="tp-x-1", provider="local",
                       extra={"startup_s": 2.5, "lanes": {"admission_limit": 1}, "new": 1})
    assert record.extra.startup_s == 2.5 and record.extra.lanes == {"admission_limit": 1}
    assert record.extra.other == {"new": 1}
    record.extra.arms["plain"] = {"argv": ["x"]}
    assert record.to_json()["extra"] == {"startup_s": 2.5, "arms": {"plain": {"argv": ["x"]}},
                                         "lanes": {"admission_limit": 1}, "new": 1}
    assert PodRecord(run_tag="tp-x-2", provider="local").to_json()["extra"] == {}
