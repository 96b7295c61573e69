"""The acceptance fingerprint (results/fingerprint.py): each run's, in its analysis; across runs,
the check that the same model pair accepts the same, with the flags first."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, cast

from tailpod.results.fingerprint import (
    Fingerprint,
    FingerprintChecks,
    check_fingerprints,
    recorded_fingerprint,
)
from tailpod.results.markdown import fmt_num, table
from tailpod.results.section import CompareContext, CompareRenderContext, Context, Section


def compute(ctx: Context) -> Fingerprint:
    return recorded_fingerprint(ctx.run)


def compare(cc: CompareContext) -> dict[str, FingerprintChecks]:
    # each analysis' `fingerprint` is this section's compute() value
    fps = [cast("Fingerprint | None", a.get("fingerprint")) for a in cc.analyses]
    if not all(fps):
        return {"fingerprint": FingerprintChecks(checks=[], flags=[])}
    return {"fingerprint": check_fingerprints([fp for fp in fps if fp])}


def render_compare(cmp: Mapping[str, Any], rc: CompareRenderContext) -> list[str]:
    fp = cast("FingerprintChecks | None", cmp.get("fingerprint"))  # compare() above wrote it
    if not fp or not fp["checks"]:
        return []
    L = ["## Acceptance fingerprint (same pair, run_i vs run_0)", ""]
    L += [f"- **FLAG**: {f}" for f in fp["flags"]] or ["- every shared arm agrees"]
    L.append("")
    L += table(
        ["arm", "prompt class", "runs", "acceptance length", "rep ranges", "allowed", "status"],
        [
            [
                c["arm"],
                c["prompt_class"],
                " vs ".join(c["runs"]),
                " vs ".join(fmt_num(v) for v in c["acceptance_length"]),
                " / ".join(fmt_num(v) for v in c["rep_range"]),
                fmt_num(c["allowed"]),
                c["status"],
            ]
            for c in fp["checks"]
        ],
        rc.stamp,
    )
    return L


SECTION = Section(
    key="fingerprint",
    rank=110,
    compute=compute,
    compare_rank=10,
    compare=compare,
    render_compare=render_compare,
)
