"""The billing proof's shared checks (tailpod/provision/proof.py), each expected line written out
by hand: what the proof says, which resources it names, and what it counts as billing."""

from __future__ import annotations

from tailpod.provision.base import PodInfo, PodState
from tailpod.provision.proof import (
    METER_WAIT_MAX_S,
    describe,
    is_tailpod_tag,
    listed_check,
    meter_check,
    meter_window_s,
    others_check,
)


def kill(p: PodInfo) -> str:
    return f"stop {p.pod_id}"


def pod(pod_id: str, tag: str | None, state: PodState = PodState.RUNNING, **kw: object) -> PodInfo:
    return PodInfo(pod_id=pod_id, run_tag=tag, state=state, **kw)  # type: ignore[arg-type]


def test_is_tailpod_tag() -> None:
    assert is_tailpod_tag("tp-20260101-1")
    assert not is_tailpod_tag("tp_20260101")
    assert not is_tailpod_tag("xtp-1")
    assert not is_tailpod_tag("")
    assert not is_tailpod_tag(None)


def test_describe_names_the_pod_its_card_state_and_price() -> None:
    assert describe(pod("p1", "tp-a", gpu_type="A40", gpu_count=2, price_per_hr=0.4)) == \
        "p1 [tp-a] 2x A40, running, $0.400/h"
    assert describe(pod("p2", None, gpu_type="A40", price_per_hr=0.4)) == \
        "p2 [untagged] 1x A40, running, $0.400/h"
    assert describe(pod("p3", "tp-b")) == "p3 [tp-b] unknown GPU, running, rate unknown"
    assert describe(pod("p4", "tp-c", PodState.STOPPED, gpu_type="A40", price_per_hr=0.0)) == \
        "p4 [tp-c] 1x A40, stopped (GPU released, its disk still bills), rate unknown"



def test_describe_says_a_paused_pod_whose_gpu_bills_still_bills() -> None:
    # vast's "frozen" instance: not running, GPU charges apply (detail gpu_billing, its status)
    frozen = pod("f1", "tp-f", PodState.STOPPED, gpu_type="A40", price_per_hr=0.3,
                 detail={"gpu_billing": True, "status": "frozen"})
    assert describe(frozen) == "f1 [tp-f] 1x A40, frozen (paused; the GPU still bills), $0.300/h"
    # no provider status: the state's own word
    paused = pod("f2", "tp-f", PodState.PENDING, detail={"gpu_billing": True})
    assert describe(paused) == \
        "f2 [tp-f] unknown GPU, pending (paused; the GPU still bills), rate unknown"
    # a running pod bills its GPU anyway: nothing paused to say
    running = pod("f3", "tp-f", detail={"gpu_billing": True, "status": "running"})
    assert describe(running) == "f3 [tp-f] unknown GPU, running, rate unknown"
    # stopped with the GPU not billing: the stopped wording
    exited = pod("f4", "tp-f", PodState.STOPPED, detail={"gpu_billing": False,
                                                         "status": "exited"})
    assert describe(exited) == \
        "f4 [tp-f] unknown GPU, stopped (GPU released, its disk still bills), rate unknown"

def test_listed_check_passes_only_when_nothing_is_listed() -> None:
    check, lines = listed_check("RunPod", "tp-a", [], kill)
    assert (check.name, check.passed, check.detail) == (
        "tag-listing", True, "RunPod lists nothing tagged tp-a")
    assert lines == []
    listed = [pod("p1", "tp-a", gpu_type="A40", price_per_hr=0.4),
              pod("p2", "tp-a", PodState.STOPPED)]
    check, lines = listed_check("RunPod", "tp-a", listed, kill)
    assert (check.name, check.passed, check.detail) == (
        "tag-listing", False, "RunPod still lists 2 resource(s) tagged tp-a")
    assert lines == [
        "RunPod still lists p1 [tp-a] 1x A40, running, $0.400/h — kill: stop p1",
        "RunPod still lists p2 [tp-a] unknown GPU, stopped (GPU released, its disk still bills), "
        "rate unknown — kill: stop p2",
    ]


def test_others_check_fails_on_untracked_billing_only() -> None:
    others = [
        pod("self", "tp-a"),  # the run being proven: the listing check's business
        pod("gone", "tp-old", PodState.TERMINATED),  # terminated: bills nothing
        pod("live", "tp-live", gpu_type="A40", price_per_hr=0.4),  # the ledger's live run
    ]
    check, lines = others_check("vast.ai", "tp-a", others, ["tp-live"], kill)
    assert (check.name, check.passed) == ("other-tailpod-resources", True)
    assert check.detail == ("no untracked tailpod resource bills at vast.ai; tracked runs still "
                            "up: live [tp-live] 1x A40, running, $0.400/h")
    assert lines == []
    two = [pod("l1", "tp-l1"), pod("l2", "tp-l2")]
    check, _ = others_check("vast.ai", "tp-a", two, ["tp-l1", "tp-l2"], kill)
    assert check.detail == ("no untracked tailpod resource bills at vast.ai; tracked runs still "
                            "up: l1 [tp-l1] unknown GPU, running, rate unknown; "
                            "l2 [tp-l2] unknown GPU, running, rate unknown")
    check, lines = others_check("vast.ai", "tp-a", [pod("self", "tp-a")], [], kill)
    assert check.detail == "no untracked tailpod resource bills at vast.ai" and check.passed

    stray = [pod("orph", "tp-orphan", PodState.STOPPED), pod("err", "tp-err", PodState.ERROR),
             pod("live", "tp-live")]
    check, lines = others_check("vast.ai", "tp-a", stray, ["tp-live"], kill)
    assert (check.name, check.passed) == ("other-tailpod-resources", False)
    assert check.detail == ("2 untracked tailpod resource(s) still bill at vast.ai; tracked runs "
                            "still up: live [tp-live] unknown GPU, running, rate unknown")
    assert lines == [
        "vast.ai bills untracked orph [tp-orphan] unknown GPU, stopped (GPU released, its disk "
        "still bills), rate unknown — kill: stop orph",
        "vast.ai bills untracked err [tp-err] unknown GPU, error, rate unknown — kill: stop err",
    ]


def test_meter_window_waits_just_past_a_known_delay_within_its_bounds() -> None:
    assert METER_WAIT_MAX_S == 60.0  # docs/providers.md, "The billing proof"
    assert meter_window_s(30.0, None) == 30.0  # unknown delay: the base window
    assert meter_window_s(30.0, 20.0) == 30.0  # the base window already outlasts it
    assert meter_window_s(30.0, 30.0) == 31.0  # equal to the window: a second past it
    assert meter_window_s(30.0, 45.0) == 46.0
    assert meter_window_s(30.0, 60.0) == 61.0  # the longest delay still waited out
    assert meter_window_s(30.0, 60.5) == 30.0  # longer: not waited for


def test_meter_check_counts_no_movement_only_over_a_window_longer_than_the_delay() -> None:
    moved = meter_check("charges-stopped", True, 36.0, 10.0, "first contact", "moved $1")
    assert (moved.name, moved.passed, moved.detail, moved.informative) == (
        "charges-stopped", False, "moved $1", True)
    longer = meter_check("charges-stopped", False, 36.0, 35.0, "first contact", "moved $0")
    assert (longer.passed, longer.informative) == (True, True)
    assert longer.detail == ("moved $0; the 36.0s window is longer than the meter's update "
                             "delay of 35s (first contact)")
    equal = meter_check("charges-stopped", False, 36.0, 36.0, "documented", "moved $0")
    assert (equal.passed, equal.informative) == (True, False)
    assert equal.detail == ("not informative: moved $0; the meter's update delay (36s, "
                            "documented) is not shorter than the 36.0s window, so no movement "
                            "proves nothing; the proof rests on the listing and the direct "
                            "lookup")
    unknown = meter_check("spend", False, 36.0, None, "no interval published", "moved $0")
    assert (unknown.name, unknown.passed, unknown.informative) == ("spend", True, False)
    assert unknown.detail == ("not informative: moved $0; the meter's update delay is unknown "
                              "(no interval published), so no movement proves nothing; the "
                              "proof rests on the listing and the direct lookup")
