"""The one "engine-healthy" ledger entry (pods/journal.py), which cloud, your own box and this
machine all write: the record is running, the arm joins the arms served before it, and the
record's startup facts are that arm's."""

from __future__ import annotations

from pathlib import Path

from tailpod.config import load_settings
from tailpod.ledger import Ledger, PodExtra, PodRecord
from tailpod.pods import journal


def test_the_served_arm_joins_the_others_and_is_the_current_one(tailpod_home: Path) -> None:
    ledger = Ledger(load_settings().state_dir)
    plain = {"startup": {"facts": {"k": 0}}, "startup_s": 3.0, "argv": ["a"], "checkpoints": {}}
    ledger.put(PodRecord(run_tag="tp-j", provider="local", status="creating",
                         extra=PodExtra(arms={"plain": plain}, box="me@box")))
    record = ledger.get("tp-j")
    assert record is not None
    mtp = {"startup": {"facts": {"k": 2}}, "startup_s": 9.5, "argv": ["b"], "checkpoints": {}}
    got = journal.engine_healthy(ledger, record, "mtp-k2", mtp, machine={"gpus": []},
                                 engine_version="0.11.0", extra={"pod_state_dir": "/s"},
                                 endpoint="http://h:8000")
    stored = ledger.get("tp-j")
    assert stored is not None and stored.to_json() == got.to_json()
    assert (got.status, got.endpoint, got.events[-1]["event"]) == (
        "running", "http://h:8000", "engine-healthy")
    assert got.extra.arms == {"plain": plain, "mtp-k2": mtp}
    assert (got.extra.startup, got.extra.startup_s, got.extra.machine, got.extra.engine_version,
            got.extra.pod_state_dir, got.extra.box) == (
        {"facts": {"k": 2}}, 9.5, {"gpus": []}, "0.11.0", "/s", "me@box")
