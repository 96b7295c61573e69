"""The billing proof's shared checks (tailpod/provision/proof.py), each expected line written out
by hand: what the proof says, which resources it names, and what it counts as billing."""

from __future__ import annotations

from tailpod.provision.base import PodInfo, PodState
from tailpod.provision.proof import describe, is_tailpod_tag, listed_check, others_check


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
