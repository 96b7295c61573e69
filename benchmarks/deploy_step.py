#!/usr/bin/env python3
"""The two reckonings of `gpu_vllm.sh deploy` (issue 42, item 3): the open-loop rates to measure a
decision at, and the table that sets the deployment against each static arm.

  deploy_step.py rates DECISION RUN [--factors 0.5,1,2]
      The request rate at the decision's crossover, read from RUN (the closed-loop run decided
      on): the baseline arm's completed requests per second at each concurrency (median over its
      reps of (requests - failed) / wall_s), interpolated on log2(c) at the crossover's c, as the
      analysis places the crossover itself (results/analysis.py). With no crossover (a static
      decision) the rate at the highest c measured stands in: the most the run saw that arm
      serve. Prints the rates (the factors times that rate, 3 significant digits) as R,R,R on
      stdout and how they were found on stderr.

  deploy_step.py table RUN
      Per offered rate and arm, median over reps of the open-loop cells of RUN: achieved req/s,
      SLO attainment, goodput req/s and tok/s, TTFT p90 from the scheduled send, output tok/s; the
      deployment's goodput against the best static arm at that rate. Void cells are counted, never
      in a median. Markdown on stdout.

Runs with the image's python3 (no tailpod import needed): it reads rows.jsonl and decision.json.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
from pathlib import Path
from typing import Any

DEPLOY_PREFIX = "deploy-"  # tailpod/measure/plan.py: the arm `benchmark --deploy` adds


def cells(run: Path) -> list[dict[str, Any]]:
    rows = []
    with (run / "rows.jsonl").open() as fh:
        for line in fh:
            line = line.strip()
            if line:
                row = json.loads(line)
                if row.get("kind") == "cell":
                    rows.append(row)
    return rows


def crossover_c(decision: dict[str, Any]) -> tuple[float | None, str | None]:
    """(c, baseline arm) of the crossover the deployment rests on, else the decision's first."""
    dep = decision.get("deployment") or {}
    found = [dep.get("crossover")] + list(decision.get("crossover") or [])
    for x in found:
        if isinstance(x, dict) and isinstance(x.get("concurrency"), (int, float)):
            return float(x["concurrency"]), x.get("baseline")
    return None, None


def request_rates_by_c(rows: list[dict[str, Any]], arm: str) -> dict[int, float]:
    per_c: dict[int, list[float]] = {}
    for r in rows:
        c, wall = r.get("concurrency") or 0, r.get("wall_s") or 0
        if r.get("arm") != arm or r.get("void") or c <= 0 or wall <= 0 or r.get("offered_rate_rps"):
            continue
        per_c.setdefault(int(c), []).append((r["requests"] - (r.get("failed") or 0)) / wall)
    return {c: statistics.median(v) for c, v in sorted(per_c.items())}


def rate_at(by_c: dict[int, float], c: float) -> float:
    """Interpolated on log2(c) between the measured levels around c; the end level's rate
    outside them."""
    levels = sorted(by_c)
    if c <= levels[0]:
        return by_c[levels[0]]
    if c >= levels[-1]:
        return by_c[levels[-1]]
    lo = max(x for x in levels if x <= c)
    hi = min(x for x in levels if x >= c)
    if lo == hi:
        return by_c[lo]
    f = (math.log2(c) - math.log2(lo)) / (math.log2(hi) - math.log2(lo))
    return by_c[lo] + f * (by_c[hi] - by_c[lo])


def sig3(x: float) -> float:
    return float(f"{x:.3g}")


def rates(decision_path: Path, run: Path, factors: list[float]) -> int:
    decision = json.loads(decision_path.read_text())
    rows = cells(run)
    c, baseline = crossover_c(decision)
    arm = baseline or "plain"
    by_c = request_rates_by_c(rows, arm)
    if not by_c:
        print(f"no closed-loop cells of arm {arm} in {run}/rows.jsonl: give DEPLOY_RATES",
              file=sys.stderr)
        return 2
    if c is not None:
        base = rate_at(by_c, c)
        how = f"{arm} at the crossover c={c:.1f} (log2-interpolated)"
    else:
        top = max(by_c)
        base = by_c[top]
        how = f"{arm} at its highest measured c={top} (no crossover in the decision)"
    seen = ", ".join(f"c={k}: {v:.2f}" for k, v in by_c.items())
    out = [sig3(f * base) for f in factors]
    print(f"rates: {base:.2f} req/s = {how}; {arm} req/s by c: {seen}; x "
          f"{','.join(f'{f:g}' for f in factors)} -> {','.join(f'{r:g}' for r in out)}",
          file=sys.stderr)
    print(",".join(f"{r:g}" for r in out))
    return 0


def _med(values: list[Any]) -> float | None:
    vals = [float(v) for v in values if isinstance(v, (int, float)) and math.isfinite(v)]
    return statistics.median(vals) if vals else None


def _f(v: float | None, spec: str, scale: float = 1.0) -> str:
    return "-" if v is None else format(v * scale, spec)


def table(run: Path) -> int:
    rows = [r for r in cells(run) if r.get("offered_rate_rps") is not None]
    if not rows:
        print(f"no open-loop cells in {run}/rows.jsonl", file=sys.stderr)
        return 1
    arms = sorted({r["arm"] for r in rows}, key=lambda a: (a.startswith(DEPLOY_PREFIX), a != "plain", a))
    slo = next((r.get("slo") for r in rows if r.get("slo")), None)
    print(f"Open loop, {rows[0].get('arrival', {}).get('process', '?')} arrivals; SLO "
          f"{json.dumps(slo) if slo else 'none'} for {rows[0].get('slo_percentile', '-')}% of "
          "requests; medians over reps; latency from the scheduled send.\n")
    print("| rate req/s | arm | reps (void) | achieved req/s | attainment | goodput req/s | "
          "goodput tok/s | TTFT p90 ms | output tok/s | goodput vs best static |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for rate in sorted({float(r["offered_rate_rps"]) for r in rows}):
        at = [r for r in rows if float(r["offered_rate_rps"]) == rate]
        med: dict[str, dict[str, float | None]] = {}
        for arm in arms:
            ok = [r for r in at if r["arm"] == arm and not r.get("void")]
            med[arm] = {k: _med([r.get(k) for r in ok]) for k in (
                "achieved_rate_rps", "slo_attainment", "goodput_rps", "goodput_tok_s",
                "ttft_sched_p90_s", "output_tok_s")}
        static = [med[a]["goodput_rps"] for a in arms if not a.startswith(DEPLOY_PREFIX)]
        best = max((g for g in static if g is not None), default=None)
        for arm in arms:
            mine = [r for r in at if r["arm"] == arm]
            if not mine:
                continue
            void = sum(1 for r in mine if r.get("void"))
            m = med[arm]
            vs = "-"
            if arm.startswith(DEPLOY_PREFIX) and best and m["goodput_rps"] is not None:
                vs = f"{100 * (m['goodput_rps'] / best - 1):+.1f}%"
            print(f"| {rate:g} | {arm} | {len(mine) - void} ({void}) | "
                  f"{_f(m['achieved_rate_rps'], '.2f')} | {_f(m['slo_attainment'], '.1f', 100)}% | "
                  f"{_f(m['goodput_rps'], '.2f')} | {_f(m['goodput_tok_s'], '.1f')} | "
                  f"{_f(m['ttft_sched_p90_s'], '.0f', 1000)} | {_f(m['output_tok_s'], '.1f')} | "
                  f"{vs} |")
    reasons = sorted({str(r.get("void_reason")) for r in rows if r.get("void")})
    if reasons:
        print("\nvoid cells: " + "; ".join(reasons))
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("rates")
    r.add_argument("decision", type=Path)
    r.add_argument("run", type=Path)
    r.add_argument("--factors", default="0.5,1,2")
    t = sub.add_parser("table")
    t.add_argument("run", type=Path)
    args = ap.parse_args(argv)
    if args.cmd == "rates":
        return rates(args.decision, args.run, [float(x) for x in args.factors.split(",") if x])
    return table(args.run)


if __name__ == "__main__":
    sys.exit(main())
