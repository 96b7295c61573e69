"""The live first-contact check step by step (provision/runpod/first_contact.py), against an
in-memory RunPod whose container log, meter and pod the test scripts over a clock it moves: which
fact is learned when, the bounds of each wait, the cost said before and after, the pod's one-hour
TTL and the words when its teardown is not proven; and the CPU catalog, the probe script and the
CPU create against a mock REST v2. Written to kill the module's mutants (docs/testing.md, "first
contact, gpus, logs (session 19)"); every expected value is worked out by hand from the script.
The sandbox-cloud tests (tests/integration/cloud/test_first_contact_*.py) run the same paths at
seconds a test."""

from __future__ import annotations

import json
import re
import shlex
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import httpx
import pytest

import tailpod.engines.image as image_mod
from tailpod.config import load_settings
from tailpod.errors import BillingNotProven, ConfigError, ProviderError, TailpodError
from tailpod.ledger import Ledger
from tailpod.provision.apiclient import ApiTimings
from tailpod.provision.base import BillingEvidence, PodInfo, PodSpec, PodState, ProofCheck, Provider
from tailpod.provision.runpod import first_contact as fc
from tests.helpers.lifecycle_policy import fast_policy

KEY = "rp_FIRSTcontactKEY_0123456789ab"
IMAGE = "vllm/vllm-openai@sha256:" + "ab" * 32
CPU, VCPUS, RATE = "cpu3c-2-4", 2, 0.06
POD = "cpu-pod-1"
# boot 30 s, hold 20 s, gone 10 s, a look every 5 s: a bound of 60 s
T = fc.FirstContactTimings(boot_s=30.0, hold_s=20.0, gone_s=10.0, poll_s=5.0)


def settings_for(home: Path, key: str | None = KEY) -> Any:
    env = {"TAILPOD_HOME": str(home), "TAILPOD_RUNPOD_URL": "http://runpod.invalid"}
    if key:
        env["RUNPOD_API_KEY"] = key
    return load_settings(env=env, dotenv_path=home / "absent.env")


class Clock:
    def __init__(self, t: float = 0.0) -> None:
        self.t = t
        self.slept: list[float] = []

    def __call__(self) -> float:
        return self.t

    def sleep(self, s: float) -> None:
        self.slept.append(s)
        self.t += s


class Probe(Provider):
    """A RunPod account whose CPU pod's log, bill and presence are functions of the clock."""

    name = "runpod"
    base_url = "https://rest.runpod.test/v1/"

    def __init__(self, clock: Clock, *, logs: Callable[[float, str], list[str]],
                 bill: Callable[[float], float | None] = lambda _t: None,
                 gone_at: float | None = None, terminate_fails: bool = False,
                 create_s: float = 0.0, create_error: Exception | None = None) -> None:
        self.clock, self.logs, self.bill, self.gone_at = clock, logs, bill, gone_at
        self.terminate_fails = terminate_fails
        self.create_s = create_s  # how long the create takes on the clock
        self.create_error = create_error
        self.specs: list[PodSpec] = []
        self.pods: dict[str, PodInfo] = {}
        self.log_reads: list[tuple[str, int, float]] = []
        self.bill_reads: list[tuple[str | None, float]] = []

    @property
    def tag(self) -> str:  # the marker's tag, from the script the pod was given
        found = re.search(r"tailpod-first-contact-''([0-9a-f]+) start", self.specs[0].start_command[2])
        assert found
        return f"tailpod-first-contact-{found.group(1)}"

    rate = RATE

    def cheapest_cpu(self) -> tuple[str, int, float]:
        return CPU, VCPUS, self.rate

    def offers(self, gpu_preference: list[str], gpu_count: int,
               max_price: float | None) -> list[Any]:
        return []

    def create(self, spec: PodSpec) -> PodInfo:
        self.specs.append(spec)
        self.clock.t += self.create_s
        if self.create_error is not None:
            raise self.create_error
        self.pods[POD] = PodInfo(POD, spec.run_tag, PodState.RUNNING, price_per_hr=RATE)
        return self.pods[POD]

    def _gone(self) -> bool:
        return self.gone_at is not None and self.clock.t >= self.gone_at

    def get(self, pod_id: str) -> PodInfo | None:
        return None if self._gone() else self.pods.get(pod_id)

    def list_by_tag(self, run_tag: str | None = None) -> list[PodInfo]:
        return [] if self._gone() else [p for p in self.pods.values()
                                        if run_tag is None or p.run_tag == run_tag]

    def terminate(self, pod_id: str) -> None:
        if self.terminate_fails:
            raise ProviderError(f"terminate {pod_id} refused")
        self.pods.pop(pod_id, None)

    def billing_evidence(self, run_tag: str, pod_id: str | None, price_per_hr: float | None,
                         *, known_active_tags: Iterable[str] = ()) -> BillingEvidence:
        return BillingEvidence([ProofCheck("provider says gone", True, "ok")])

    def container_log(self, pod_id: str, tail: int = 0) -> list[str]:
        self.log_reads.append((pod_id, tail, self.clock.t))
        return self.logs(self.clock.t, self.tag)

    def billed_so_far(self, pod_id: str | None) -> float | None:
        self.bill_reads.append((pod_id, self.clock.t))
        return self.bill(self.clock.t)


def run(home: Path, probe: Probe, clock: Clock, lines: list[str], timings: Any = T,
        **kw: Any) -> fc.FirstContactFacts:
    kw.setdefault("entrypoint", None)
    return fc.run_first_contact(settings_for(home), IMAGE, timings=timings, provider=probe,  # type: ignore[arg-type]
                                say=lines.append, policy=fast_policy(), clock=clock,
                                sleep=clock.sleep, **kw)


def killed_itself(t: float, tag: str) -> list[str]:
    """The marker at 10 s; the self-kill's answer from 25 s (the pod is gone at 30 s)."""
    out = ["pulling", f"{tag} start"] if t >= 10 else ["pulling"]
    if t >= 25:
        out += [f"{tag} route DELETE /v2/pods/{POD} 200"]
    return out


# -- the whole check when all three facts hold -----------------------------------------------------

def test_all_three_facts_on_the_clock(tmp_path: Path) -> None:
    clock, lines = Clock(), []  # type: ignore[var-annotated]
    probe = Probe(clock, logs=killed_itself, gone_at=30.0,
                  bill=lambda t: None if t < 20 else (0.0 if t < 25 else 0.001))
    t0 = time.time()
    facts = run(tmp_path, probe, clock, lines)
    # the marker read at 0, 5, 10 s (found); the meter at 10, 15, 20, 25 s (spend first > 0 at 25)
    assert facts.start_command_ran is True
    assert (facts.meter_delay_s, facts.meter_bound_s) == (25.0, 25.0)
    # the self-kill: at 25 s the pod is there, its log read; at 30 s it is gone
    assert facts.pod_key_self_kill is True
    assert facts.self_kill_answers == [f"DELETE /v2/pods/{POD} 200"]
    assert [t for _, _, t in probe.log_reads] == [0.0, 5.0, 10.0, 25.0]
    assert {(pod, tail) for pod, tail, _ in probe.log_reads} == {(POD, 500)}
    assert clock.slept == [5.0] * 6
    assert facts.notes == []
    assert (facts.cpu, facts.pod_id, facts.start_form, facts.image) == \
        (f"{CPU} x{VCPUS}", POD, "json", IMAGE)
    assert facts.cost_estimate_usd == 0.001  # $0.06/h for 60 s
    assert facts.cost_usd == 0.001  # the meter's own figure, read after the teardown
    assert probe.bill_reads[-1] == (POD, 30.0)
    assert facts.account == fc.account_id(KEY) and t0 <= facts.checked_at <= time.time()
    assert lines == [
        f"first contact: renting a RunPod CPU pod ({CPU}, {VCPUS} vCPU) at $0.0600/h with "
        f"{IMAGE}; at most 60 s, about $0.001000 at most (cost before)",
        "first contact: the start command ran (marker in the container log)",
        "first contact: the pod is proven down; it cost $0.001000 (cost after)",
    ]
    # recorded for the account and image, and the pod torn down in the ledger
    (saved,) = fc.facts_for(settings_for(tmp_path))
    assert (saved.image, saved.run_tag, saved.meter_delay_s) == (IMAGE, facts.run_tag, 25.0)
    record = Ledger(tmp_path).get(facts.run_tag or "")
    assert record is not None and record.status == "terminated"


def test_the_probe_pod_is_the_cheapest_cpu_with_the_probe_script_and_a_one_hour_ttl(
        tmp_path: Path) -> None:
    clock, lines = Clock(), []  # type: ignore[var-annotated]
    probe = Probe(clock, logs=killed_itself, gone_at=30.0)
    t0 = time.time()
    facts = run(tmp_path, probe, clock, lines, entrypoint=())
    (spec,) = probe.specs
    nonce = probe.tag.rsplit("-", 1)[1]
    assert len(nonce) == 8  # four random bytes in hex
    assert spec.run_tag == facts.run_tag and spec.run_tag.startswith("tp-")
    assert spec.gpu_preference == [CPU] and spec.gpu_count == VCPUS
    assert spec.image == IMAGE and spec.image_entrypoint == ()
    assert spec.start_command == ["/bin/sh", "-c",
                                  fc.probe_script(nonce, "https://rest.runpod.test/v1", 20.0)]
    assert spec.env == {"TAILPOD_RUN_TAG": spec.run_tag}
    assert (spec.disk_gb, spec.ports) == (20, [])
    assert spec.ttl_at is not None and t0 + 3600 <= spec.ttl_at <= time.time() + 3600
    assert facts.start_form == "plain"  # an image known to have no ENTRYPOINT


def test_an_image_label_names_the_facts(tmp_path: Path) -> None:
    clock = Clock()
    facts = run(tmp_path, Probe(clock, logs=killed_itself, gone_at=30.0), clock, [],
                image_label="vllm/vllm-openai:v0.11.0")
    assert facts.image == "vllm/vllm-openai:v0.11.0"


# a clock that does not start at 0, a create that takes half a second, looks 5.03 s apart: each
# figure is measured from the create's end and rounded to a tenth of a second
ODD = fc.FirstContactTimings(boot_s=30.0, hold_s=20.0, gone_s=10.0, poll_s=5.03)


def started(t: float, tag: str) -> list[str]:
    return [f"{tag} start"]


def test_each_figure_counts_from_the_creates_end_to_a_tenth(tmp_path: Path) -> None:
    clock, lines = Clock(1000.0), []  # type: ignore[var-annotated]
    probe = Probe(clock, logs=started, gone_at=1015.0, create_s=0.5,
                  bill=lambda t: 0.0009 if t >= 1010.5 else None)
    probe.rate = 0.5
    facts = run(tmp_path, probe, clock, lines, timings=ODD)
    # created at 1000.5, the marker at once; the meter read at 1000.5, 1005.53, 1010.56
    assert (facts.meter_delay_s, facts.meter_bound_s) == (10.1, 10.1)  # 10.06 s
    # the pod seen at 1010.56, gone by its own hand at 1015.59
    assert facts.pod_key_self_kill is True and facts.notes == []
    assert facts.cost_estimate_usd == 0.008333  # $0.50/h for 60 s: 0.008333...
    assert facts.cost_usd == 0.0009
    assert lines[0].endswith("at $0.5000/h with " + IMAGE + "; at most 60 s, about $0.008333 "
                             "at most (cost before)")
    assert {pod for pod, _ in probe.bill_reads} == {POD}
    assert {pod for pod, _, _ in probe.log_reads} == {POD}


def test_spend_shown_only_after_the_pod_went_counts_from_the_creates_end(tmp_path: Path) -> None:
    clock = Clock(1000.0)
    probe = Probe(clock, logs=started, gone_at=1025.0, create_s=0.5,
                  bill=lambda t: 0.0012 if t >= 1025.0 else None)
    facts = run(tmp_path, probe, clock, [], timings=ODD)
    # the hold reads at 1000.5 ... 1020.62 (20.12 s); the watch sees the pod at 1020.62, gone at
    # 1025.65: then the meter shows spend, 25.15 s after the create's end (five looks of 5.03 s
    # added on a float clock come to 25.149999..., a tenth of 25.1)
    assert facts.meter_bound_s == 20.1
    assert facts.meter_delay_s == 25.1
    assert {pod for pod, _ in probe.bill_reads} == {POD}


def test_the_cost_without_a_meter_counts_from_before_the_create(tmp_path: Path) -> None:
    clock = Clock(1000.0)
    probe = Probe(clock, logs=lambda t, tag: [], create_s=0.5)
    probe.rate = 0.37
    facts = run(tmp_path, probe, clock, [], timings=ODD)
    # from 1000.0: the create (0.5 s), then looks at +0, 5.03, ..., 25.15 and out at 30.18 s:
    # $0.37/h for 30.68 s is $0.00315322
    assert facts.cost_usd == 0.003153
    assert facts.notes == ["no marker within 30 s; the log ends: an empty log"]


def test_a_boot_bound_of_zero_reads_no_log(tmp_path: Path) -> None:
    clock = Clock()
    probe = Probe(clock, logs=started)
    zero = fc.FirstContactTimings(boot_s=0.0, hold_s=20.0, gone_s=10.0, poll_s=5.0)
    facts = run(tmp_path, probe, clock, [], timings=zero)
    assert facts.start_command_ran is False and probe.log_reads == []
    assert facts.notes == ["no marker within 0 s; the log ends: an empty log"]


def test_an_entrypoint_not_read_is_unknown(tmp_path: Path) -> None:
    clock = Clock()
    probe = Probe(clock, logs=killed_itself, gone_at=30.0)
    facts = run(tmp_path, probe, clock, [], entrypoint=False)
    assert probe.specs[0].image_entrypoint is None and facts.start_form == "json"


# -- each fact that does not hold --------------------------------------------------------------

def test_no_marker_within_the_boot_bound(tmp_path: Path) -> None:
    clock, lines = Clock(), []  # type: ignore[var-annotated]
    long = "x" * 200
    probe = Probe(clock, logs=lambda t, tag: ["one", "two", f"RUNPOD_API_KEY={KEY}", long])
    facts = run(tmp_path, probe, clock, lines)
    assert facts.start_command_ran is False
    assert [t for _, _, t in probe.log_reads] == [0.0, 5.0, 10.0, 15.0, 20.0, 25.0]
    assert facts.notes == [f"no marker within 30 s; the log ends: two | RUNPOD_API_KEY=*** | "
                           f"{'x' * 160}"]
    assert (facts.meter_delay_s, facts.meter_bound_s, facts.pod_key_self_kill) == \
        (None, 0.0, None)  # the meter never read
    # no meter figure: the cost is the rate for the 30 s the pod lived
    assert facts.cost_usd == 0.0005
    assert lines[1:] == ["first contact: the pod is proven down; it cost $0.000500 (cost after)"]


def test_no_marker_in_an_empty_log(tmp_path: Path) -> None:
    clock = Clock()
    facts = run(tmp_path, Probe(clock, logs=lambda t, tag: []), clock, [])
    assert facts.notes == ["no marker within 30 s; the log ends: an empty log"]


def test_a_log_that_cannot_be_read_is_no_marker(tmp_path: Path) -> None:
    clock = Clock()

    def unreadable(t: float, tag: str) -> list[str]:
        raise ProviderError("log stream refused")

    facts = run(tmp_path, Probe(clock, logs=unreadable), clock, [])
    assert facts.start_command_ran is False
    assert facts.notes == ["no marker within 30 s; the log ends: an empty log"]


def test_a_refused_self_kill_is_read_from_the_log(tmp_path: Path) -> None:
    clock = Clock()

    def refused(t: float, tag: str) -> list[str]:
        out = [f"{tag} start"]
        if t >= 25:
            out += [f"{tag} route DELETE /v2/pods/{POD} 403",
                    f"{tag} route POST /v2/pods/{POD}/action 403", f"{tag} self-kill-done"]
        return out

    probe = Probe(clock, logs=refused)  # never gone by its own hand
    facts = run(tmp_path, probe, clock, [])
    # marker at 0; the meter read at 0, 5, 10, 15 and never shows spend: the bound is 20 s
    assert (facts.meter_delay_s, facts.meter_bound_s) == (None, 20.0)
    # the watch from 20 s: the log shows the self-kill done at 25 s, before the 30 s deadline;
    # the pod still there, its log is read once more for the answers
    assert facts.pod_key_self_kill is False
    assert facts.self_kill_answers == [f"DELETE /v2/pods/{POD} 403",
                                       f"POST /v2/pods/{POD}/action 403"]
    assert [t for _, _, t in probe.log_reads] == [0.0, 20.0, 25.0, 25.0]
    assert {pod for pod, _, _ in probe.log_reads} == {POD}
    assert facts.notes == []


def test_the_watch_ends_at_the_deadline_and_reads_the_log_once_more(tmp_path: Path) -> None:
    clock = Clock()

    def late(t: float, tag: str) -> list[str]:
        out = [f"{tag} start"]
        if t >= 30:  # the answer printed, "self-kill-done" not yet
            out += [f"{tag} route DELETE /v2/pods/{POD} 0"]
        return out

    probe = Probe(clock, logs=late)
    facts = run(tmp_path, probe, clock, [])
    # deadline 0 + 20 + 10 = 30 s: the watch looks at 20 and 25 s, then the log is read again
    assert [t for _, _, t in probe.log_reads] == [0.0, 20.0, 25.0, 30.0]
    assert facts.self_kill_answers == [f"DELETE /v2/pods/{POD} 0"]
    assert facts.pod_key_self_kill is False


def test_a_self_kill_that_printed_nothing_is_unknown(tmp_path: Path) -> None:
    clock = Clock()
    facts = run(tmp_path, Probe(clock, logs=lambda t, tag: [f"{tag} start"]), clock, [])
    assert facts.pod_key_self_kill is None and facts.self_kill_answers == []
    assert facts.notes == ["the self-kill printed nothing (no python3 in the image?)"]


def test_spend_first_shown_after_the_pod_went_is_the_meter_delay(tmp_path: Path) -> None:
    clock = Clock()
    probe = Probe(clock, logs=killed_itself, gone_at=30.0,
                  bill=lambda t: None if t < 30 else 0.002)
    facts = run(tmp_path, probe, clock, [])
    # the hold from 10 s to 30 s shows nothing; gone at 30 s, the meter then shows spend
    assert (facts.meter_bound_s, facts.meter_delay_s) == (30.0, 30.0)
    assert facts.cost_usd == 0.002


def test_no_spend_after_the_pod_went_leaves_the_delay_unknown(tmp_path: Path) -> None:
    clock = Clock()
    probe = Probe(clock, logs=killed_itself, gone_at=30.0, bill=lambda t: 0.0)
    facts = run(tmp_path, probe, clock, [])
    assert facts.meter_delay_s is None and facts.cost_usd == 0.0


def test_spend_only_while_the_pod_is_still_there_is_not_read_after(tmp_path: Path) -> None:
    clock = Clock()

    def refused(t: float, tag: str) -> list[str]:
        return [f"{tag} start", f"{tag} route DELETE /v2/pods/{POD} 403", f"{tag} self-kill-done"]

    probe = Probe(clock, logs=refused, bill=lambda t: None if t < 25 else 0.003)
    facts = run(tmp_path, probe, clock, [])
    # the hold (0 to 20 s) shows nothing; the pod did not go, so the meter is not read again
    assert (facts.meter_bound_s, facts.meter_delay_s) == (20.0, None)


# -- the teardown --------------------------------------------------------------------------------

def test_a_teardown_not_proven_says_it_may_still_bill(tmp_path: Path) -> None:
    clock, lines = Clock(), []  # type: ignore[var-annotated]
    probe = Probe(clock, logs=lambda t, tag: [f"{tag} start"], terminate_fails=True)
    with pytest.raises(BillingNotProven):
        run(tmp_path, probe, clock, lines)
    (record,) = Ledger(tmp_path).all()
    # the rate for the 30 s the pod was watched (no meter figure): $0.0005
    assert lines[-1] == ("first contact: the pod is not proven down and may still bill; "
                         f"$0.000500 so far (tailpod down {record.run_tag})")
    assert not any("proven down;" in line for line in lines)
    (saved,) = fc.facts_for(settings_for(tmp_path))
    assert saved.cost_usd == 0.0005 and record.status != "terminated"


def test_a_refused_create_is_raised_and_no_pod_is_billed_for(tmp_path: Path) -> None:
    clock, lines = Clock(1000.0), []  # type: ignore[var-annotated]
    refused = ProviderError("RunPod refused the first-contact CPU pod (HTTP 400): no cpu")
    probe = Probe(clock, logs=started, bill=lambda t: 0.5, create_s=2.0, create_error=refused)
    with pytest.raises(ProviderError) as caught:
        run(tmp_path, probe, clock, lines)
    assert caught.value is refused
    # no pod id: the meter is not asked (a read for no pod); the cost is the rate for the
    # 2 s the create took, $0.06/h: $0.000033
    assert probe.bill_reads == []
    (saved,) = fc.facts_for(settings_for(tmp_path))
    assert saved.pod_id is None and saved.cost_usd == 0.000033
    assert lines[-1] == "first contact: the pod is proven down; it cost $0.000033 (cost after)"


# -- the image's entrypoint ----------------------------------------------------------------------

def test_the_start_form_follows_the_images_entrypoint(tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    asked: list[str] = []

    class Facts:
        entrypoint: tuple[str, ...] = ()

    def read(image: str, settings: Any) -> Facts:
        asked.append(image)
        given.append(settings)
        return Facts()

    given: list[Any] = []
    monkeypatch.setattr(image_mod, "read_image_facts", read)
    clock = Clock()
    probe = Probe(clock, logs=killed_itself, gone_at=30.0)
    settings = settings_for(tmp_path)
    facts = fc.run_first_contact(settings, IMAGE, timings=T,
                                 provider=probe,  # type: ignore[arg-type]
                                 policy=fast_policy(), clock=clock, sleep=clock.sleep)
    assert asked == [IMAGE] and facts.start_form == "plain" and facts.notes == []
    assert given == [settings]  # the registry is read with the run's settings (its auth)
    assert probe.specs[0].image_entrypoint == ()


def test_an_unreadable_image_config_is_noted_and_the_json_form_used(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def read(image: str, settings: Any) -> Any:
        raise TailpodError("the registry said 401")

    monkeypatch.setattr(image_mod, "read_image_facts", read)
    notes: list[str] = []
    assert fc.image_entrypoint(settings_for(tmp_path), IMAGE, notes) is None
    assert notes == ["the image config could not be read (the registry said 401); the JSON "
                     "start form was used"]
    assert fc.image_entrypoint(settings_for(tmp_path), IMAGE) is None  # no notes kept: no error
    clock = Clock()
    probe = Probe(clock, logs=killed_itself, gone_at=30.0)
    facts = run(tmp_path, probe, clock, [], entrypoint=True)
    assert facts.start_form == "json" and probe.specs[0].image_entrypoint is None
    assert facts.notes == notes


# -- the timings, the script -------------------------------------------------------------------

def test_the_live_timings_and_their_overrides() -> None:
    live = fc.FirstContactTimings()
    assert (live.boot_s, live.hold_s, live.gone_s, live.poll_s) == (900.0, 90.0, 90.0, 5.0)
    assert live.bound_s() == 1080.0
    got = fc.FirstContactTimings.from_env({"TAILPOD_FIRST_CONTACT_BOOT_S": "12",
                                           "TAILPOD_FIRST_CONTACT_HOLD_S": "",
                                           "TAILPOD_FIRST_CONTACT_GONE_S": "3.5",
                                           "TAILPOD_FIRST_CONTACT_POLL_S": "0.25"})
    assert got == fc.FirstContactTimings(boot_s=12.0, hold_s=90.0, gone_s=3.5, poll_s=0.25)
    assert fc.FirstContactTimings.from_env({"TAILPOD_FIRST_CONTACT_HOLD_S": "7"}).hold_s == 7.0
    with pytest.raises(ConfigError) as caught:
        fc.FirstContactTimings.from_env({"TAILPOD_FIRST_CONTACT_GONE_S": "soon"})
    assert caught.value.message == \
        "TAILPOD_FIRST_CONTACT_GONE_S='soon' is not a number of seconds"
    assert caught.value.__cause__ is None and caught.value.__suppress_context__


def test_the_probe_script_word_by_word() -> None:
    script = fc.probe_script("0badcafe", "https://rest.runpod.test/v1/", 90.0)
    start, hold, kill, done, idle = script.split("; ")
    assert start == "echo tailpod-first-contact-''0badcafe start"
    assert hold == "sleep 90"
    assert done == "echo tailpod-first-contact-''0badcafe self-kill-done"
    assert idle == "exec sleep 3600"
    argv = shlex.split(kill)
    assert argv[:3] == ["python3", "-c", fc.SELF_KILL_CODE]
    assert argv[3] == "https://rest.runpod.test/v1"
    # the REST routes of the dead-man's table, GraphQL left out, as compact JSON
    assert argv[4] == ('[["DELETE","/v2/pods/{id}",null],'
                       '["POST","/v2/pods/{id}/action",{"action":"terminate"}]]')
    assert argv[5] == "tailpod-first-contact-0badcafe"
    assert len(argv) == 6
    assert "sleep 2.5;" in fc.probe_script("n", "u", 2.5)
    assert "sleep 0;" in fc.probe_script("n", "u", -3.0)
    assert fc.probe_script("n", "u", 1.0, python="/opt/py").split("; ")[2].startswith("/opt/py -c ")


# -- the CPU catalog and the CPU create, against a mock REST v2 -------------------------------

def cpu(cpu_id: Any, per_vcpu: Any, low: Any = 2, availability: str | None = "HIGH") -> Any:
    entry: dict[str, Any] = {"id": cpu_id, "price": {"securePerVcpu": per_vcpu}}
    if low is not None:
        entry["vcpu"] = {"min": low}
    if availability is not None:
        entry["availability"] = availability
    return entry


class Rest:
    def __init__(self, catalog: Any = None, creates: list[Any] | None = None,
                 pod: Any = None, listing: list[dict[str, Any]] | None = None) -> None:
        self.catalog = catalog if catalog is not None else {"cpus": []}
        self.creates = creates or []  # (status, body), or an exception to raise
        self.pod = pod
        self.listing = listing or []
        self.seen: list[httpx.Request] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.seen.append(request)
        path, method = request.url.path, request.method
        if (method, path) == ("GET", "/v2/catalog/cpus"):
            if isinstance(self.catalog, Exception):
                raise self.catalog
            return httpx.Response(200, json=self.catalog)
        if (method, path) == ("POST", "/v2/pods"):
            answer = self.creates.pop(0)
            if isinstance(answer, Exception):
                raise answer
            status, body = answer
            return httpx.Response(status, json=body)
        if (method, path) == ("GET", "/v2/pods"):
            return httpx.Response(200, json={"pods": self.listing})
        if method == "GET" and path.startswith("/v2/pods/"):
            return httpx.Response(200, json=self.pod) if self.pod else httpx.Response(404)
        return httpx.Response(405)


TIMINGS = ApiTimings(request_timeout_s=2.0, attempts=1, backoff_s=0.01, backoff_max_s=0.01,
                     create_attempts=2, readback_attempts=1, readback_interval_s=0.01)


def cpu_probe(tmp_path: Path, rest: Rest) -> fc.RunPodCpuProbe:
    return fc.RunPodCpuProbe(settings_for(tmp_path), timings=TIMINGS,
                             transport=httpx.MockTransport(rest), sleep=lambda _s: None)


def test_the_cheapest_cpu_on_offer(tmp_path: Path) -> None:
    rest = Rest({"cpus": [
        cpu("cpu-none", 0.001, availability="NONE"),  # out of stock
        cpu("cpu-noprice", None), cpu("cpu-strprice", "0.01"),  # no price: never taken
        cpu(None, 0.001), cpu("", 0.001), "cpu-text",  # no id, not an object: left out
        cpu("cpu5c", 0.04, low=3),  # 3 vCPU at least: 4 (a power of two), $0.16/h
        cpu("cpu3g", 0.035, low=None),  # no minimum: 2 vCPU, $0.07/h
        cpu("cpu3c", 0.03, low=8),  # 8 vCPU, $0.24/h
        cpu("cpu3m", 0.07, low=1, availability=None),  # at least 2 vCPU, $0.14/h
    ]})
    probe = cpu_probe(tmp_path, rest)
    assert [c["id"] for c in probe.cpu_catalog()] == [
        "cpu-none", "cpu-noprice", "cpu-strprice", "cpu5c", "cpu3g", "cpu3c", "cpu3m"]
    assert probe.cheapest_cpu() == ("cpu3g", 2, 0.07)
    request = rest.seen[0]
    assert (request.method, request.url.path) == ("GET", "/v2/catalog/cpus")
    assert dict(request.url.params) == {"include": "AVAILABILITY", "product": "POD"}


def test_the_rate_is_rounded_to_four_places_and_ties_keep_the_first(tmp_path: Path) -> None:
    probe = cpu_probe(tmp_path, Rest({"cpus": [cpu("a", 0.012345, low=4),
                                               cpu("b", 0.02469, low=2)]}))
    # 4 x 0.012345 = 0.04938, 2 x 0.02469 = 0.04938: the same rate, the first kept
    assert probe.cheapest_cpu() == ("a", 4, 0.0494)
    probe = cpu_probe(tmp_path, Rest({"cpus": [cpu("a", 0.05), cpu("b", 0.04, low=16)]}))
    assert probe.cheapest_cpu() == ("a", 2, 0.1)


@pytest.mark.parametrize("catalog", [{"cpus": None}, {"gpus": []}, [], {"cpus": "none"}])
def test_a_catalog_without_a_cpus_list_is_refused(tmp_path: Path, catalog: Any) -> None:
    with pytest.raises(ProviderError) as caught:
        cpu_probe(tmp_path, Rest(catalog)).cpu_catalog()
    assert caught.value.message == "RunPod: the CPU catalog answer has no `cpus` list"


def test_no_cpu_on_offer_is_refused_with_a_hint(tmp_path: Path) -> None:
    rest = Rest({"cpus": [cpu("cpu3c", 0.03, availability="NONE"), cpu("cpu5c", None)]})
    with pytest.raises(ProviderError) as caught:
        cpu_probe(tmp_path, rest).cheapest_cpu()
    assert caught.value.message == \
        "RunPod offers no CPU pod now; the first-contact check needs one"
    assert caught.value.hint == "run it again later"


def probe_spec() -> PodSpec:
    return PodSpec(run_tag="tp-20260101-000000-fcfcfc", gpu_preference=[CPU], image=IMAGE,
                   start_command=["/bin/sh", "-c", "echo hi"], gpu_count=4,
                   env={"TAILPOD_RUN_TAG": "tp-20260101-000000-fcfcfc"}, disk_gb=20, ports=[])


def test_the_cpu_create_sends_a_cpu_not_a_gpu(tmp_path: Path) -> None:
    pod = {"id": "p-77", "name": "tp-20260101-000000-fcfcfc", "status": "RUNNING", "cost": 0.12}
    rest = Rest(creates=[(201, {"id": "p-77"})], pod=pod)
    info = cpu_probe(tmp_path, rest).create(probe_spec())
    assert (info.pod_id, info.run_tag, info.state) == \
        ("p-77", "tp-20260101-000000-fcfcfc", PodState.RUNNING)
    body = json.loads(rest.seen[0].content)
    assert body["cpu"] == {"id": CPU, "vcpuCount": 4}
    assert "gpu" not in body
    assert (body["name"], body["image"], body["disk"]) == \
        ("tp-20260101-000000-fcfcfc", IMAGE, 20)
    assert [f"{r.method} {r.url.path}" for r in rest.seen] == ["POST /v2/pods", "GET /v2/pods/p-77"]


def test_a_created_pod_not_yet_readable_is_pending_under_its_tag(tmp_path: Path) -> None:
    info = cpu_probe(tmp_path, Rest(creates=[(200, {"id": "p-78"})])).create(probe_spec())
    assert info == PodInfo("p-78", "tp-20260101-000000-fcfcfc", PodState.PENDING)


def test_a_refused_cpu_create_names_the_status_and_the_detail(tmp_path: Path) -> None:
    rest = Rest(creates=[(400, {"title": "Error", "status": 400, "detail": "no such cpu"})])
    with pytest.raises(ProviderError) as caught:
        cpu_probe(tmp_path, rest).create(probe_spec())
    assert caught.value.message == ("RunPod refused the first-contact CPU pod (HTTP 400): "
                                    "no such cpu; nothing was created")


def test_a_create_that_keeps_failing_names_each_reason(tmp_path: Path) -> None:
    # 200 without an id is tried again (create_attempts 2), then the listing shows no pod
    rest = Rest(creates=[(200, {"detail": "odd"}), (200, {"detail": "odd"})])
    with pytest.raises(ProviderError) as caught:
        cpu_probe(tmp_path, rest).create(probe_spec())
    assert caught.value.message == (
        f"RunPod: creating a CPU pod ({CPU} x4) failed: {CPU}: the API kept failing "
        "(HTTP 200: odd)")


UNREACHABLE = ("(no answer: ConnectError at http://runpod.invalid (from TAILPOD_RUNPOD_URL: a "
               "stopped sandbox or a stale value?))")


def test_an_unanswered_catalog_read_names_the_call(tmp_path: Path) -> None:
    rest = Rest(httpx.ConnectError("refused"))
    with pytest.raises(TailpodError) as caught:
        cpu_probe(tmp_path, rest).cpu_catalog()
    assert caught.value.message == \
        f"RunPod: reading the CPU catalog failed {UNREACHABLE}"


def test_an_unanswered_create_names_the_call(tmp_path: Path) -> None:
    rest = Rest(creates=[httpx.ConnectError("refused"), httpx.ConnectError("refused")])
    with pytest.raises(ProviderError) as caught:
        cpu_probe(tmp_path, rest).create(probe_spec())
    what = f"creating a CPU pod ({CPU} x4)"
    assert caught.value.message == (f"RunPod: {what} failed: {CPU}: the API kept failing "
                                    f"(RunPod: {what} failed {UNREACHABLE})")


def test_a_created_answer_without_an_id_is_tried_again(tmp_path: Path) -> None:
    pod = {"id": "p-79", "name": "tp-20260101-000000-fcfcfc", "status": "RUNNING"}
    rest = Rest(creates=[(201, {"status": "queued"}), (201, {"id": "p-79"})], pod=pod)
    assert cpu_probe(tmp_path, rest).create(probe_spec()).pod_id == "p-79"
    assert [f"{r.method} {r.url.path}" for r in rest.seen] == [
        "POST /v2/pods", "GET /v2/pods", "POST /v2/pods", "GET /v2/pods/p-79"]


def test_after_an_error_only_this_runs_pod_is_adopted(tmp_path: Path) -> None:
    theirs = {"id": "p-other", "name": "tp-20251231-000000-0a0a0a", "status": "RUNNING"}
    ours = {"id": "p-ours", "name": "tp-20260101-000000-fcfcfc", "status": "RUNNING"}
    rest = Rest(creates=[(500, {"detail": "boom"})], listing=[theirs, ours], pod=ours)
    info = cpu_probe(tmp_path, rest).create(probe_spec())
    assert info.pod_id == "p-ours"
    assert [f"{r.method} {r.url.path}" for r in rest.seen] == [
        "POST /v2/pods", "GET /v2/pods", "GET /v2/pods/p-ours"]


def test_first_contact_without_a_key_is_refused_before_anything_rents(tmp_path: Path) -> None:
    clock = Clock()
    probe = Probe(clock, logs=killed_itself)
    with pytest.raises(ConfigError) as caught:
        fc.run_first_contact(settings_for(tmp_path, key=None), IMAGE, timings=T,
                             provider=probe,  # type: ignore[arg-type]
                             policy=fast_policy(), clock=clock, sleep=clock.sleep,
                             entrypoint=None)
    assert (caught.value.message, caught.value.hint) == ("no RunPod API key", "set RUNPOD_API_KEY")
    assert probe.specs == [] and Ledger(tmp_path).all() == []
