"""`teardown`'s bookkeeping in provision/teardown.py, pinned against the mutants `make mutate`
left alive (issue #26, docs/testing.md "### provision/teardown.py"): what the proof file holds,
what the ledger records at each step, the exact lines a user reads when billing is not proven
or the disk refuses the record, and `down --all` on a full disk. The in-memory provider is the
one of test_teardown_retries_wait_verdict_and_sweep.py; every expected value is written out from the rule it checks."""

from __future__ import annotations

import errno
import time
from collections.abc import Iterable
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest

from tailpod.errors import BillingNotProven
from tailpod.ledger import Ledger, PodRecord
from tailpod.provision import teardown as teardown_py
from tailpod.provision.base import BillingEvidence, ProofCheck
from tailpod.provision.teardown import (
    LedgerUnwritable,
    LifecyclePolicy,
    UnprovenTeardown,
    teardown,
    teardown_all,
    teardown_expired,
)
from tests.unit.provision.test_teardown_retries_wait_verdict_and_sweep import (
    FAST,
    TAG,
    Fake,
    _ledger,
    _proof,
)


def _iso(t: float) -> str:
    """The proof's stamp, written out: UTC, whole seconds, `+00:00`."""
    return datetime.fromtimestamp(int(t), timezone.utc).strftime("%Y-%m-%dT%H:%M:%S+00:00")


def _events(ledger: Ledger, tag: str = TAG) -> list[tuple[str, dict[str, Any]]]:
    record = ledger.get(tag)
    assert record is not None
    return [(e["event"], {k: v for k, v in e.items() if k not in ("t", "event")})
            for e in record.events]


def _refuse_ledger(monkeypatch: pytest.MonkeyPatch, error: OSError) -> None:
    def refuse(*_args: object, **_kwargs: object) -> None:
        raise error

    monkeypatch.setattr(Ledger, "_write_file", refuse)


def _refuse_proof(monkeypatch: pytest.MonkeyPatch, error: OSError) -> None:
    def refuse(*_args: object, **_kwargs: object) -> None:
        raise error

    monkeypatch.setattr(teardown_py, "write_proof", refuse)


# -- the proof file ------------------------------------------------------------------------------

def test_the_proof_names_the_run_its_card_price_and_times(tmp_path: Path) -> None:
    fake = Fake()
    fake.add("p1")
    ledger, rec = _ledger(tmp_path, pod_id="p1", gpu="A40", price_per_hr=0.5,
                          created_at=1_700_000_000.0)
    before = datetime.now(timezone.utc).replace(microsecond=0)
    teardown(fake, ledger, rec, tmp_path / "run", policy=FAST)
    after = datetime.now(timezone.utc)
    proof = _proof(tmp_path / "run")
    assert set(proof) == {"schema", "run_tag", "provider", "pod_ids", "gpu", "price_per_hr",
                          "created_at", "checked_at", "proven", "checks", "still_billing",
                          "ended_at"}
    assert (proof["run_tag"], proof["gpu"], proof["price_per_hr"]) == (TAG, "A40", 0.5)
    assert proof["created_at"] == "2023-11-14T22:13:20+00:00"  # 1.7e9 s after the epoch
    for stamp in ("checked_at", "ended_at"):
        assert before <= datetime.fromisoformat(proof[stamp]) <= after, stamp
    assert proof["still_billing"] == []
    assert proof["checks"] == [
        {"name": "gone-from-provider", "passed": True, "informative": True,
         "detail": "the provider no longer lists or answers for p1"},
        {"name": "provider says gone", "passed": True, "informative": True, "detail": "ok"}]


def test_a_run_with_no_pod_id_is_proven_by_its_tag_and_asks_evidence_for_no_pod(
        tmp_path: Path) -> None:
    fake = Fake()
    ledger, rec = _ledger(tmp_path)  # a create that never got an id back
    teardown(fake, ledger, rec, tmp_path / "run", policy=FAST)
    assert fake.evidence_args[1] is None
    assert _proof(tmp_path / "run")["checks"][0]["detail"] == (
        f"the provider no longer lists or answers for anything tagged {TAG}")


def test_evidence_is_asked_for_the_first_known_id_when_the_record_has_no_pod_id(
        tmp_path: Path) -> None:
    fake = Fake()
    ledger, rec = _ledger(tmp_path, extra={"provider_ids": ["p7", "p8"]})
    teardown(fake, ledger, rec, tmp_path / "run", policy=FAST)
    assert fake.evidence_args[1] == "p7"


def test_an_unproven_run_with_no_id_still_says_what_to_retry(tmp_path: Path) -> None:
    fake = Fake()
    fake.evidence_checks = [ProofCheck("provider says gone", False, "the meter still moves")]
    ledger, rec = _ledger(tmp_path)
    with pytest.raises(UnprovenTeardown) as caught:
        teardown(fake, ledger, rec, tmp_path / "run", policy=FAST)
    assert caught.value.evidence.still_billing == [
        f"fakecloud: {TAG} (no id) is not proven gone — retry: tailpod down {TAG}"]


def test_evidence_that_cannot_be_read_says_why_in_its_check(tmp_path: Path) -> None:
    from tailpod.errors import ProviderError

    fake = Fake()
    fake.evidence_error = ProviderError("evidence API down")
    ledger, rec = _ledger(tmp_path, pod_id="p1")
    with pytest.raises(UnprovenTeardown) as caught:
        teardown(fake, ledger, rec, tmp_path / "run", policy=FAST)
    checks = [(c.name, c.passed, c.detail) for c in caught.value.evidence.checks]
    assert checks[-1] == ("provider-evidence", False, "could not read evidence: evidence API down")
    assert _proof(tmp_path / "run")["still_billing"] == caught.value.evidence.still_billing


def _refused_teardown(tmp_path: Path) -> tuple[Ledger, Path, UnprovenTeardown]:
    """The teardown of pod p1 whose every terminate the provider refuses: the ledger, the run
    directory its proof went to, and the UnprovenTeardown it raised."""
    fake = Fake()
    fake.add("p1")
    fake.terminate_fails = 10_000
    ledger, rec = _ledger(tmp_path, pod_id="p1")
    run_dir = tmp_path / "run"
    with pytest.raises(UnprovenTeardown) as caught:
        teardown(fake, ledger, rec, run_dir, policy=FAST)
    return ledger, run_dir, caught.value


# -- what a user reads when billing is not proven ---------------------------------------------------

def test_an_unproven_teardown_says_what_may_still_bill_and_where_the_proof_is(
        tmp_path: Path) -> None:
    ledger, run_dir, unproven = _refused_teardown(tmp_path)
    still = [f"fakecloud: {TAG} (p1) is not proven gone — retry: tailpod down {TAG}",
             "fakecloud pod p1: stop it by hand — the fakecloud console"]
    assert unproven.exit_code == 3
    terminate = unproven.evidence.checks[0]
    assert (terminate.name, terminate.passed, terminate.detail) == (
        "terminate p1", False, "terminate p1 refused")  # the provider's own answer
    assert unproven.message == f"billing is NOT proven stopped for {TAG}: " + " | ".join(still)
    assert unproven.hint == (f"kill it with `tailpod down {TAG}` or by hand as above "
                             f"(proof: {run_dir / 'billing-proof.json'})")
    assert _proof(run_dir)["still_billing"] == still


# -- the ledger's bookkeeping ----------------------------------------------------------------------

class WatchesTheLedger(Fake):
    """Reads the ledger's record each time the wait lists the pods (what a crash would leave)."""

    def __init__(self, ledger: Ledger) -> None:
        super().__init__()
        self.ledger = ledger
        self.seen: list[tuple[str, str | None]] = []

    def list_by_tag(self, run_tag: str | None = None) -> list[Any]:
        record = self.ledger.get(TAG)
        if record is not None:
            self.seen.append((record.status, record.operation.get("step")))
        return super().list_by_tag(run_tag)


def test_a_proven_teardown_records_each_step_and_where_its_proof_is(tmp_path: Path) -> None:
    ledger, rec = _ledger(tmp_path, pod_id="p1")
    fake = WatchesTheLedger(ledger)
    fake.add("p1")
    run_dir = tmp_path / "run"
    teardown(fake, ledger, rec, run_dir, policy=FAST)
    # the first listing comes before anything is written; the wait's, after "down"
    assert fake.seen[0] == ("running", None) and fake.seen[1] == ("terminating", "teardown")
    assert _events(ledger) == [("down", {"status": "terminating"}),
                               ("billing-proven", {"status": "terminated"}),
                               ("proof", {"path": str(run_dir / "billing-proof.json")})]
    stored = ledger.get(TAG)
    assert stored is not None and stored.status == "terminated" and stored.operation == {}
    assert stored.extra.ended_at is not None
    assert _proof(run_dir)["ended_at"] == _iso(stored.extra.ended_at)


def test_an_unproven_teardown_records_what_still_bills_and_stays_terminating(
        tmp_path: Path) -> None:
    ledger, run_dir, unproven = _refused_teardown(tmp_path)
    assert _events(ledger) == [
        ("down", {"status": "terminating"}),
        ("billing-not-proven", {"status": "terminating"}),
        ("proof", {"path": str(run_dir / "billing-proof.json"),
                   "still_billing": unproven.evidence.still_billing})]
    stored = ledger.get(TAG)
    assert stored is not None and stored.status == "terminating" and stored.operation == {}
    assert stored.extra.ended_at is None and "ended_at" not in _proof(run_dir)


def test_a_record_the_ledger_lost_is_written_back_and_proven(tmp_path: Path) -> None:
    fake = Fake()
    fake.add("p1")
    ledger = Ledger(tmp_path / "home")  # the record is not in it (damage set it aside)
    rec = PodRecord(run_tag=TAG, provider="fakecloud", status="running", pod_id="p1", gpu="A40")
    teardown(fake, ledger, rec, tmp_path / "run", policy=FAST)
    stored = ledger.get(TAG)
    assert stored is not None and (stored.status, stored.pod_id, stored.gpu) == (
        "terminated", "p1", "A40")
    assert [e for e, _ in _events(ledger)] == ["down", "billing-proven", "proof"]


def test_the_ledgers_record_is_the_one_torn_down(tmp_path: Path) -> None:
    fake = Fake()
    fake.add("p1")
    fake.add("p2")
    ledger, _ = _ledger(tmp_path, pod_id="p1", gpu="H200", price_per_hr=3.0)
    stale = PodRecord(run_tag=TAG, provider="fakecloud", status="intent", gpu="A40")
    teardown(fake, ledger, stale, tmp_path / "run", policy=FAST)
    proof = _proof(tmp_path / "run")
    assert (proof["gpu"], proof["price_per_hr"]) == ("H200", 3.0)
    assert fake.terminated[0] == "p1" and fake.evidence_args[1] == "p1"


def test_a_record_proven_before_it_kept_ended_at_keeps_its_first_proofs_time(
        tmp_path: Path) -> None:
    fake = Fake()
    proven_at = 1_700_000_000.0
    ledger, rec = _ledger(tmp_path, pod_id="p1")
    ledger.update(TAG, status="terminated")
    with ledger.transaction() as pods:  # an older tailpod kept the end as an event only
        pods[TAG].events = [{"t": proven_at, "event": "billing-proven", "status": "terminated"}]
    teardown(fake, ledger, rec, tmp_path / "run", policy=FAST)
    stored = ledger.get(TAG)
    assert stored is not None and stored.extra.ended_at == proven_at
    assert _proof(tmp_path / "run")["ended_at"] == "2023-11-14T22:13:20+00:00"


# -- the disk refuses -----------------------------------------------------------------------------

def test_a_full_disk_after_a_proven_teardown_is_exit_3_and_says_nothing_is_recorded(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fake = Fake()
    fake.add("p1")
    ledger, rec = _ledger(tmp_path, pod_id="p1")
    run_dir = tmp_path / "results" / TAG
    _refuse_ledger(monkeypatch, OSError(errno.ENOSPC, "No space left on device"))
    proof_file = str(run_dir / "billing-proof.json")
    _refuse_proof(monkeypatch, OSError(errno.EROFS, "Read-only file system", proof_file))
    with pytest.raises(LedgerUnwritable) as caught:
        teardown(fake, ledger, rec, run_dir, policy=FAST)
    assert fake.pods == {} and fake.terminated == ["p1"]  # the terminate went out first
    assert caught.value.exit_code == 3 and caught.value.proof_path is None
    assert caught.value.evidence.proven
    # each refusal once, sorted: the ledger refused two writes (down, billing-proven), the proof one
    assert caught.value.message == (
        f"{TAG}: terminate sent, billing proven stopped at the provider; but the disk refused "
        f"the ledger or the proof (No space left on device (ledger); Read-only file system "
        f"({proof_file})), so nothing of it is recorded")
    assert caught.value.hint == (
        f"free space under {ledger.home} and {tmp_path / 'results'}, then run "
        f"`tailpod down {TAG}` again to prove and record it")
    monkeypatch.undo()
    assert [e for e, _ in _events(ledger)] == []  # nothing of it reached the ledger


def test_a_full_disk_on_an_unproven_teardown_still_names_what_may_bill(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fake = Fake()
    fake.add("p1")
    fake.terminate_fails = 10_000
    ledger, rec = _ledger(tmp_path, pod_id="p1")
    _refuse_ledger(monkeypatch, PermissionError())  # no errno, no text, no file name
    with pytest.raises(LedgerUnwritable) as caught:
        teardown(fake, ledger, rec, tmp_path / "run", policy=FAST)
    still = [f"fakecloud: {TAG} (p1) is not proven gone — retry: tailpod down {TAG}",
             "fakecloud pod p1: stop it by hand — the fakecloud console"]
    assert caught.value.evidence.still_billing == still
    assert caught.value.message == (
        f"{TAG}: terminate sent, billing is NOT proven stopped: {' | '.join(still)}; but the "
        "disk refused the ledger or the proof (PermissionError (ledger)), so nothing of it is "
        "recorded")
    assert caught.value.proof_path is None
    # the proof file itself could be written: it says what may bill
    assert _proof(tmp_path / "run")["still_billing"] == still


def test_a_proof_the_disk_refuses_leaves_the_ledger_proven_but_exits_3(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fake = Fake()
    ledger, rec = _ledger(tmp_path, pod_id="p1")
    _refuse_proof(monkeypatch, OSError(errno.ENOSPC, "No space left on device"))
    with pytest.raises(LedgerUnwritable) as caught:
        teardown(fake, ledger, rec, tmp_path / "run", policy=FAST)
    assert "(No space left on device (ledger))" in caught.value.message
    assert not (tmp_path / "run" / "billing-proof.json").exists()
    stored = ledger.get(TAG)
    assert stored is not None and stored.status == "terminated"
    assert stored.extra.ended_at is not None
    # no file to point at: the note says so instead of naming one
    assert _events(ledger)[-1] == ("proof", {
        "path": None,
        "not_written": f"the disk refused {tmp_path / 'run' / 'billing-proof.json'}"})


def test_down_all_on_a_full_disk_is_unproven_with_no_proof_path(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fake = Fake()
    fake.add("p1")
    ledger, _ = _ledger(tmp_path, pod_id="p1")
    _refuse_ledger(monkeypatch, OSError(errno.ENOSPC, "No space left on device"))
    _refuse_proof(monkeypatch, OSError(errno.ENOSPC, "No space left on device"))
    outcomes = teardown_all({"fakecloud": fake}, ledger, lambda tag: tmp_path / tag, policy=FAST)
    assert [(o.run_tag, o.proven, o.proof_path) for o in outcomes] == [(TAG, False, None)]
    assert outcomes[0].error is not None and outcomes[0].error.startswith(
        f"{TAG}: terminate sent, billing proven stopped at the provider; but the disk refused")
    assert fake.pods == {}
    with pytest.raises(BillingNotProven):
        teardown_py.raise_if_unproven(outcomes)


# -- the verdict's lines --------------------------------------------------------------------------

def test_pods_still_listed_are_each_named_in_the_proof_and_the_retry_line(tmp_path: Path) -> None:
    fake = Fake()
    fake.add("p1")
    fake.add("p2")
    fake.sticky = {"p1", "p2"}  # terminate answers, the provider keeps listing them
    ledger, rec = _ledger(tmp_path, pod_id="p1", extra={"provider_ids": ["p2"]})
    policy = LifecyclePolicy(terminate_attempts=1, gone_timeout_s=0.2, poll_interval_s=0.01)
    with pytest.raises(UnprovenTeardown) as caught:
        teardown(fake, ledger, rec, tmp_path / "run", policy=policy)
    gone = caught.value.evidence.checks[0]
    assert gone.name == "gone-from-provider" and gone.passed is False
    assert gone.detail.startswith("still visible after ") and gone.detail.endswith(" s: p1, p2")
    assert caught.value.evidence.still_billing == [
        f"fakecloud: {TAG} (p1, p2) is not proven gone — retry: tailpod down {TAG}",
        "fakecloud pod p1: stop it by hand — the fakecloud console",
        "fakecloud pod p2: stop it by hand — the fakecloud console"]


class NamesWhatBills(Fake):
    """A provider whose evidence fails and says itself what still bills."""

    def billing_evidence(self, run_tag: str, pod_id: str | None, price_per_hr: float | None,
                         *, known_active_tags: Iterable[str] = ()) -> BillingEvidence:
        return BillingEvidence([ProofCheck("meter", False, "still moving")],
                               [f"fakecloud: {run_tag} meter moves at $0.50/hr"])


def test_a_provider_that_names_what_bills_is_not_given_a_second_retry_line(
        tmp_path: Path) -> None:
    fake = NamesWhatBills()
    ledger, rec = _ledger(tmp_path, pod_id="p1")
    with pytest.raises(UnprovenTeardown) as caught:
        teardown(fake, ledger, rec, tmp_path / "run", policy=FAST)
    assert caught.value.evidence.still_billing == [
        f"fakecloud: {TAG} meter moves at $0.50/hr",
        "fakecloud pod p1: stop it by hand — the fakecloud console"]


def test_a_side_proof_that_raises_is_written_as_failed_in_the_proof(tmp_path: Path) -> None:
    from tailpod.errors import ProviderError

    fake = Fake()
    ledger, rec = _ledger(tmp_path, pod_id="p1")

    def broken() -> list[ProofCheck]:
        raise ProviderError("tailnet API down")

    with pytest.raises(UnprovenTeardown):
        teardown(fake, ledger, rec, tmp_path / "run", policy=FAST, extra_proofs=broken)
    last = _proof(tmp_path / "run")["checks"][-1]
    assert last["name"] == "extra-proof" and last["passed"] is False
    assert last["detail"] == "tailnet API down"


# -- the proof file on disk, and `down --expired` on today's clock ----------------------------------

def test_the_proof_lands_in_a_results_folder_that_does_not_exist_yet(tmp_path: Path) -> None:
    fake = Fake()
    ledger, rec = _ledger(tmp_path, pod_id="p1")
    run_dir = tmp_path / "results" / "nested" / TAG  # no part of it exists yet
    teardown(fake, ledger, rec, run_dir, policy=FAST)
    assert _proof(run_dir)["proven"] is True


def test_the_proof_is_indented_sorted_json_ending_in_a_newline(tmp_path: Path) -> None:
    fake = Fake()
    ledger, rec = _ledger(tmp_path, pod_id="p1")
    teardown(fake, ledger, rec, tmp_path / "run", policy=FAST)
    text = (tmp_path / "run" / "billing-proof.json").read_text(encoding="utf-8")
    keys = [line.split('"')[1] for line in text.splitlines() if line.startswith('  "')]
    assert keys == sorted(keys) and keys[0] == "checked_at"  # top-level keys, two spaces in
    assert text.endswith("}\n") and not text.endswith("\n\n")
    assert '\n    {\n      "detail": ' in text  # each check two more spaces in, keys sorted


def test_down_expired_without_a_clock_reads_todays_time(tmp_path: Path) -> None:
    fake = Fake()
    fake.add("old", tag="tp-old")
    fake.add("young", tag="tp-young")
    ledger = Ledger(tmp_path / "home")
    now = time.time()
    ledger.put(PodRecord(run_tag="tp-old", provider="fakecloud", status="running",
                         pod_id="old", ttl_expires_at=now - 60))
    ledger.put(PodRecord(run_tag="tp-young", provider="fakecloud", status="running",
                         pod_id="young", ttl_expires_at=now + 3600))
    outcomes = teardown_expired({"fakecloud": fake}, ledger, lambda tag: tmp_path / tag,
                                policy=FAST)
    assert [(o.run_tag, o.proven) for o in outcomes] == [("tp-old", True)]
    assert set(fake.pods) == {"young"}


def test_down_expired_settles_a_run_whose_ttl_ends_this_very_second(tmp_path: Path) -> None:
    fake = Fake()
    fake.add("due", tag="tp-due")
    ledger = Ledger(tmp_path / "home")
    ledger.put(PodRecord(run_tag="tp-due", provider="fakecloud", status="running",
                         pod_id="due", ttl_expires_at=200.0))
    outcomes = teardown_expired({"fakecloud": fake}, ledger, lambda tag: tmp_path / tag,
                                now=200.0, policy=FAST)
    assert [o.run_tag for o in outcomes] == ["tp-due"] and fake.pods == {}


def test_down_expired_uses_the_policy_it_is_given(tmp_path: Path) -> None:
    fake = Fake()
    fake.add("old", tag="tp-old")
    fake.terminate_fails = 2  # the batch's first terminate and teardown's first attempt
    ledger = Ledger(tmp_path / "home")
    ledger.put(PodRecord(run_tag="tp-old", provider="fakecloud", status="running",
                         pod_id="old", ttl_expires_at=100.0))
    said: list[str] = []
    policy = LifecyclePolicy(terminate_attempts=3, terminate_retry_s=0.001, gone_timeout_s=0.5,
                             poll_interval_s=0.01, progress=said.append)
    outcomes = teardown_expired({"fakecloud": fake}, ledger, lambda tag: tmp_path / tag,
                                now=200.0, policy=policy)
    assert [o.proven for o in outcomes] == [True]
    assert said == ["terminate old failed (terminate old refused); attempt 2/3 in 0 s"]
