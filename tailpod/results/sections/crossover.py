"""Crossover: where plain overtakes a spec arm, i.e. where the throughput speedup falls to 1,
interpolated linearly in log2(concurrency) by default (settable to linear). "uncertain" when the
spec and plain spreads overlap at either bracketing point. Reads the speedup section."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any, TypedDict, cast

from tailpod.results.markdown import arm_label, table
from tailpod.results.section import (
    CompareContext,
    CompareRenderContext,
    Context,
    RenderContext,
    Section,
)


class CrossoverEntry(TypedDict, total=False):
    """One spec arm: always arm, status, concurrency, detail; with a usable baseline also what
    find_crossover() returns (interpolation, bracket, recrossings)."""

    arm: str
    baseline: str
    status: str  # crossover, uncertain, none_in_range, below_range, no_data, void, no_baseline
    concurrency: float | None
    interpolation: str
    bracket: list[int] | None
    recrossings: list[int]
    detail: str


def _interp(c_lo: float, c_hi: float, t: float, how: str) -> float:
    if how == "log2":
        x = math.log2(c_lo) + t * (math.log2(c_hi) - math.log2(c_lo))
        return float(2**x)
    return c_lo + t * (c_hi - c_lo)


def find_crossover(points: Sequence[dict[str, Any]], interpolation: str = "log2") -> dict[str, Any]:
    """Where plain overtakes a spec arm. `points`: {concurrency, speedup, overlap} per measured c.

    Status: "crossover" | "uncertain" (spreads overlap at a bracketing point) | "none_in_range"
    (spec ahead everywhere) | "below_range" (plain already level or ahead at the lowest c) |
    "no_data".
    """
    pts = sorted(
        (p for p in points if p.get("speedup") is not None), key=lambda p: p["concurrency"]
    )
    base: dict[str, Any] = {"interpolation": interpolation, "concurrency": None, "bracket": None}
    if not pts:
        return base | {"status": "no_data", "detail": "no measured speedup"}
    if pts[0]["speedup"] <= 1:
        tie = " (tie)" if pts[0]["speedup"] == 1 else ""
        return base | {
            "status": "below_range",
            "detail": "plain is level or ahead already at the lowest measured "
            f"c={pts[0]['concurrency']}{tie}",
        }
    for i in range(len(pts) - 1):
        lo, hi = pts[i], pts[i + 1]
        if lo["speedup"] > 1 >= hi["speedup"]:
            t = (lo["speedup"] - 1) / (lo["speedup"] - hi["speedup"])
            at = _interp(lo["concurrency"], hi["concurrency"], t, interpolation)
            uncertain = bool(lo.get("overlap") or hi.get("overlap"))
            later = [p["concurrency"] for p in pts[i + 2 :] if p["speedup"] > 1]
            detail = (
                f"plain overtakes between c={lo['concurrency']} (speedup {lo['speedup']:.3f}) and "
                f"c={hi['concurrency']} (speedup {hi['speedup']:.3f}); "
                f"≈ c={at:.2f} ({interpolation})"
            )
            if uncertain:
                detail += (
                    "; rep spreads overlap at a bracketing point, so the crossing is within noise"
                )
            if later:
                detail += f"; speedup rises above 1 again at c={later}"
            return base | {
                "status": "uncertain" if uncertain else "crossover",
                "concurrency": at,
                "bracket": [lo["concurrency"], hi["concurrency"]],
                "recrossings": later,
                "detail": detail,
            }
    noisy = [p["concurrency"] for p in pts if p.get("overlap")]
    if noisy:
        # decide gives a lead inside the rep spread to plain: say so here too
        return base | {
            "status": "none_in_range",
            "detail": "spec ahead in median at every measured concurrency up to "
            f"c={pts[-1]['concurrency']}; the rep spreads overlap at c="
            + ", ".join(str(c) for c in noisy) + ", so it leads there within noise",
        }
    return base | {
        "status": "none_in_range",
        "detail": f"spec ahead at every measured concurrency up to c={pts[-1]['concurrency']}",
    }


def compute(ctx: Context) -> list[CrossoverEntry]:
    speedups = ctx.done["speedup"]
    out: list[CrossoverEntry] = []
    for a in ctx.arms:
        if a.k == 0:
            continue
        base = ctx.baseline_for(a)
        if a.label in ctx.void:
            out.append({"arm": a.label, "status": "void", "concurrency": None,
                        "detail": f"VOID: {ctx.void[a.label]}"})  # fmt: skip
        elif base is None or base.label in ctx.void:
            out.append({"arm": a.label, "status": "no_baseline", "concurrency": None,
                        "detail": "no usable plain arm"})  # fmt: skip
        else:
            points = [
                {"concurrency": e["concurrency"], **e["throughput"]}
                for e in speedups
                if e["arm"] == a.label and e["throughput"]
            ]
            found = find_crossover(points, ctx.settings.interpolation)
            out.append(cast(CrossoverEntry, {"arm": a.label, "baseline": base.label, **found}))
    return out


def render(entries: list[CrossoverEntry], rc: RenderContext) -> list[str]:
    if rc.analysis.get("by_load") and not rc.analysis["cells"]:
        # an open-loop or trace run: both are found over concurrency, which it did not vary
        return ["## Crossover and knee", "",
                "Not measured: crossover and knee are found over concurrency, and this run offered "
                "request rates (or replayed a trace) instead. Where speculation stops paying is in "
                "Speedup over plain, per load, and the highest rate each arm holds the SLO at is in "
                "the Open loop section.", ""]  # fmt: skip
    rows = [
        [
            arm_label(c["arm"], rc.void),
            c["status"],
            f"{c['concurrency']:.2f}" if c.get("concurrency") else "—",
            c.get("detail", ""),
        ]
        for c in entries
    ]
    return ["## Crossover and knee", ""] + table(
        ["arm", "crossover", "at c", "detail"], rows, rc.stamp
    )


def compare(cc: CompareContext) -> dict[str, Any]:
    rows = [
        {
            "arm": arm,
            "per_run": [
                next(
                    (
                        {"status": c["status"], "concurrency": c.get("concurrency")}
                        for c in a["crossover"]
                        if c["arm"] == arm
                    ),
                    None,
                )
                for a in cc.analyses
            ],
        }
        for arm in cc.arm_labels
        if any(c["arm"] == arm for a in cc.analyses for c in a["crossover"])
    ]
    return {"crossover": rows}


def _per_run(p: Mapping[str, Any] | None) -> str:
    if p is None:
        return "—"
    return f"{p['status']} c≈{p['concurrency']:.2f}" if p.get("concurrency") else p["status"]


def render_compare(cmp: Mapping[str, Any], rc: CompareRenderContext) -> list[str]:
    if not cmp["crossover"]:
        return []
    rows = [[c["arm"], *[_per_run(p) for p in c["per_run"]]] for c in cmp["crossover"]]
    return ["## Crossover", ""] + table(["arm", *rc.ids], rows, rc.stamp)


SECTION = Section(
    key="crossover",
    rank=40,
    compute=compute,
    report_rank=40,
    render=render,
    compare_rank=50,
    compare=compare,
    render_compare=render_compare,
)
