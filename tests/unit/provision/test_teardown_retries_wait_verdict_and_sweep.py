"""The teardown's money paths in provision/teardown.py, one rule at a time, against an in-memory
provider the test scripts: terminate retries, the wait until gone, the proof's verdict, the
failed-create sweep and `down --all`'s verdict. Written to kill the mutants `make mutate` found
surviving (docs/testing.md); every expected value is written out from the rule it checks."""

from __future__ import annotations

import json
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pytest

from tailpod.config import ttl_deadline
from tailpod.errors import BillingNotProven, CapacityError, ConfigError, ProviderError
from tailpod.ledger import Ledger, PodRecord
from tailpod.provision.base import BillingEvidence, PodInfo, PodSpec, PodState, ProofCheck, Provider
from tailpod.provision.create import create_pod_safely
from tailpod.provision.teardown import (
    LifecyclePolicy,
    TeardownOutcome,
    UnprovenTeardown,
    _still_there,
    manual_stop,
    raise_if_unproven,
    teardown,
    teardown_all,
    teardown_expired,
    terminate_with_retries,
    wait_gone,
)

TAG = "tp-20260101-000000-eeeeee"
FAST = LifecyclePolicy(terminate_attempts=3, terminate_retry_s=0.001, gone_timeout_s=0.5,
                       poll_interval_s=0.01, reterminate_every=2, sweep_timeout_s=0.5)


class Fake(Provider):
    """Pods live in `pods` until terminated; `listing_fails` / `terminate_fails` script errors."""

    name = "fakecloud"

    def __init__(self) -> None:
        self.pods: dict[str, PodInfo] = {}
        self.terminated: list[str] = []
        self.terminate_fails = 0  # the next N terminates raise
        self.sticky: set[str] = set()  # terminate answers, the pod stays listed
        self.listing_fails = 0  # the next N listings raise
        self.get_fails = False
        self.evidence_checks: list[ProofCheck] = [ProofCheck("provider says gone", True, "ok")]
        self.evidence_error: Exception | None = None
        self.create_error: BaseException | None = None
        self.made_on_create: str | None = None

    def add(self, pod_id: str, tag: str | None = TAG, price: float | None = 0.5) -> None:
        self.pods[pod_id] = PodInfo(pod_id, tag, PodState.RUNNING, gpu_type="A40",
                                    price_per_hr=price)

    def offers(self, gpu_preference: list[str], gpu_count: int,
               max_price: float | None) -> list[Any]:
        return []

    def create(self, spec: PodSpec) -> PodInfo:
        if self.made_on_create:
            self.add(self.made_on_create, spec.run_tag)
            if self.on_created is not None:
                self.on_created(self.made_on_create)
        if self.create_error is not None:
            raise self.create_error
        self.add("new-pod", spec.run_tag, price=0.42)
        return self.pods["new-pod"]

    def get(self, pod_id: str) -> PodInfo | None:
        if self.get_fails:
            raise ProviderError("get failed")
        return self.pods.get(pod_id)

    def list_by_tag(self, run_tag: str | None = None) -> list[PodInfo]:
        if self.listing_fails:
            self.listing_fails -= 1
            raise ProviderError("listing outage")
        return [p for p in self.pods.values()
                if (p.run_tag is not None if run_tag is None else p.run_tag == run_tag)]

    def terminate(self, pod_id: str) -> None:
        self.terminated.append(pod_id)
        if self.terminate_fails:
            self.terminate_fails -= 1
            raise ProviderError(f"terminate {pod_id} refused")
        if pod_id not in self.sticky:
            self.pods.pop(pod_id, None)

    def billing_evidence(self, run_tag: str, pod_id: str | None, price_per_hr: float | None,
                         *, known_active_tags: Iterable[str] = ()) -> BillingEvidence:
        if self.evidence_error is not None:
            raise self.evidence_error
        self.evidence_args = (run_tag, pod_id, price_per_hr, set(known_active_tags))
        return BillingEvidence(list(self.evidence_checks))


def _ledger(tmp_path: Path, **record: Any) -> tuple[Ledger, PodRecord]:
    ledger = Ledger(tmp_path / "home")
    rec = PodRecord(run_tag=TAG, provider="fakecloud", status="running", **record)
    ledger.put(rec)
    return ledger, rec


# -- the policy --------------------------------------------------------------------------------

def test_a_policy_without_a_deadline_waits_what_is_wanted() -> None:
    policy = LifecyclePolicy()
    assert policy.within(None) is policy and policy.left(7.5) == 7.5
    bounded = policy.within(10.0)
    assert bounded.deadline is not None and 9.0 < bounded.deadline - time.monotonic() <= 10.0
    assert 4.9 < bounded.left(5.0) <= 5.0  # less than what is left: all of it
    assert 9.0 < bounded.left(60.0) <= 10.0  # more than what is left: cut
    assert LifecyclePolicy(deadline=time.monotonic() - 5).left(3.0) == 0.0  # never below zero


def test_progress_lines_are_redacted() -> None:
    from tailpod.secrets import Secret

    key = "rp_LIFECYCLEprogressKEY_0123456"
    Secret(key)
    said: list[str] = []
    LifecyclePolicy(progress=said.append).say(f"retrying with {key}")
    assert said == ["retrying with ***"]
    LifecyclePolicy().say("nobody listens")  # no progress callback: nothing raised


# -- terminate -----------------------------------------------------------------------------------

def test_terminate_is_retried_with_growing_pauses_then_succeeds(monkeypatch: pytest.MonkeyPatch
                                                                ) -> None:
    slept: list[float] = []
    monkeypatch.setattr("tailpod.provision.teardown.time.sleep", slept.append)
    fake = Fake()
    fake.add("p1")
    fake.terminate_fails = 2
    said: list[str] = []
    policy = LifecyclePolicy(terminate_attempts=3, terminate_retry_s=2.0, progress=said.append)
    terminate_with_retries(fake, "p1", policy)
    assert fake.terminated == ["p1", "p1", "p1"] and "p1" not in fake.pods
    assert slept == [2.0, 4.0]  # retry_s * attempt number
    assert said == ["terminate p1 failed (terminate p1 refused); attempt 2/3 in 2 s",
                    "terminate p1 failed (terminate p1 refused); attempt 3/3 in 4 s"]


def test_terminate_failing_every_time_raises_the_last_error(monkeypatch: pytest.MonkeyPatch
                                                            ) -> None:
    slept: list[float] = []
    monkeypatch.setattr("tailpod.provision.teardown.time.sleep", slept.append)
    fake = Fake()
    fake.terminate_fails = 10
    with pytest.raises(ProviderError, match="terminate p1 refused"):
        terminate_with_retries(fake, "p1", LifecyclePolicy(terminate_attempts=3,
                                                            terminate_retry_s=1.0))
    assert len(fake.terminated) == 3 and slept == [1.0, 2.0]
    fake.terminated.clear()
    with pytest.raises(ProviderError):
        terminate_with_retries(fake, "p1", LifecyclePolicy(terminate_attempts=0))
    assert len(fake.terminated) == 1  # at least one attempt, always


def test_terminate_stops_retrying_at_the_deadline_and_says_so() -> None:
    fake = Fake()
    fake.terminate_fails = 10
    said: list[str] = []
    policy = LifecyclePolicy(terminate_attempts=5, terminate_retry_s=1.0,
                             deadline=time.monotonic() - 1, progress=said.append)
    with pytest.raises(ProviderError):
        terminate_with_retries(fake, "p1", policy)
    assert len(fake.terminated) == 1
    assert said == ["terminate p1 failed (terminate p1 refused); --timeout reached, no more "
                    "retries"]


# -- waiting until gone ----------------------------------------------------------------------------

def test_still_there_joins_the_listing_and_the_direct_lookups() -> None:
    fake = Fake()
    fake.add("b")
    fake.add("unlisted", tag=None)  # untagged: only the direct lookup sees it
    assert _still_there(fake, TAG, ["unlisted", "gone"]) == ["b", "unlisted"]
    assert _still_there(fake, "tp-other", ["gone"]) == []


def test_wait_gone_returns_once_nothing_is_visible() -> None:
    fake = Fake()
    assert wait_gone(fake, TAG, ["p1"], FAST, 5.0) == (True, [])


def test_wait_gone_resends_terminate_every_few_polls_until_gone() -> None:
    fake = Fake()
    fake.add("p1")
    fake.sticky = {"p1"}
    calls = {"n": 0}
    real = fake.terminate

    def terminate(pod_id: str) -> None:
        calls["n"] += 1
        if calls["n"] == 2:
            fake.sticky.clear()  # the second re-send is the one that takes
        real(pod_id)

    fake.terminate = terminate  # type: ignore[method-assign]
    gone, still = wait_gone(fake, TAG, ["p1"], FAST, 5.0)
    assert (gone, still) == (True, [])
    assert calls["n"] == 2


def test_wait_gone_times_out_naming_what_is_still_there() -> None:
    fake = Fake()
    fake.add("p1")
    fake.sticky = {"p1"}
    started = time.monotonic()
    gone, still = wait_gone(fake, TAG, ["p1"], FAST, 0.2)
    assert (gone, still) == (False, ["p1"])
    assert time.monotonic() - started >= 0.2


def test_an_outage_during_the_wait_is_never_read_as_gone() -> None:
    fake = Fake()
    fake.listing_fails = 10_000
    gone, still = wait_gone(fake, TAG, ["p1", "p0"], FAST, 0.15)
    assert (gone, still) == (False, ["p0", "p1"])


def test_the_wait_reports_progress_every_interval() -> None:
    fake = Fake()
    fake.add("p1")
    fake.sticky = {"p1"}
    said: list[str] = []
    policy = LifecyclePolicy(poll_interval_s=0.01, reterminate_every=1000, progress=said.append,
                             progress_every_s=0.05)
    wait_gone(fake, TAG, ["p1"], policy, 0.3)
    assert 2 <= len(said) <= 7, said
    assert said[0].startswith("waiting for fakecloud to stop listing p1 (")
    assert said[0].endswith(" s of at most 0 s; terminate is re-sent)")


def test_the_wait_ends_at_the_policy_deadline() -> None:
    fake = Fake()
    fake.add("p1")
    fake.sticky = {"p1"}
    policy = LifecyclePolicy(poll_interval_s=0.01, deadline=time.monotonic() + 0.1)
    started = time.monotonic()
    assert wait_gone(fake, TAG, ["p1"], policy, 60.0) == (False, ["p1"])
    assert time.monotonic() - started < 30.0  # not the 60 s asked for


# -- teardown --------------------------------------------------------------------------------------

def _proof(run_dir: Path) -> dict[str, Any]:
    return json.loads((run_dir / "billing-proof.json").read_text())


def test_a_proven_teardown_terminates_every_id_and_records_the_end(tmp_path: Path) -> None:
    fake = Fake()
    fake.add("p1")
    fake.add("stray")  # tagged, never recorded: found by the first listing
    ledger, rec = _ledger(tmp_path, pod_id="p1", price_per_hr=0.5,
                          extra={"provider_ids": ["p0"]})
    run_dir = tmp_path / "run"
    ev = teardown(fake, ledger, rec, run_dir, policy=FAST)
    assert ev.proven
    assert fake.terminated == ["p1", "p0", "stray"] and fake.pods == {}
    assert fake.evidence_args == (TAG, "p1", 0.5, set())
    proof = _proof(run_dir)
    assert proof["proven"] is True and proof["pod_ids"] == ["p1", "p0", "stray"]
    assert proof["schema"] == "tailpod.billing-proof/1" and proof["provider"] == "fakecloud"
    assert [c["name"] for c in proof["checks"]] == ["gone-from-provider", "provider says gone"]
    assert proof["checks"][0]["detail"] == (
        "the provider no longer lists or answers for p1, p0, stray")
    stored = ledger.get(TAG)
    assert stored is not None and stored.status == "terminated"
    assert isinstance(stored.extra.ended_at, float)
    assert "ended_at" in proof


def test_a_second_proof_keeps_the_first_end(tmp_path: Path) -> None:
    fake = Fake()
    ledger, rec = _ledger(tmp_path, pod_id="p1")
    teardown(fake, ledger, rec, tmp_path / "run", policy=FAST)
    first = ledger.get(TAG)
    assert first is not None
    ended = first.extra.ended_at
    time.sleep(1.1)  # the proof's stamp has whole seconds
    teardown(fake, ledger, first, tmp_path / "run", policy=FAST)
    again = ledger.get(TAG)
    assert again is not None and again.extra.ended_at == ended
    assert _proof(tmp_path / "run")["ended_at"] == time.strftime(
        "%Y-%m-%dT%H:%M:%S+00:00", time.gmtime(int(ended)))


def test_a_failed_terminate_fails_the_proof_and_names_the_manual_stop(tmp_path: Path) -> None:
    fake = Fake()
    fake.add("p1")
    fake.terminate_fails = 10_000
    ledger, rec = _ledger(tmp_path, pod_id="p1")
    with pytest.raises(UnprovenTeardown) as caught:
        teardown(fake, ledger, rec, tmp_path / "run", policy=FAST)
    ev = caught.value.evidence
    names = {c.name: c.passed for c in ev.checks}
    assert names["terminate p1"] is False and names["gone-from-provider"] is False
    assert ev.still_billing == [
        f"fakecloud: {TAG} (p1) is not proven gone — retry: tailpod down {TAG}",
        "fakecloud pod p1: stop it by hand — the fakecloud console"]
    assert caught.value.proof_path == tmp_path / "run" / "billing-proof.json"
    assert _proof(tmp_path / "run")["proven"] is False
    stored = ledger.get(TAG)
    assert stored is not None and stored.status == "terminating"


def test_a_teardown_that_cannot_read_evidence_is_unproven(tmp_path: Path) -> None:
    fake = Fake()
    fake.evidence_error = ProviderError("evidence API down")
    ledger, rec = _ledger(tmp_path, pod_id="p1")
    with pytest.raises(UnprovenTeardown) as caught:
        teardown(fake, ledger, rec, tmp_path / "run", policy=FAST)
    ev = caught.value.evidence
    assert [c.name for c in ev.checks if not c.passed] == ["provider-evidence"]
    assert ev.still_billing[0] == (f"fakecloud: cannot verify {TAG} (evidence API down) — "
                                   f"retry: tailpod down {TAG}")


def test_a_failed_side_proof_names_its_own_cause_not_the_pod(tmp_path: Path) -> None:
    fake = Fake()
    ledger, rec = _ledger(tmp_path, pod_id="p1")
    side = [ProofCheck("tailnet device gone", False, "device d1 still listed")]
    with pytest.raises(UnprovenTeardown) as caught:
        teardown(fake, ledger, rec, tmp_path / "run", policy=FAST, extra_proofs=lambda: side)
    ev = caught.value.evidence
    assert [c.name for c in ev.checks][-1] == "tailnet device gone"
    # The pod is gone: the side step is said in the error's own words, not as still billing.
    assert ev.still_billing == []
    assert caught.value.message == (
        f"{TAG}: billing proven stopped (fakecloud shows the pod gone), but a step of its "
        "teardown failed: tailnet device gone failed (device d1 still listed)")


def test_a_side_proof_that_raises_is_a_failed_check(tmp_path: Path) -> None:
    fake = Fake()
    ledger, rec = _ledger(tmp_path, pod_id="p1")

    def broken() -> list[ProofCheck]:
        raise ProviderError("tailnet API down")

    with pytest.raises(UnprovenTeardown) as caught:
        teardown(fake, ledger, rec, tmp_path / "run", policy=FAST, extra_proofs=broken)
    failed = [c for c in caught.value.evidence.checks if not c.passed]
    assert [(c.name, c.detail) for c in failed] == [("extra-proof", "tailnet API down")]


def test_the_ledgers_other_live_runs_of_this_provider_are_known(tmp_path: Path) -> None:
    fake = Fake()
    ledger, rec = _ledger(tmp_path, pod_id="p1")
    ledger.put(PodRecord(run_tag="tp-live", provider="fakecloud", status="running"))
    ledger.put(PodRecord(run_tag="tp-elsewhere", provider="othercloud", status="running"))
    ledger.put(PodRecord(run_tag="tp-done", provider="fakecloud", status="terminated"))
    teardown(fake, ledger, rec, tmp_path / "run", policy=FAST)
    assert fake.evidence_args[3] == {"tp-live"}
    teardown(fake, ledger, rec, tmp_path / "run", policy=FAST, known_active_tags={TAG, "tp-x"})
    assert fake.evidence_args[3] == {"tp-x"}


def test_the_first_listing_failing_is_noted_and_the_wait_still_runs(tmp_path: Path) -> None:
    fake = Fake()
    fake.listing_fails = 1
    ledger, rec = _ledger(tmp_path, pod_id="p1")
    teardown(fake, ledger, rec, tmp_path / "run", policy=FAST)
    assert _proof(tmp_path / "run")["checks"][0]["detail"] == (
        "the provider no longer lists or answers for p1; first listing failed (listing outage)")


def test_a_pod_still_listed_at_the_timeout_says_how_long_it_waited(tmp_path: Path) -> None:
    fake = Fake()
    fake.add("p1")
    fake.sticky = {"p1"}
    ledger, rec = _ledger(tmp_path, pod_id="p1")
    policy = LifecyclePolicy(terminate_attempts=1, gone_timeout_s=5.0, poll_interval_s=0.01,
                             deadline=time.monotonic() + 0.2)
    with pytest.raises(UnprovenTeardown) as caught:
        teardown(fake, ledger, rec, tmp_path / "run", policy=policy)
    gone = next(c for c in caught.value.evidence.checks if c.name == "gone-from-provider")
    assert gone.detail == "still visible after 0 s (the --timeout ran out): p1"
    # without a deadline the wait ran its whole length: nothing was cut short
    policy = LifecyclePolicy(terminate_attempts=1, gone_timeout_s=0.2, poll_interval_s=0.01)
    with pytest.raises(UnprovenTeardown) as caught:
        teardown(fake, ledger, rec, tmp_path / "run", policy=policy)
    gone = next(c for c in caught.value.evidence.checks if c.name == "gone-from-provider")
    assert gone.detail == "still visible after 0 s: p1"


# -- down --all's verdict ----------------------------------------------------------------------------

def _outcome(proven: bool, error: str | None = None, still: list[str] | None = None,
             evidence: bool = True) -> TeardownOutcome:
    ev = BillingEvidence([ProofCheck("c", proven, "d")], still or []) if evidence else None
    return TeardownOutcome(TAG, "runpod", ev, error)


def test_an_outcome_is_proven_only_with_evidence_that_proves_and_no_error() -> None:
    assert _outcome(True).proven
    assert not _outcome(False).proven
    assert not _outcome(True, error="listing failed").proven
    assert not _outcome(True, evidence=False).proven


def test_raise_if_unproven_names_each_unproven_outcome() -> None:
    raise_if_unproven([_outcome(True), _outcome(True)])  # all proven: nothing raised
    with pytest.raises(BillingNotProven) as caught:
        raise_if_unproven([_outcome(True), _outcome(False, still=["pod p9 bills"]),
                           TeardownOutcome("*", "runpod", None, "listing failed: 503"),
                           TeardownOutcome("*", "nocloud", None, "listing failed: 500")])
    assert caught.value.message == (
        "billing is NOT proven stopped: pod p9 bills | runpod *: listing failed: 503 — see what "
        "bills at https://console.runpod.io/pods | nocloud *: listing failed: 500")
    assert caught.value.hint == ("run `tailpod down --all` again, or stop each pod by hand as "
                                 "named above")


def test_down_all_settles_tracked_and_orphan_pods_and_reports_a_listing_outage(
        tmp_path: Path) -> None:
    fake = Fake()
    fake.add("orphan-pod", tag="tp-orphan")
    fake.add("untagged", tag=None)
    ledger, _ = _ledger(tmp_path, pod_id="p1")
    outcomes = teardown_all({"fakecloud": fake}, ledger, lambda tag: tmp_path / tag, policy=FAST)
    assert sorted(o.run_tag for o in outcomes) == sorted([TAG, "tp-orphan"])
    assert all(o.proven for o in outcomes)
    assert "untagged" in fake.pods and "orphan-pod" not in fake.pods
    adopted = ledger.get("tp-orphan")
    assert adopted is not None and adopted.pod_id == "orphan-pod"
    broken = Fake()
    broken.listing_fails = 1
    outcomes = teardown_all({"fakecloud": broken}, Ledger(tmp_path / "h2"),
                            lambda tag: tmp_path / tag, policy=FAST)
    assert [(o.run_tag, o.error) for o in outcomes] == [("*", "listing failed: listing outage")]
    with pytest.raises(BillingNotProven):
        raise_if_unproven(outcomes)


# -- manual stop ---------------------------------------------------------------------------------------

def test_the_manual_stop_names_the_console_and_the_api_call_without_the_key(tmp_path: Path) -> None:
    from tailpod.config import load_settings
    from tailpod.provision.runpod.provider import RunPodProvider

    settings = load_settings(env={"TAILPOD_HOME": str(tmp_path), "RUNPOD_API_KEY": "rpa_mutantKEY42",
                                  "TAILPOD_RUNPOD_URL": "https://rest.runpod.io"},
                             dotenv_path=tmp_path / "none.env")
    line = manual_stop(RunPodProvider(settings), "abc")  # the class's console, route and key name
    assert "rpa_mutantKEY42" not in line
    assert line.startswith("runpod pod abc: stop it by hand — console: "
                           "https://console.runpod.io/pods; API: curl -X DELETE -H "
                           "\"Authorization: Bearer $RUNPOD_API_KEY\"")
    assert line.endswith("https://rest.runpod.io/v2/pods/abc")
    assert manual_stop(Fake(), "x") == "fakecloud pod x: stop it by hand — the fakecloud console"


# -- the failed-create sweep ------------------------------------------------------------------------------

def _spec() -> PodSpec:
    return PodSpec(run_tag=TAG, gpu_preference=["A40"], image="img", start_command=["x"],
                   env={}, disk_gb=10, ports=[22])


def test_a_failed_create_sweeps_the_pod_it_left_and_reraises(tmp_path: Path) -> None:
    fake = Fake()
    fake.made_on_create = "half-made"
    fake.create_error = CapacityError("no capacity")
    ledger = Ledger(tmp_path / "home")
    with pytest.raises(CapacityError):
        create_pod_safely(fake, _spec(), ledger, PodRecord(run_tag=TAG, provider="fakecloud"),
                          policy=FAST)
    assert fake.terminated[0] == "half-made" and fake.pods == {}
    stored = ledger.get(TAG)
    assert stored is not None and stored.status == "terminated"
    assert [e["event"] for e in stored.events][-1] == "create-failed"


def test_a_failed_create_whose_stray_survives_is_exit_3(tmp_path: Path) -> None:
    fake = Fake()
    fake.made_on_create = "stuck"
    fake.sticky = {"stuck"}
    fake.create_error = ProviderError("HTTP 500")
    ledger = Ledger(tmp_path / "home")
    with pytest.raises(BillingNotProven) as caught:
        create_pod_safely(fake, _spec(), ledger, PodRecord(run_tag=TAG, provider="fakecloud"),
                          policy=FAST)
    assert caught.value.message == (
        f"creating {TAG} failed (HTTP 500) and resources may still bill: stuck")
    stored = ledger.get(TAG)
    assert stored is not None and stored.status == "failed"


def test_a_failed_create_that_cannot_list_cannot_rule_strays_out(tmp_path: Path) -> None:
    fake = Fake()
    fake.create_error = ProviderError("HTTP 500")
    fake.listing_fails = 1
    with pytest.raises(BillingNotProven) as caught:
        create_pod_safely(fake, _spec(), Ledger(tmp_path / "home"),
                          PodRecord(run_tag=TAG, provider="fakecloud"), policy=FAST)
    assert caught.value.message.endswith(
        "(the fakecloud listing failed: strays cannot be ruled out)")
    # a refused configuration sent no create: nothing can exist
    fake = Fake()
    fake.create_error = ConfigError("bad image")
    fake.listing_fails = 1
    with pytest.raises(ConfigError):
        create_pod_safely(fake, _spec(), Ledger(tmp_path / "h2"),
                          PodRecord(run_tag=TAG, provider="fakecloud"), policy=FAST)


def test_a_create_records_the_pod_price_and_ttl(tmp_path: Path) -> None:
    fake = Fake()
    ledger = Ledger(tmp_path / "home")
    spec = _spec()
    spec.ttl_at = ttl_deadline(2.0, 1000.0)  # the spec carries the deadline into the ledger
    info = create_pod_safely(fake, spec, ledger, PodRecord(run_tag=TAG, provider="fakecloud"))
    assert info.pod_id == "new-pod"
    stored = ledger.get(TAG)
    assert stored is not None
    assert (stored.pod_id, stored.price_per_hr, stored.status) == ("new-pod", 0.42, "running")
    assert stored.ttl_expires_at == 1000.0 + 2 * 3600.0
    assert stored.extra.provider_ids == ["new-pod"]
    assert fake.on_created is None


@pytest.mark.parametrize(("gpus", "cap", "words"), [
    ([], None, "the GPU preference list is empty"),
    (["  "], None, "the GPU preference list is empty"),
    (["A40"], 0.0, "the price cap must be positive"),
    (["A40"], -1.0, "the price cap must be positive"),
])
def test_a_create_with_nothing_to_rent_is_refused_before_the_ledger(
        tmp_path: Path, gpus: list[str], cap: float | None, words: str) -> None:
    spec = PodSpec(run_tag=TAG, gpu_preference=gpus, image="img", start_command=["x"], env={},
                   disk_gb=10, ports=[22], max_price=cap)
    ledger = Ledger(tmp_path / "home")
    with pytest.raises(ConfigError, match=words):
        create_pod_safely(Fake(), spec, ledger, PodRecord(run_tag=TAG, provider="fakecloud"))
    assert ledger.all() == []


class ListsEverything(Fake):
    """A provider whose tag-less listing wrongly includes untagged pods (a provider bug)."""

    def list_by_tag(self, run_tag: str | None = None) -> list[PodInfo]:
        if run_tag is None:
            return list(self.pods.values())
        return super().list_by_tag(run_tag)


def test_down_all_never_touches_an_untagged_pod_a_provider_lists(tmp_path: Path) -> None:
    fake = ListsEverything()
    fake.add("users-own", tag=None)  # listed first: the tagged one after it is still settled
    fake.add("orphan-pod", tag="tp-orphan")
    outcomes = teardown_all({"fakecloud": fake}, Ledger(tmp_path / "home"),
                            lambda tag: tmp_path / tag, policy=FAST)
    assert [o.run_tag for o in outcomes] == ["tp-orphan"]
    assert "users-own" in fake.pods and "users-own" not in fake.terminated


def test_an_adopted_orphan_is_recorded_with_what_the_provider_said(tmp_path: Path) -> None:
    fake = Fake()
    fake.add("orphan-pod", tag="tp-orphan", price=0.61)
    ledger = Ledger(tmp_path / "home")
    teardown_all({"fakecloud": fake}, ledger, lambda tag: tmp_path / tag, policy=FAST)
    rec = ledger.get("tp-orphan")
    assert rec is not None
    assert (rec.provider, rec.pod_id, rec.gpu, rec.price_per_hr) == (
        "fakecloud", "orphan-pod", "A40", 0.61)
    adopted = [e for e in rec.events if e["event"] == "orphan-adopted"]
    assert len(adopted) == 1 and adopted[0]["pod_id"] == "orphan-pod"


def test_a_tracked_pod_keeps_its_ledger_record_in_down_all(tmp_path: Path) -> None:
    fake = Fake()
    fake.add("p1", price=0.5)
    ledger, _ = _ledger(tmp_path, pod_id="p1", price_per_hr=0.9, gpu="H100")
    teardown_all({"fakecloud": fake}, ledger, lambda tag: tmp_path / tag, policy=FAST)
    rec = ledger.get(TAG)
    assert rec is not None and (rec.price_per_hr, rec.gpu) == (0.9, "H100")
    assert not [e for e in rec.events if e["event"] == "orphan-adopted"]


def test_down_expired_settles_only_the_expired_runs(tmp_path: Path) -> None:
    fake = Fake()
    fake.add("old", tag="tp-old")
    fake.add("young", tag="tp-young")
    fake.add("untracked", tag="tp-untracked")
    ledger = Ledger(tmp_path / "home")
    ledger.put(PodRecord(run_tag="tp-old", provider="fakecloud", status="running",
                         pod_id="old", ttl_expires_at=100.0))
    ledger.put(PodRecord(run_tag="tp-young", provider="fakecloud", status="running",
                         pod_id="young", ttl_expires_at=300.0))
    outcomes = teardown_expired({"fakecloud": fake}, ledger, lambda tag: tmp_path / tag,
                                now=200.0, policy=FAST)
    assert [o.run_tag for o in outcomes] == ["tp-old"]
    assert set(fake.pods) == {"young", "untracked"}


def test_down_all_uses_the_policy_it_is_given(tmp_path: Path) -> None:
    fake = Fake()
    fake.add("p1")
    fake.terminate_fails = 2  # the batch's first terminate and teardown's first attempt
    said: list[str] = []
    ledger, _ = _ledger(tmp_path, pod_id="p1")
    policy = LifecyclePolicy(terminate_attempts=3, terminate_retry_s=0.001, gone_timeout_s=0.5,
                             poll_interval_s=0.01, progress=said.append)
    outcomes = teardown_all({"fakecloud": fake}, ledger, lambda tag: tmp_path / tag,
                            policy=policy)
    assert [o.proven for o in outcomes] == [True]
    assert said == ["terminate p1 failed (terminate p1 refused); attempt 2/3 in 0 s"]


def test_a_listing_outage_in_down_all_names_the_provider(tmp_path: Path) -> None:
    fake = Fake()
    fake.listing_fails = 1
    outcomes = teardown_all({"fakecloud": fake}, Ledger(tmp_path / "home"),
                            lambda tag: tmp_path / tag, policy=FAST)
    assert [(o.run_tag, o.provider, o.evidence) for o in outcomes] == [("*", "fakecloud", None)]


def test_raise_if_unproven_keeps_every_outcomes_lines() -> None:
    with pytest.raises(BillingNotProven) as caught:
        raise_if_unproven([_outcome(False, still=["pod a bills"]),
                           _outcome(False, still=["pod b bills", "pod c bills"])])
    assert caught.value.message == ("billing is NOT proven stopped: pod a bills | pod b bills | "
                                    "pod c bills")


def test_a_failing_terminate_says_timeout_only_when_the_deadline_cut_it() -> None:
    fake = Fake()
    fake.terminate_fails = 10
    said: list[str] = []
    policy = LifecyclePolicy(terminate_attempts=3, terminate_retry_s=0.1,
                             deadline=time.monotonic() + 60, progress=said.append)
    with pytest.raises(ProviderError):
        terminate_with_retries(fake, "p1", policy)
    # attempts ran out with time to spare (the last pause would have been 0.3 s): no timeout line
    assert said == ["terminate p1 failed (terminate p1 refused); attempt 2/3 in 0 s",
                    "terminate p1 failed (terminate p1 refused); attempt 3/3 in 0 s"]


class CountingListings(Fake):
    """The pod stays listed for the first `gone_after - 1` listings; terminates are stamped with
    how many listings had been made when they were sent."""

    def __init__(self, gone_after: int) -> None:
        super().__init__()
        self.listings = 0
        self.gone_after = gone_after
        self.resent_at: list[int] = []

    def list_by_tag(self, run_tag: str | None = None) -> list[PodInfo]:
        self.listings += 1
        if self.listings >= self.gone_after:
            self.pods.clear()
        return super().list_by_tag(run_tag)

    def terminate(self, pod_id: str) -> None:
        self.resent_at.append(self.listings)


def test_the_wait_resends_terminate_after_every_nth_poll() -> None:
    fake = CountingListings(gone_after=4)
    fake.add("p1")
    policy = LifecyclePolicy(poll_interval_s=0.001, reterminate_every=2, progress_every_s=60)
    assert wait_gone(fake, TAG, ["p1"], policy, 5.0) == (True, [])
    assert fake.resent_at == [2]  # after the 2nd poll; gone at the 4th, before another re-send


def test_the_wait_is_silent_until_its_first_progress_interval() -> None:
    fake = Fake()
    fake.add("p1")
    fake.sticky = {"p1"}
    said: list[str] = []
    policy = LifecyclePolicy(poll_interval_s=0.01, reterminate_every=1000, progress=said.append,
                             progress_every_s=10.0)
    wait_gone(fake, TAG, ["p1"], policy, 0.2)
    assert said == []


def test_the_waits_progress_line_names_every_pod_and_the_seconds_waited() -> None:
    fake = Fake()
    fake.add("p0")
    fake.add("p1")
    fake.sticky = {"p0", "p1"}
    said: list[str] = []
    policy = LifecyclePolicy(poll_interval_s=0.01, reterminate_every=1000, progress=said.append,
                             progress_every_s=0.05)
    wait_gone(fake, TAG, ["p0", "p1"], policy, 0.3)
    assert said and said[0] == ("waiting for fakecloud to stop listing p0, p1 (0 s of at most "
                                "0 s; terminate is re-sent)")


@pytest.mark.parametrize("every", [1, 0])
def test_a_resend_interval_of_one_or_less_resends_after_every_poll(every: int) -> None:
    fake = CountingListings(gone_after=3)
    fake.add("p1")
    policy = LifecyclePolicy(poll_interval_s=0.001, reterminate_every=every, progress_every_s=60)
    assert wait_gone(fake, TAG, ["p1"], policy, 5.0) == (True, [])
    assert fake.resent_at == [1, 2]


def test_the_last_poll_sleeps_only_until_the_deadline(monkeypatch: pytest.MonkeyPatch) -> None:
    """A 10 s poll interval does not carry the wait past its 0.2 s limit (the deadline holds):
    no sleep asked for is longer than what is left of the 0.2 s (seen from the sleeps asked)."""
    slept: list[float] = []
    monkeypatch.setattr("tailpod.provision.teardown.time.sleep", slept.append)
    fake = Fake()
    fake.add("p1")
    fake.sticky = {"p1"}
    policy = LifecyclePolicy(poll_interval_s=10.0, reterminate_every=1000, progress_every_s=60)
    assert wait_gone(fake, TAG, ["p1"], policy, 0.2) == (False, ["p1"])
    assert slept and max(slept) <= 0.2


class RecordingEvidence(Fake):
    """Keeps the known-active tags of every proof it is asked for, in order."""

    def __init__(self) -> None:
        super().__init__()
        self.known_per_proof: list[tuple[str, set[str]]] = []

    def billing_evidence(self, run_tag: str, pod_id: str | None, price_per_hr: float | None,
                         *, known_active_tags: Iterable[str] = ()) -> BillingEvidence:
        self.known_per_proof.append((run_tag, set(known_active_tags)))
        return super().billing_evidence(run_tag, pod_id, price_per_hr,
                                        known_active_tags=known_active_tags)


def test_down_all_outcomes_say_tag_provider_evidence_and_proof(tmp_path: Path) -> None:
    fake = Fake()
    fake.add("good", tag="tp-good")
    fake.add("stuck", tag="tp-stuck")
    fake.sticky = {"stuck"}
    ledger = Ledger(tmp_path / "home")

    def extra_for(rec: PodRecord) -> Any:
        seen.append(rec.run_tag)
        if rec.run_tag == "tp-boom":
            raise ProviderError("tailnet lookup failed")
        return None

    seen: list[str] = []
    ledger.put(PodRecord(run_tag="tp-boom", provider="fakecloud", status="running", pod_id="b"))
    outcomes = {o.run_tag: o for o in teardown_all({"fakecloud": fake}, ledger,
                                                   lambda tag: tmp_path / tag, policy=FAST,
                                                   extra_proofs_for=extra_for)}
    assert sorted(seen) == ["tp-boom", "tp-good", "tp-stuck"]
    good, stuck, boom = outcomes["tp-good"], outcomes["tp-stuck"], outcomes["tp-boom"]
    assert (good.provider, good.error, good.proven) == ("fakecloud", None, True)
    assert good.proof_path == str(tmp_path / "tp-good" / "billing-proof.json")
    assert (stuck.provider, stuck.proven) == ("fakecloud", False)
    assert stuck.evidence is not None and stuck.evidence.still_billing
    assert stuck.error is not None and stuck.error.startswith(
        "billing is NOT proven stopped for tp-stuck")
    assert stuck.proof_path == str(tmp_path / "tp-stuck" / "billing-proof.json")
    assert (boom.provider, boom.evidence, boom.error) == ("fakecloud", None,
                                                          "tailnet lookup failed")
    with pytest.raises(BillingNotProven) as caught:
        raise_if_unproven(list(outcomes.values()))
    assert "fakecloud tp-boom: tailnet lookup failed" in caught.value.message


def test_down_all_passes_each_runs_extra_proofs_to_its_teardown(tmp_path: Path) -> None:
    fake = Fake()
    ledger, _ = _ledger(tmp_path, pod_id="p1")
    side = [ProofCheck("tailnet device gone", False, "device still listed")]
    outcomes = teardown_all({"fakecloud": fake}, ledger, lambda tag: tmp_path / tag, policy=FAST,
                            extra_proofs_for=lambda rec: (lambda: side) if rec.run_tag == TAG
                            else None)
    assert [(o.run_tag, o.proven) for o in outcomes] == [(TAG, False)]
    assert outcomes[0].evidence is not None
    assert outcomes[0].evidence.checks[-1].name == "tailnet device gone"


def test_down_all_terminates_every_pod_before_the_first_proof(tmp_path: Path) -> None:
    fake = Fake()
    fake.add("p1")
    ledger, _ = _ledger(tmp_path, pod_id="p1")
    teardown_all({"fakecloud": fake}, ledger, lambda tag: tmp_path / tag, policy=FAST)
    assert fake.terminated == ["p1", "p1"]  # the batch's terminate, then teardown's own


def test_down_all_counts_its_batch_and_the_ledgers_live_runs_as_known(tmp_path: Path) -> None:
    fake = RecordingEvidence()
    fake.add("a", tag="tp-a")
    fake.add("b", tag="tp-b")
    ledger = Ledger(tmp_path / "home")
    ledger.put(PodRecord(run_tag="tp-live-elsewhere", provider="othercloud", status="running"))
    teardown_all({"fakecloud": fake}, ledger, lambda tag: tmp_path / tag, policy=FAST)
    assert fake.known_per_proof == [("tp-a", {"tp-b", "tp-live-elsewhere"}),
                                    ("tp-b", {"tp-a", "tp-live-elsewhere"})]


def test_down_expired_counts_the_live_runs_it_leaves_as_known(tmp_path: Path) -> None:
    fake = RecordingEvidence()
    fake.add("young", tag="tp-young")
    ledger = Ledger(tmp_path / "home")
    ledger.put(PodRecord(run_tag="tp-old", provider="fakecloud", status="running",
                         pod_id="old", ttl_expires_at=100.0))  # its pod is no longer listed
    ledger.put(PodRecord(run_tag="tp-young", provider="fakecloud", status="running",
                         pod_id="young", ttl_expires_at=300.0))
    outcomes = teardown_expired({"fakecloud": fake}, ledger, lambda tag: tmp_path / tag,
                                now=200.0, policy=FAST)
    assert [(o.run_tag, o.proven) for o in outcomes] == [("tp-old", True)]
    assert fake.known_per_proof == [("tp-old", {"tp-young"})]
    assert "young" in fake.pods


class NeverLists(Fake):
    """A listing that lags: tagged pods exist but are not listed yet (the direct lookup sees
    them)."""

    def list_by_tag(self, run_tag: str | None = None) -> list[PodInfo]:
        super().list_by_tag(run_tag)  # keeps the scripted outages
        return []


def _events(ledger: Ledger) -> list[dict[str, Any]]:
    rec = ledger.get(TAG)
    assert rec is not None
    return [{k: v for k, v in e.items() if k != "t"} for e in rec.events]


def test_the_sweep_destroys_the_recorded_id_the_listing_does_not_show(tmp_path: Path) -> None:
    fake = NeverLists()
    fake.made_on_create = "half-made"
    fake.create_error = CapacityError("no capacity")
    fake.add("neighbour", tag="tp-other")
    ledger = Ledger(tmp_path / "home")
    with pytest.raises(CapacityError):
        create_pod_safely(fake, _spec(), ledger, PodRecord(run_tag=TAG, provider="fakecloud"),
                          policy=FAST)
    assert fake.terminated == ["half-made"] and "neighbour" in fake.pods
    rec = ledger.get(TAG)
    assert rec is not None and rec.status == "terminated" and rec.operation == {}
    assert _events(ledger)[-2:] == [
        {"event": "create-failed-clean", "status": "terminated"},
        {"event": "create-failed", "reason": "no capacity", "destroyed": ["half-made"]}]


def test_the_sweep_never_touches_another_runs_pod(tmp_path: Path) -> None:
    fake = Fake()
    fake.add("neighbour", tag="tp-other")
    fake.create_error = CapacityError("no capacity")
    with pytest.raises(CapacityError):
        create_pod_safely(fake, _spec(), Ledger(tmp_path / "home"),
                          PodRecord(run_tag=TAG, provider="fakecloud"), policy=FAST)
    assert fake.terminated == [] and "neighbour" in fake.pods


def test_a_stray_that_refuses_terminate_is_named_and_recorded(tmp_path: Path) -> None:
    fake = Fake()
    fake.made_on_create = "stuck"
    fake.terminate_fails = 10_000
    fake.create_error = ProviderError("HTTP 500")
    ledger = Ledger(tmp_path / "home")
    with pytest.raises(BillingNotProven) as caught:
        create_pod_safely(fake, _spec(), ledger, PodRecord(run_tag=TAG, provider="fakecloud"),
                          policy=FAST)
    assert caught.value.message.endswith("resources may still bill: stuck")
    rec = ledger.get(TAG)
    assert rec is not None and rec.status == "failed" and rec.operation == {}
    assert _events(ledger)[-2:] == [
        {"event": "create-failed-strays", "status": "failed"},
        {"event": "create-failed", "reason": "HTTP 500", "may_bill": ["stuck"]}]


def test_a_rejected_key_with_a_recorded_id_still_cannot_rule_strays_out(tmp_path: Path) -> None:
    from tailpod.errors import AuthError

    fake = Fake()
    fake.made_on_create = "made"
    fake.create_error = AuthError("key rejected")
    fake.listing_fails = 1
    ledger = Ledger(tmp_path / "home")
    with pytest.raises(BillingNotProven) as caught:
        create_pod_safely(fake, _spec(), ledger, PodRecord(run_tag=TAG, provider="fakecloud"),
                          policy=FAST)
    assert caught.value.message.endswith(
        "(the fakecloud listing failed: strays cannot be ruled out)")
    rec = ledger.get(TAG)
    assert rec is not None and rec.status == "failed"


def test_a_failure_without_text_is_recorded_by_its_class(tmp_path: Path) -> None:
    fake = Fake()
    fake.create_error = CapacityError("")
    ledger = Ledger(tmp_path / "home")
    with pytest.raises(CapacityError):
        create_pod_safely(fake, _spec(), ledger, PodRecord(run_tag=TAG, provider="fakecloud"),
                          policy=FAST)
    assert _events(ledger)[-1] == {"event": "create-failed", "reason": "CapacityError",
                                   "destroyed": []}
