"""Pieces of the billing proof both cloud adapters share (docs/providers.md, "The billing proof")."""

from __future__ import annotations

from collections.abc import Callable, Iterable

from tailpod.ledger import RUN_TAG_PREFIX, another_homes, tag_home
from tailpod.provision.base import PodInfo, PodState, ProofCheck

TAG_PREFIX = RUN_TAG_PREFIX


def is_tailpod_tag(name: str | None) -> bool:
    return bool(name) and str(name).startswith(TAG_PREFIX)


def describe(info: PodInfo) -> str:
    gpu = f"{info.gpu_count or 1}x {info.gpu_type}" if info.gpu_type else "unknown GPU"
    price = f"${info.price_per_hr:.3f}/h" if info.price_per_hr else "rate unknown"
    state = info.state.value
    if info.detail.get("gpu_billing") and info.state is not PodState.RUNNING:
        state = f"{info.detail.get('status') or state} (paused; the GPU still bills)"
    elif info.state is PodState.STOPPED:
        state = "stopped (GPU released, its disk still bills)"
    return f"{info.pod_id} [{info.run_tag or 'untagged'}] {gpu}, {state}, {price}"


def others_line(info: PodInfo) -> str:
    """Another home's pod on a shared account, named as theirs (the tag first, outside the
    brackets a console's markup would take)."""
    return (f"another home's pod {info.run_tag} ({tag_home(info.run_tag)}): {describe(info)} "
            "bills; not this run's")


def listed_check(provider_label: str, run_tag: str, listed: list[PodInfo],
                 kill: Callable[[PodInfo], str]) -> tuple[ProofCheck, list[str]]:
    """(a) nothing carrying the run tag is listed any more."""
    if not listed:
        return ProofCheck("tag-listing", True,
                          f"{provider_label} lists nothing tagged {run_tag}"), []
    lines = [f"{provider_label} still lists {describe(p)} — kill: {kill(p)}" for p in listed]
    detail = f"{provider_label} still lists {len(listed)} resource(s) tagged {run_tag}"
    return ProofCheck("tag-listing", False, detail), lines


def others_check(provider_label: str, run_tag: str, others: Iterable[PodInfo],
                 known_active_tags: Iterable[str],
                 kill: Callable[[PodInfo], str], *,
                 home: str | None = None) -> tuple[ProofCheck, list[str]]:
    """(d) no *other* tailpod-tagged resource bills unless the ledger knows it as a live run.

    A pod whose tag carries another home's id (`home`: this home's, ledger.home_id) is a
    colleague's on a shared account: named in the detail as theirs, never as this run's."""
    known = set(known_active_tags)
    billing = [p for p in others if p.run_tag != run_tag and p.state is not PodState.TERMINATED]
    theirs = [p for p in billing if another_homes(p.run_tag, home) and p.run_tag not in known]
    billing = [p for p in billing if p not in theirs]
    orphans = [p for p in billing if p.run_tag not in known]
    tracked = [p for p in billing if p.run_tag in known]
    notes = []
    if tracked:
        notes.append("tracked runs still up: " + "; ".join(describe(p) for p in tracked))
    notes += [others_line(p) for p in theirs]
    if not orphans:
        detail = f"no untracked tailpod resource bills at {provider_label}"
        return ProofCheck("other-tailpod-resources", True,
                          "; ".join([detail, *notes])), []
    lines = [f"{provider_label} bills untracked {describe(p)} — kill: {kill(p)}" for p in orphans]
    detail = f"{len(orphans)} untracked tailpod resource(s) still bill at {provider_label}"
    return ProofCheck("other-tailpod-resources", False, "; ".join([detail, *notes])), lines


# -- meter comparisons (RunPod billing history, vast credit) ------------------------------------
METER_WAIT_MAX_S = 60.0  # a known meter delay up to this long is waited out so the read counts


def meter_window_s(base_window_s: float, delay_s: float | None) -> float:
    """How long to watch a meter: the base window, or just past a known short update delay."""
    if delay_s is not None and base_window_s <= delay_s <= METER_WAIT_MAX_S:
        return delay_s + 1.0
    return base_window_s


def meter_check(name: str, billing: bool, window_s: float, delay_s: float | None,
                delay_source: str, saw: str) -> ProofCheck:
    """A meter comparison, saying what it saw. Growth beyond what is explained is evidence of
    billing whatever the delay (fail). No growth is evidence of stopped charges only over a
    window longer than the meter's update delay (measured by first contact, or documented);
    otherwise the check is recorded "not informative" and the proof rests on the listing and
    the direct lookup."""
    if billing:
        return ProofCheck(name, False, saw)
    if delay_s is not None and window_s > delay_s:
        return ProofCheck(name, True, f"{saw}; the {window_s:.1f}s window is longer than the "
                                      f"meter's update delay of {delay_s:.0f}s ({delay_source})")
    why = (f"the meter's update delay ({delay_s:.0f}s, {delay_source}) is not shorter than the "
           f"{window_s:.1f}s window" if delay_s is not None
           else f"the meter's update delay is unknown ({delay_source})")
    return ProofCheck(name, True, f"not informative: {saw}; {why}, so no movement proves "
                                  "nothing; the proof rests on the listing and the direct "
                                  "lookup", informative=False)
