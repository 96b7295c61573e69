"""`benchmark --find-max-rate`: per arm, the highest open-loop rate whose median SLO attainment
meets the percentile, found by bisection over resumed sweeps (plan.max_rate_step takes each
step; this module runs the rounds and records the answer in run.json as `max_rate_search`)."""

from __future__ import annotations

import statistics
from collections.abc import Callable
from typing import Any

from tailpod.measure.plan import SweepPlan, max_rate_step
from tailpod.measure.sweep import run_sweep


def passed_by_rate(rows: list[dict[str, Any]], arm: str, percentile: float) -> dict[float, bool]:
    """Per open-loop rate of `arm`: does the median SLO attainment over its reps meet the
    percentile?"""
    by_rate: dict[float, list[float]] = {}
    for row in rows:
        arrival = row.get("arrival")
        if row.get("kind") != "cell" or row.get("arm") != arm or not isinstance(arrival, dict):
            continue
        rate, att = arrival.get("rate"), row.get("slo_attainment")
        if isinstance(rate, (int, float)) and isinstance(att, (int, float)):
            by_rate.setdefault(float(rate), []).append(float(att))
    return {r: statistics.median(v) * 100.0 >= percentile for r, v in by_rate.items()}


def find_max_rates(plan: SweepPlan, run_dir: Any, host: Any, ctx: Any, tol: float,
                   rounds: int, log: Any = print,
                   progress: Callable[[str], None] | None = None) -> dict[str, Any]:
    """`--find-max-rate`: per arm, bisection between min and max of `plan.request_rates` with
    `plan.reps` reps at every probed rate (each round one resumed sweep over the new rates), for
    the highest rate whose median attainment meets the SLO percentile. Recorded in run.json as
    `max_rate_search`."""
    lo, hi = min(plan.request_rates), max(plan.request_rates)
    plan.arm_rates = {a.label: [lo, hi] for a in plan.arms}
    answers: dict[str, Any] = {}
    for round_no in range(rounds + 1):
        run_sweep(plan, run_dir, host, ctx, log=log, progress=progress)
        rows = run_dir.read_rows()
        probes = 0
        for arm in plan.arms:
            mine = plan.arm_rates.setdefault(arm.label, [lo, hi])
            passed = passed_by_rate(rows, arm.label, plan.slo_percentile)
            nxt, answer = max_rate_step(lo, hi, passed, tol)
            if answer is not None or round_no == rounds:
                answers[arm.label] = answer or {
                    "max_rate": max((r for r, ok in passed.items() if ok), default=None),
                    "bracket": None, "status": "rounds_exhausted"}
                answers[arm.label]["probed"] = sorted(passed)
            elif nxt is not None and nxt not in mine:
                mine.append(nxt)
                probes += 1
                log(f"{arm.label}: probing {nxt:g} req/s")
        if probes == 0:
            break
    run = run_dir.load()
    run["max_rate_search"] = {"low": lo, "high": hi, "tol": tol, "reps": plan.reps,
                              "slo": plan.slo, "slo_percentile": plan.slo_percentile,
                              "arms": answers}
    run["plan"] = plan.to_json()
    run_dir.save(run)
    return dict(run["max_rate_search"])
