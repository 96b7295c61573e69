"""The create's money facts in provision/create.py, against an in-memory provider the test scripts:
what the ledger holds before, during and after a create (intent, every provider id the moment it is
named, the pod, GPU, $/h, SSH and fallback facts), what a crash leaves findable, and the refusals'
exact words. Written to kill the mutants `make mutate` found surviving (docs/testing.md); every
expected value is the scripted provider's own answer or written out from the rule it checks."""

from __future__ import annotations

import os
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pytest

from tailpod.config import load_settings
from tailpod.errors import BillingNotProven, ConfigError, Interrupted, ProviderError, TailpodError
from tailpod.ledger import Ledger, PodRecord
from tailpod.provision import create as create_module
from tailpod.provision.base import BillingEvidence, PodInfo, PodSpec, PodState, Provider
from tailpod.provision.create import create_pod_safely, up_remote
from tailpod.provision.teardown import LifecyclePolicy

TAG = "tp-20260101-000000-cccccc"
FAST = LifecyclePolicy(terminate_attempts=2, terminate_retry_s=0.001, gone_timeout_s=0.2,
                       poll_interval_s=0.01, reterminate_every=2, sweep_timeout_s=0.2)


class Scripted(Provider):
    """`create` names `announce` ids through on_created (reading the ledger after each), then
    answers `answer` or raises `error`; pods it names stay listed until terminated."""

    name = "scriptcloud"

    def __init__(self, ledger: Ledger, answer: PodInfo | None = None, announce: tuple[str, ...] = (),
                 error: BaseException | None = None, sticky: bool = False) -> None:
        self.ledger = ledger
        self.answer = answer
        self.announce = announce
        self.error = error
        self.sticky = sticky
        self.live: set[str] = set()
        self.seen: list[PodRecord] = []  # the ledger record as it stood after each announced id
        self.specs: list[PodSpec] = []
        self.terminate_fails = 0  # the next N terminates are refused

    def offers(self, gpu_preference: list[str], gpu_count: int, max_price: float | None) -> list[Any]:
        return []

    def create(self, spec: PodSpec) -> PodInfo:
        self.specs.append(spec)
        self.seen.append(self._now())
        for pod_id in self.announce:
            self.live.add(pod_id)
            assert self.on_created is not None
            self.on_created(pod_id)
            self.seen.append(self._now())
        if self.error is not None:
            raise self.error
        assert self.answer is not None
        self.live.add(self.answer.pod_id)
        return self.answer

    def _now(self) -> PodRecord:
        record = self.ledger.get(TAG)
        assert record is not None
        return record

    def get(self, pod_id: str) -> PodInfo | None:
        return PodInfo(pod_id, TAG, PodState.RUNNING) if pod_id in self.live else None

    def list_by_tag(self, run_tag: str | None = None) -> list[PodInfo]:
        return [PodInfo(p, TAG, PodState.RUNNING) for p in sorted(self.live)]

    def terminate(self, pod_id: str) -> None:
        if self.terminate_fails:
            self.terminate_fails -= 1
            raise ProviderError(f"terminate {pod_id} refused")
        if not self.sticky:
            self.live.discard(pod_id)

    def billing_evidence(self, run_tag: str, pod_id: str | None, price_per_hr: float | None,
                         *, known_active_tags: Iterable[str] = ()) -> BillingEvidence:
        return BillingEvidence([])


def _spec(**kw: Any) -> PodSpec:
    fields: dict[str, Any] = dict(run_tag=TAG, gpu_preference=["H100", "A100"], image="img:1",
                                  start_command=["x"], gpu_count=2, max_price=3.0, ttl_at=5000.0)
    fields.update(kw)
    return PodSpec(**fields)


def _info(**kw: Any) -> PodInfo:
    fields: dict[str, Any] = dict(pod_id="p-1", run_tag=TAG, state=PodState.PENDING, gpu_type="A100",
                                  gpu_count=2, price_per_hr=1.9, ssh_host="203.0.113.7",
                                  ssh_port=2222,
                                  detail={"fallback_from": "H100",
                                          "fallback_reasons": ["H100: no capacity"]})
    fields.update(kw)
    return PodInfo(**fields)


def _create(tmp_path: Path, provider_kw: dict[str, Any] | None = None, spec: PodSpec | None = None,
            ) -> tuple[Scripted, Ledger, PodInfo]:
    ledger = Ledger(tmp_path / "home")
    provider = Scripted(ledger, **(provider_kw or {"answer": _info()}))
    # The record arrives with the caller's guesses; the create overwrites them from the spec.
    record = PodRecord(run_tag=TAG, provider="unset", status="unset", gpu_count=9, image="old")
    info = create_pod_safely(provider, spec or _spec(), ledger, record, policy=FAST)
    return provider, ledger, info


def _stored(ledger: Ledger) -> PodRecord:
    record = ledger.get(TAG)
    assert record is not None
    return record


def _event(record: PodRecord, name: str) -> dict[str, Any]:
    found = [e for e in record.events if e["event"] == name]
    assert len(found) == 1, [e["event"] for e in record.events]
    return {k: v for k, v in found[0].items() if k != "t"}


# -- the intent, on disk before the provider is asked -----------------------------------------

def test_the_intent_is_on_disk_with_the_specs_facts_before_create_is_called(tmp_path: Path) -> None:
    before = time.time()
    provider, _, _ = _create(tmp_path)
    first = provider.seen[0]  # the ledger as the provider's create found it
    assert (first.provider, first.status, first.gpu_count, first.image, first.ttl_expires_at) == (
        "scriptcloud", "creating", 2, "img:1", 5000.0)
    assert (first.extra.gpu_preference, first.extra.max_price) == (["H100", "A100"], 3.0)
    assert _event(first, "intent") == {"event": "intent", "gpus": ["H100", "A100"], "max_price": 3.0}
    assert _event(first, "creating") == {"event": "creating", "status": "creating"}
    assert [e["event"] for e in first.events] == ["intent", "creating"]
    # the create is owned by this process until the caller moves the operation on
    assert first.operation["step"] == "create" and first.operation["pid"] == os.getpid()
    assert first.updated_at >= before


def test_the_preference_list_kept_is_a_copy_of_the_specs(tmp_path: Path) -> None:
    spec = _spec()
    _, ledger, _ = _create(tmp_path, spec=spec)
    spec.gpu_preference.append("L4")  # the caller's list changing later changes no record
    assert _stored(ledger).extra.gpu_preference == ["H100", "A100"]


# -- every id the moment the provider names it ------------------------------------------------

def test_each_named_id_is_in_the_ledger_before_create_returns(tmp_path: Path) -> None:
    before = time.time()
    provider, ledger, _ = _create(tmp_path, {"answer": _info(pod_id="b"), "announce": ("a", "a", "b")})
    after_a, after_a_again, after_b = provider.seen[1:]
    assert (after_a.pod_id, after_a.extra.provider_ids, after_a.status) == ("a", ["a"], "creating")
    assert _event(after_a, "provider-id") == {"event": "provider-id", "pod_id": "a"}
    assert after_a.updated_at >= before
    assert after_a_again.extra.provider_ids == ["a"]  # named twice, kept once
    # a second id joins the list; the pod id stays the first until the create's answer
    assert (after_b.pod_id, after_b.extra.provider_ids) == ("a", ["a", "b"])
    stored = _stored(ledger)
    assert (stored.pod_id, stored.extra.provider_ids) == ("b", ["a", "b"])


def test_a_provider_id_named_while_the_record_says_otherwise_sets_creating(tmp_path: Path) -> None:
    ledger = Ledger(tmp_path / "home")
    ledger.put(PodRecord(run_tag=TAG, provider="scriptcloud", status="intent"))
    t0 = time.time()
    create_module._record_provider_id(ledger, TAG, "z-9")
    stored = _stored(ledger)
    assert (stored.status, stored.pod_id, stored.extra.provider_ids) == ("creating", "z-9", ["z-9"])
    assert isinstance(stored.updated_at, float) and stored.updated_at >= t0


def test_an_interrupt_that_leaves_a_stray_exits_3_naming_it_not_130(
        tmp_path: Path) -> None:
    """Ctrl-C during a create whose pod will not go: "may still bill" outranks "interrupted"
    (docs/exit-codes.md), with the id findable in the ledger."""
    ledger = Ledger(tmp_path / "home")
    provider = Scripted(ledger, announce=("stuck-1",), error=KeyboardInterrupt(), sticky=True)
    with pytest.raises(BillingNotProven) as caught:
        create_pod_safely(provider, _spec(), ledger, PodRecord(run_tag=TAG, provider="x"),
                          policy=FAST)
    assert caught.value.message == (
        f"creating {TAG} failed (interrupted) and resources may still bill: stuck-1")
    assert caught.value.hint == f"run `tailpod down {TAG}`"
    stored = _stored(ledger)
    assert (stored.pod_id, stored.extra.provider_ids, stored.status) == (
        "stuck-1", ["stuck-1"], "failed")
    assert provider.on_created is None


def test_an_interrupt_whose_pod_went_says_the_sweep_left_nothing(tmp_path: Path) -> None:
    """newcomer 2.26: after Ctrl-C the terminal said only "interrupted". The sweep destroyed the
    announced pod, so the interrupt carries what became of it (exit 130 all the same)."""
    ledger = Ledger(tmp_path / "home")
    provider = Scripted(ledger, announce=("gone-1",), error=KeyboardInterrupt())
    with pytest.raises(Interrupted) as caught:
        create_pod_safely(provider, _spec(), ledger, PodRecord(run_tag=TAG, provider="x"),
                          policy=FAST)
    assert caught.value.settled == (
        f"the create of {TAG} was swept: the provider lists nothing of it")
    assert provider.live == set()
    assert _stored(ledger).status == "terminated"


def test_a_failed_create_names_the_down_command_in_its_hint(tmp_path: Path) -> None:
    ledger = Ledger(tmp_path / "home")
    provider = Scripted(ledger, announce=("stuck-2",), error=ProviderError("HTTP 502"),
                        sticky=True)
    with pytest.raises(BillingNotProven) as caught:
        create_pod_safely(provider, _spec(), ledger, PodRecord(run_tag=TAG, provider="x"),
                          policy=FAST)
    assert caught.value.hint == f"run `tailpod down {TAG}`"
    assert caught.value.message == (
        f"creating {TAG} failed (HTTP 502) and resources may still bill: stuck-2")
    assert provider.on_created is None


# -- the ledger after a create ----------------------------------------------------------------

def test_a_created_pod_is_recorded_with_what_the_provider_answered(tmp_path: Path) -> None:
    before = time.time()
    _, ledger, info = _create(tmp_path)
    stored = _stored(ledger)
    assert info.pod_id == "p-1"
    assert (stored.provider, stored.pod_id, stored.gpu, stored.gpu_count, stored.price_per_hr,
            stored.status) == ("scriptcloud", "p-1", "A100", 2, 1.9, "creating")  # PENDING
    assert stored.ssh == {"host": "203.0.113.7", "port": 2222}
    assert (stored.extra.fallback_from, stored.extra.fallback_reasons) == (
        "H100", ["H100: no capacity"])
    assert stored.extra.provider_ids == ["p-1"]
    assert _event(stored, "created") == {"event": "created", "pod_id": "p-1", "gpu": "A100",
                                         "price_per_hr": 1.9, "fallback_from": "H100"}
    assert stored.events[-1]["event"] == "created"
    creating_at = [e["t"] for e in stored.events if e["event"] == "creating"][0]
    assert isinstance(stored.updated_at, float) and stored.updated_at >= creating_at >= before


def test_a_running_answer_is_recorded_running(tmp_path: Path) -> None:
    _, ledger, _ = _create(tmp_path, {"answer": _info(state=PodState.RUNNING)})
    assert _stored(ledger).status == "running"


@pytest.mark.parametrize(("answered", "recorded"), [(None, 2), (0, 2), (4, 4)])
def test_the_gpu_count_is_the_providers_else_the_specs(tmp_path: Path, answered: int | None,
                                                       recorded: int) -> None:
    _, ledger, _ = _create(tmp_path, {"answer": _info(gpu_count=answered)})
    assert _stored(ledger).gpu_count == recorded


@pytest.mark.parametrize(("host", "port"), [("203.0.113.7", None), (None, 2222)])
def test_half_an_ssh_address_is_not_recorded(tmp_path: Path, host: str | None,
                                             port: int | None) -> None:
    _, ledger, _ = _create(tmp_path, {"answer": _info(ssh_host=host, ssh_port=port)})
    assert _stored(ledger).ssh == {}


def test_a_create_without_fallback_records_none(tmp_path: Path) -> None:
    _, ledger, _ = _create(tmp_path, {"answer": _info(detail={})})
    stored = _stored(ledger)
    assert (stored.extra.fallback_from, stored.extra.fallback_reasons) == (None, None)
    assert _event(stored, "created")["fallback_from"] is None


def test_a_fallback_without_reasons_records_an_empty_list(tmp_path: Path) -> None:
    reasons = ["kept by the provider"]
    _, ledger, _ = _create(tmp_path, {"answer": _info(detail={"fallback_from": "H100"})})
    # the create completes (no reasons is no error); the ledger keeps an empty list as absent
    assert _stored(ledger).extra.fallback_reasons in (None, [])
    _, ledger, _ = _create(tmp_path / "2", {"answer": _info(
        detail={"fallback_from": "H100", "fallback_reasons": reasons})})
    reasons.append("changed later")  # the record keeps its own copy
    assert _stored(ledger).extra.fallback_reasons == ["kept by the provider"]


# -- refusals ---------------------------------------------------------------------------------

def test_an_empty_preference_is_refused_with_the_flag_to_use(tmp_path: Path) -> None:
    ledger = Ledger(tmp_path / "home")
    with pytest.raises(ConfigError) as caught:
        create_pod_safely(Scripted(ledger), _spec(gpu_preference=[""]), ledger,
                          PodRecord(run_tag=TAG, provider="x"))
    assert caught.value.message == "the GPU preference list is empty; nothing was created"
    assert caught.value.hint == "name at least one GPU (--gpu or TAILPOD_GPUS)"


@pytest.mark.parametrize("cap", [0.0, -2.5])
def test_a_price_cap_not_above_zero_is_refused_naming_it(tmp_path: Path, cap: float) -> None:
    ledger = Ledger(tmp_path / "home")
    with pytest.raises(ConfigError) as caught:
        create_pod_safely(Scripted(ledger), _spec(max_price=cap), ledger,
                          PodRecord(run_tag=TAG, provider="x"))
    assert caught.value.message == f"the price cap must be positive, got {cap}"
    assert ledger.all() == []


def test_a_small_positive_cap_and_no_cap_are_accepted(tmp_path: Path) -> None:
    for i, cap in enumerate([0.01, None]):
        _, ledger, _ = _create(tmp_path / str(i), spec=_spec(max_price=cap))
        assert _stored(ledger).extra.max_price == cap


def test_a_record_for_another_run_is_refused(tmp_path: Path) -> None:
    ledger = Ledger(tmp_path / "home")
    provider = Scripted(ledger, answer=_info())
    with pytest.raises(ConfigError) as caught:
        create_pod_safely(provider, _spec(), ledger,
                          PodRecord(run_tag="tp-20260101-000000-other0", provider="x"))
    assert caught.value.message == "the ledger record and the pod spec name different run tags"
    assert provider.specs == [] and ledger.all() == []


@pytest.mark.parametrize(("error", "said"), [
    (OSError(28, "No space left on device"), "No space left on device"),
    (OSError("disk said no"), "disk said no"),  # no strerror: the error's own text
])
def test_an_unwritable_ledger_rents_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                            error: OSError, said: str) -> None:
    ledger = Ledger(tmp_path / "home")
    provider = Scripted(ledger, answer=_info())

    def refuse(record: PodRecord) -> PodRecord:
        raise error

    monkeypatch.setattr(ledger, "put", refuse)
    with pytest.raises(TailpodError) as caught:
        create_pod_safely(provider, _spec(), ledger, PodRecord(run_tag=TAG, provider="x"))
    assert caught.value.message == f"the ledger cannot be written ({said}); nothing was rented"
    assert caught.value.hint == (f"free space under {ledger.home} (or fix its permissions), "
                                 "then run `up` again")
    assert caught.value.__cause__ is None and caught.value.__suppress_context__
    assert provider.specs == []


# -- up_remote: the settings' cap and TTL fill a spec's gaps ----------------------------------

def _settings(tmp_path: Path, **env: str) -> Any:
    base = {"TAILPOD_HOME": str(tmp_path / "home"), "TAILPOD_PROVIDER": "runpod",
            "RUNPOD_API_KEY": "rpa_createTEST77", "TAILPOD_MAX_PRICE": "2.5",
            "TAILPOD_TTL_HOURS": "3"}
    base.update(env)
    return load_settings(env=base, dotenv_path=tmp_path / "none.env")


def _up(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, spec: PodSpec, provider_name: str = "runpod",
        scripted: Scripted | None = None, policy: LifecyclePolicy = FAST,
        **options: Any) -> tuple[Scripted, PodRecord, list[tuple[str, dict[str, Any]]]]:
    from tailpod.provision import providers

    ledger = Ledger(tmp_path / "home")
    scripted = scripted or Scripted(ledger, answer=_info())
    asked: list[tuple[str, dict[str, Any]]] = []

    def fake_get(name: str, settings: Any, **opts: Any) -> Provider:
        asked.append((name, opts))
        return scripted

    monkeypatch.setattr(providers, "get_provider", fake_get)
    record, _ = up_remote(_settings(tmp_path, TAILPOD_PROVIDER=provider_name), ledger, spec,
                          policy=policy, **options)
    return scripted, record, asked


def test_up_remote_fills_the_cap_and_ttl_from_the_settings(tmp_path: Path,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    before = time.time()
    spec = _spec(max_price=None, ttl_at=None)
    scripted, record, asked = _up(tmp_path, monkeypatch, spec, "RunPod", marker=1)
    after = time.time()
    assert asked == [("runpod", {"marker": 1})]  # the canonical name and the caller's options
    assert scripted.specs[0].max_price == 2.5
    assert record.extra.max_price == 2.5
    assert record.ttl_expires_at is not None
    assert before + 3 * 3600 <= record.ttl_expires_at <= after + 3 * 3600
    assert (record.run_tag, record.pod_id, record.status) == (TAG, "p-1", "creating")


def test_up_remote_keeps_the_specs_own_cap_and_ttl(tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    _, record, _ = _up(tmp_path, monkeypatch, _spec(max_price=1.25, ttl_at=777.0))
    assert (record.extra.max_price, record.ttl_expires_at) == (1.25, 777.0)


def test_up_remote_refuses_the_local_provider(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(ConfigError) as caught:
        _up(tmp_path, monkeypatch, _spec(), "local")
    assert caught.value.message == "'local' is not a cloud provider"


def test_up_remote_sweeps_a_failed_create_under_the_callers_policy(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    said: list[str] = []
    policy = LifecyclePolicy(terminate_attempts=2, terminate_retry_s=0.001, gone_timeout_s=0.2,
                             poll_interval_s=0.01, sweep_timeout_s=0.2, progress=said.append)
    scripted = Scripted(Ledger(tmp_path / "home"), announce=("half",), error=ProviderError("HTTP 500"))
    scripted.terminate_fails = 1  # refused once, then gone: the retry is the policy's
    with pytest.raises(ProviderError):
        _up(tmp_path, monkeypatch, _spec(), scripted=scripted, policy=policy)
    assert said == ["terminate half failed (terminate half refused); attempt 2/2 in 0 s"]
    assert scripted.live == set()


def test_a_crash_right_after_the_intent_leaves_an_active_intent_record(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    ledger = Ledger(tmp_path / "home")
    on_disk: list[PodRecord] = []
    put = ledger.put

    def put_then_read(record: PodRecord) -> PodRecord:
        put(record)
        stored = ledger.get(TAG)  # what a process killed at this instant leaves behind
        assert stored is not None
        on_disk.append(stored)
        return record

    monkeypatch.setattr(ledger, "put", put_then_read)
    create_pod_safely(Scripted(ledger, answer=_info()), _spec(), ledger,
                      PodRecord(run_tag=TAG, provider="x", status="unset"), policy=FAST)
    assert [(r.status, r.active, r.provider) for r in on_disk] == [("intent", True, "scriptcloud")]


def test_a_failed_create_names_every_id_that_may_still_bill(tmp_path: Path) -> None:
    ledger = Ledger(tmp_path / "home")
    provider = Scripted(ledger, announce=("s-1", "s-2"), error=ProviderError("HTTP 500"),
                        sticky=True)
    with pytest.raises(BillingNotProven) as caught:
        create_pod_safely(provider, _spec(), ledger, PodRecord(run_tag=TAG, provider="x"),
                          policy=FAST)
    assert caught.value.message.endswith("may still bill: s-1, s-2")
