"""Best K per method (plain is K=0 of every method on the same checkpoint): per concurrency, and
overall as the geometric mean of median throughput over the concurrencies every candidate
measured; with whether the next larger K shows that going further stops helping."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any, TypedDict

from tailpod.results.markdown import fmt_num, table
from tailpod.results.schema import ArmRecord
from tailpod.results.section import Context, RenderContext, Section


class BestK(TypedDict):
    metric: str
    per_concurrency: list[dict[str, Any]]  # method, concurrency, best_arm + best_k()'s keys
    overall: list[dict[str, Any]]  # method, over_concurrency, basis, best_arm, wins + best_k()'s
    excluded_void: list[str]


def best_k(candidates: dict[int, dict[str, Any]]) -> dict[str, Any]:
    """Best K from {k: spread} (higher median is better; ties go to the smaller K), and whether
    the next larger K measured shows that going further stops helping."""
    if not candidates:
        return {"best_k": None, "stops": False, "evidence": "no candidates"}
    ks = sorted(candidates)
    best = max(ks, key=lambda k: (candidates[k]["median"], -k))
    b = candidates[best]
    larger = [k for k in ks if k > best]
    if not larger:
        return {
            "best_k": best,
            "value": b["median"],
            "stops": False,
            "next_k": None,
            "evidence": f"not shown to stop: K={best} is the largest K measured",
        }
    nxt = larger[0]
    n = candidates[nxt]
    if n["median"] < b["median"]:
        noise = n["max"] >= b["min"]
        return {
            "best_k": best,
            "value": b["median"],
            "stops": True,
            "next_k": nxt,
            "within_noise": noise,
            "evidence": f"K={nxt} {n['median']:.1f} < K={best} {b['median']:.1f}"
            + (" (rep spreads overlap)" if noise else ""),
        }
    return {
        "best_k": best,
        "value": b["median"],
        "stops": False,
        "next_k": nxt,
        "evidence": f"not shown to stop: K={nxt} ties K={best} at {b['median']:.1f}",
    }


def families(arms: Sequence[ArmRecord], void: Mapping[str, str]) -> list[tuple[str, list[ArmRecord]]]:
    """Per speculative method: its non-void arms and the plain arms on the same checkpoints (K=0
    of every method)."""
    out = []
    for method in sorted({a.method for a in arms if a.k and a.method and a.label not in void}):
        family = [a for a in arms if a.label not in void and (a.method == method or a.k == 0)]
        spec_ckpts = {a.checkpoint for a in family if a.k}
        out.append((method, [a for a in family if a.k or a.checkpoint in spec_ckpts]))
    return out


def compute(ctx: Context) -> BestK:
    arms, void, cell_at, concurrencies = ctx.arms, ctx.void, ctx.cell_at, ctx.concurrencies
    best: BestK = {
        "metric": "output_tok_s",
        "per_concurrency": [],
        "overall": [],
        "excluded_void": sorted(a.label for a in arms if a.k and a.label in void),
    }
    for method, family in families(arms, void):
        for conc in concurrencies:
            cands = {
                a.k: cell_at[(a.label, conc)]["output_tok_s"]
                for a in family
                if (a.label, conc) in cell_at and cell_at[(a.label, conc)]["output_tok_s"]
            }
            if cands:
                res = best_k(cands)  # type: ignore[arg-type]  # the filter above drops None
                label = next((a.label for a in family if a.k == res["best_k"]), None)
                best["per_concurrency"].append(
                    {"method": method, "concurrency": conc, "best_arm": label, **res}
                )
        # Overall: geometric mean across the concurrencies every candidate measured.
        common = [
            c
            for c in concurrencies
            if all(
                (a.label, c) in cell_at and cell_at[(a.label, c)]["output_tok_s"] for a in family
            )
        ]
        if common:
            geo = {}
            for a in family:
                vals = [cell_at[(a.label, c)]["output_tok_s"]["median"] for c in common]  # type: ignore[index]
                # an arm that delivered nothing at one of them (every request failed) has a
                # geometric mean of 0, and log(0) would be a math domain error
                g = (0.0 if min(vals) <= 0
                     else math.exp(sum(math.log(v) for v in vals) / len(vals)))
                geo[a.k] = {"median": g, "min": g, "max": g}
            res = best_k(geo)
            wins = [p["best_k"] for p in best["per_concurrency"] if p["method"] == method]
            best["overall"].append(
                {
                    "method": method,
                    "over_concurrency": common,
                    "basis": "geometric mean of median throughput",
                    "best_arm": next((a.label for a in family if a.k == res["best_k"]), None),
                    "wins": {str(k): wins.count(k) for k in sorted(set(wins))},
                    **res,
                }
            )
    return best


def render(bk: BestK, rc: RenderContext) -> list[str]:
    L = ["## Best K", ""]
    if bk["per_concurrency"]:
        L += table(
            ["method", "c", "best K", "arm", "tok/s", "stops?", "evidence"],
            [
                [
                    p["method"],
                    str(p["concurrency"]),
                    str(p["best_k"]),
                    p.get("best_arm") or "—",
                    fmt_num(p.get("value")),
                    "yes" if p["stops"] else "no",
                    p["evidence"],
                ]
                for p in bk["per_concurrency"]
            ],
            rc.stamp,
        )
        L += table(
            ["method", "overall best K", "arm", "basis", "wins per K", "evidence"],
            [
                [
                    o["method"],
                    str(o["best_k"]),
                    o.get("best_arm") or "—",
                    f"{o['basis']} over c={o['over_concurrency']}",
                    ", ".join(f"K={k}: {n}" for k, n in o["wins"].items()),
                    o["evidence"],
                ]
                for o in bk["overall"]
            ],
            rc.stamp,
        )
    by_load = rc.analysis.get("by_load")
    if by_load and by_load["best_k"]:
        L += _render_by_load(by_load, rc)
    elif not bk["per_concurrency"]:
        L += ["No spec arm to choose K from.", ""]
    if bk.get("excluded_void"):
        L += ["Excluded (void): " + ", ".join(f"~~{v}~~" for v in bk["excluded_void"]), ""]
    return L


def _render_by_load(by_load: dict[str, Any], rc: RenderContext) -> list[str]:
    """Per offered load (sections/by_load.py): the best K by goodput under an SLO, else by output
    tokens/s, from medians over reps."""
    what = "goodput tok/s" if by_load["metric"] == "goodput_tok_s" else "output tok/s"
    L = [f"At each offered load, by {what} (medians over reps).", ""]
    return L + table(
        ["method", "load", "best K", "arm", what, "stops?", "evidence"],
        [
            [
                p["method"],
                p["load"] if p["load"] == "trace" else f"rate={p['load']}",
                str(p["best_k"]),
                p.get("best_arm") or "—",
                fmt_num(p.get("value")),
                "yes" if p["stops"] else "no",
                p["evidence"],
            ]
            for p in by_load["best_k"]
        ],
        rc.stamp,
    )


SECTION = Section(key="best_k", rank=60, compute=compute, report_rank=60, render=render)
