"""An open-loop or trace run's throughput, speedup, cost and best K per offered load (a request
rate, or the replayed trace), from the open-loop section's points (results/slo.py). Closed-loop
figures are per concurrency and an open-loop run has none, so the Throughput, Speedup, Cost and
Best K sections render this value in their place when the run measured loads (docs/results.md).

Each figure is the median over reps the open-loop section computed; a ratio is one of medians (the
open-loop points keep no rep spread). Under an SLO, goodput (tokens of requests that met it) is the
figure that decides: below saturation every arm delivers the offered load, so throughput ratios
sit near 1 and the difference shows in goodput.
"""

from __future__ import annotations

import math
from typing import Any, TypedDict

from tailpod.results.section import Context, Section
from tailpod.results.sections.best_k import best_k, families
from tailpod.results.sections.unit_cost import cost_per_tokens
from tailpod.results.slo import SloSection
from tailpod.results.stats import usd_per_mtok

TRACE = "trace"


class LoadPoint(TypedDict):
    """One (arm, load): the open-loop section's medians over reps."""

    arm: str
    load: str  # a rate in req/s ("2", "inf") or "trace"
    reps: int
    output_tok_s: float | None
    goodput_tok_s: float | None
    slo_attainment: float | None
    slo_met: bool | None


class LoadSpeedup(TypedDict):
    arm: str
    baseline: str | None
    load: str
    void: bool
    reason: str | None
    throughput: float | None  # median(spec) / median(plain) output tok/s
    goodput: float | None  # the same for goodput tok/s (None without an SLO)


class LoadCost(TypedDict):
    arm: str
    load: str
    status: str  # ok, unknown, void
    usd_per_1m: float | None
    usd_per_good_1m: float | None  # per million tokens of requests that met the SLO
    reason: str | None


class ByLoad(TypedDict):
    loads: list[str]
    metric: str  # what best K compares: goodput_tok_s under an SLO, else output_tok_s
    points: list[LoadPoint]
    speedup: list[LoadSpeedup]
    cost: list[LoadCost]
    best_k: list[dict[str, Any]]  # method, load, best_arm + best_k()'s keys


def load_label(rate: float) -> str:
    return "inf" if math.isinf(rate) else f"{rate:g}"


def _points(slo: SloSection) -> list[LoadPoint]:
    out = [LoadPoint(arm=p["arm"], load=load_label(p["rate"]), reps=p["reps"],
                     output_tok_s=p["output_tok_s"], goodput_tok_s=p["goodput_tok_s"],
                     slo_attainment=p["slo_attainment"], slo_met=p["slo_met"])
           for p in sorted(slo["points"], key=lambda p: p["rate"])]  # fmt: skip
    out += [LoadPoint(arm=t["arm"], load=TRACE, reps=t["reps"], output_tok_s=t["output_tok_s"],
                      goodput_tok_s=t["goodput_tok_s"], slo_attainment=t["slo_attainment"],
                      slo_met=t["slo_met"])
            for t in slo.get("trace") or []]  # fmt: skip
    return out


def _ratio(a: float | None, b: float | None) -> float | None:
    return None if a is None or not b else a / b


def _speedups(ctx: Context, at: dict[tuple[str, str], LoadPoint],
              loads: list[str]) -> list[LoadSpeedup]:
    out: list[LoadSpeedup] = []
    for arm in ctx.arms:
        if arm.k == 0:
            continue
        base = ctx.baseline_for(arm)
        for load in loads:
            spec = at.get((arm.label, load))
            if spec is None:
                continue
            plain = at.get((base.label, load)) if base else None
            entry = LoadSpeedup(arm=arm.label, baseline=base.label if base else None, load=load,
                                void=False, reason=None, throughput=None, goodput=None)
            if arm.label in ctx.void:
                entry["void"], entry["reason"] = True, f"VOID: {ctx.void[arm.label]}"
            elif base is None or base.label in ctx.void:
                entry["reason"] = "no usable plain arm"
            elif plain is None:
                entry["reason"] = f"{base.label} not measured at this load"
            else:
                entry["throughput"] = _ratio(spec["output_tok_s"], plain["output_tok_s"])
                entry["goodput"] = _ratio(spec["goodput_tok_s"], plain["goodput_tok_s"])
            out.append(entry)
    return out


def _costs(ctx: Context, points: list[LoadPoint]) -> list[LoadCost]:
    price = ctx.run.meta.pod.price_per_hr
    out: list[LoadCost] = []
    for p in points:
        if p["arm"] in ctx.void:
            out.append(LoadCost(arm=p["arm"], load=p["load"], status="void", usd_per_1m=None,
                                usd_per_good_1m=None, reason=f"VOID: {ctx.void[p['arm']]}"))
            continue
        cost = cost_per_tokens(price, p["output_tok_s"])
        good = p["goodput_tok_s"]
        out.append(LoadCost(
            arm=p["arm"], load=p["load"], status=cost["status"], usd_per_1m=cost["usd_per_1m"],
            usd_per_good_1m=usd_per_mtok(price, good) if price is not None and good else None,
            reason=cost["reason"],
        ))  # fmt: skip
    return out


def _best_k(ctx: Context, at: dict[tuple[str, str], LoadPoint], loads: list[str],
            metric: str) -> list[dict[str, Any]]:
    out = []
    for method, family in families(ctx.arms, ctx.void):
        for load in loads:
            cands: dict[int, dict[str, Any]] = {}
            for a in family:
                point = at.get((a.label, load))
                v = point["goodput_tok_s" if metric == "goodput_tok_s" else "output_tok_s"] \
                    if point is not None else None
                if isinstance(v, (int, float)):
                    cands[a.k] = {"median": v, "min": v, "max": v}
            if cands:
                res = best_k(cands)
                # a K that won where the others were not measured won unopposed: say so
                if res.get("stops"):  # the points keep medians only, no rep spread to weigh
                    res["evidence"] += " (medians; rep spread not compared)"
                missing = [a.label for a in family if a.k not in cands]
                if missing:
                    res["evidence"] += "; not measured at this load: " + ", ".join(missing)
                label = next((a.label for a in family if a.k == res["best_k"]), None)
                out.append({"method": method, "load": load, "best_arm": label, **res})
    return out


def compute(ctx: Context) -> ByLoad | None:
    slo: SloSection | None = ctx.done.get("slo")
    if not slo:
        return None
    points = _points(slo)
    if not points:
        return None
    loads = list(dict.fromkeys(p["load"] for p in points))
    at = {(p["arm"], p["load"]): p for p in points}
    metric = "goodput_tok_s" if slo.get("slo") else "output_tok_s"
    return ByLoad(loads=loads, metric=metric, points=points, speedup=_speedups(ctx, at, loads),
                  cost=_costs(ctx, points), best_k=_best_k(ctx, at, loads, metric))


# Computed after the open-loop section (rank 130), whose value it reads; rendered by the
# Throughput, Speedup, Cost and Best K sections in their own places.
SECTION = Section(key="by_load", rank=135, compute=compute, omit_none=True)
