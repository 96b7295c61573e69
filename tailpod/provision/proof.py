"""Pieces of the billing proof both cloud adapters share (docs/providers.md, "The billing proof")."""

from __future__ import annotations

from collections.abc import Callable, Iterable

from tailpod.ledger import RUN_TAG_PREFIX
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
                 kill: Callable[[PodInfo], str]) -> tuple[ProofCheck, list[str]]:
    """(d) no *other* tailpod-tagged resource bills unless the ledger knows it as a live run."""
    known = set(known_active_tags)
    billing = [p for p in others if p.run_tag != run_tag and p.state is not PodState.TERMINATED]
    orphans = [p for p in billing if p.run_tag not in known]
    tracked = [p for p in billing if p.run_tag in known]
    notes = []
    if tracked:
        notes.append("tracked runs still up: " + "; ".join(describe(p) for p in tracked))
    if not orphans:
        detail = f"no untracked tailpod resource bills at {provider_label}"
        return ProofCheck("other-tailpod-resources", True,
                          "; ".join([detail, *notes])), []
    lines = [f"{provider_label} bills untracked {describe(p)} — kill: {kill(p)}" for p in orphans]
    detail = f"{len(orphans)} untracked tailpod resource(s) still bill at {provider_label}"
    return ProofCheck("other-tailpod-resources", False, "; ".join([detail, *notes])), lines
