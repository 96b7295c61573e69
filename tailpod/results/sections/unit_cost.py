"""Cost: USD per 1k and per 1M output tokens per arm and concurrency at the pod's price (unknown
price: unknown, never zero), and its side-by-side across runs."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, TypedDict, cast

from tailpod.results.markdown import fmt_usd, grid, load_grid, load_head, side_by_side, table
from tailpod.results.section import (
    CompareContext,
    CompareRenderContext,
    Context,
    RenderContext,
    Section,
)
from tailpod.results.sections.throughput import ratios
from tailpod.results.stats import usd_per_mtok


class CostEntry(TypedDict, total=False):
    """One (arm, concurrency): the price and cost_per_tokens()'s figures (the range only when
    the status is ok)."""

    arm: str
    concurrency: int
    status: str  # ok, unknown, void
    usd_per_1k: float | None
    usd_per_1m: float | None
    price_per_hr: float | None
    reason: str | None
    usd_per_1m_range: list[float | None]


def cost_per_tokens(price_per_hr: float | None, tok_s: float | None) -> dict[str, Any]:
    """USD per 1k and per 1M output tokens at a throughput. Unknown price -> unknown, never 0."""
    if price_per_hr is None:
        return {
            "status": "unknown",
            "usd_per_1k": None,
            "usd_per_1m": None,
            "reason": "pod price unknown",
        }
    if not tok_s or tok_s <= 0:
        return {
            "status": "unknown",
            "usd_per_1k": None,
            "usd_per_1m": None,
            "reason": "no throughput",
        }
    per_mtok = usd_per_mtok(price_per_hr, tok_s)
    return {
        "status": "ok",
        "usd_per_1k": per_mtok / 1e3,
        "usd_per_1m": per_mtok,
        "reason": None,
    }


def compute(ctx: Context) -> list[CostEntry]:
    price = ctx.run.meta.pod.price_per_hr
    costs: list[CostEntry] = []
    for c in ctx.cells:
        if c["arm"] in ctx.void:
            costs.append(
                {
                    "arm": c["arm"],
                    "concurrency": c["concurrency"],
                    "status": "void",
                    "usd_per_1k": None,
                    "usd_per_1m": None,
                    "price_per_hr": price,
                    "reason": f"VOID: {ctx.void[c['arm']]}",
                }
            )
            continue
        tput = c["output_tok_s"]
        cost = cost_per_tokens(price, tput["median"] if tput else None)
        if cost["status"] == "ok" and tput:
            cost["usd_per_1m_range"] = [
                cost_per_tokens(price, tput["max"])["usd_per_1m"],
                cost_per_tokens(price, tput["min"])["usd_per_1m"],
            ]
        entry = {"arm": c["arm"], "concurrency": c["concurrency"], "price_per_hr": price, **cost}
        costs.append(cast(CostEntry, entry))
    if price is None:
        ctx.warnings.append("pod price unknown: cost columns are 'unknown'")
    return costs


def _cell(e: CostEntry) -> str:
    if e["status"] == "void":
        return "VOID"
    if e["status"] != "ok":
        return "unknown"
    return f"{fmt_usd(e['usd_per_1k'])} ({fmt_usd(e['usd_per_1m'])})"


def render(costs: list[CostEntry], rc: RenderContext) -> list[str]:
    price = rc.analysis.get("price_per_hr")
    hardware = rc.analysis.get("hardware") or {}
    by_load = rc.analysis.get("by_load")
    L = ["## Cost", ""]
    if price is None:
        L += ["Pod price unknown: cost is **unknown** (not zero).", ""]
    elif by_load and not costs:
        L += [f"At the pod's ${price:g}/hr.", ""]
    else:
        L += [f"At the pod's ${price:g}/hr: USD per 1k output tokens (per 1M in brackets).", ""]
    if hardware.get("stamp"):
        L += [f"**{hardware['stamp']}**", ""]
    if by_load and not costs:  # an open-loop or trace run: no concurrency to tabulate
        return L + _render_by_load(by_load, rc)
    L += table(rc.concurrency_head, grid(rc.analysis, costs, _cell), rc.stamp)
    return L + (_render_by_load(by_load, rc) if by_load else [])


def _load_cell(key: str) -> Callable[[Mapping[str, Any]], str]:
    def f(e: Mapping[str, Any]) -> str:
        if e["status"] == "void":
            return "VOID"
        return "unknown" if e[key] is None else fmt_usd(e[key])

    return f


def _render_by_load(by_load: Mapping[str, Any], rc: RenderContext) -> list[str]:
    """Per offered load (sections/by_load.py): USD per 1M output tokens and, under an SLO, per 1M
    tokens of the requests that met it."""
    head = load_head(by_load["loads"])
    L = ["USD per 1M output tokens at each offered load (median throughput over reps).", ""]
    L += table(head, load_grid(rc.analysis, by_load["cost"], _load_cell("usd_per_1m")), rc.stamp)
    if by_load["metric"] == "goodput_tok_s":
        L += ["USD per 1M tokens of the requests that met the SLO (goodput).", ""]
        L += table(head, load_grid(rc.analysis, by_load["cost"], _load_cell("usd_per_good_1m")),
                   rc.stamp)
    return L


def compare(cc: CompareContext) -> dict[str, Any]:
    index = [{(e["arm"], e["concurrency"]): e for e in a["cost"]} for a in cc.analyses]
    rows = []
    for key in cc.keys:
        void_in = [v.get(key[0]) for v in cc.voids]
        vals = [(ci.get(key) or {}).get("usd_per_1m") for ci in index]
        rows.append(
            {
                "arm": key[0],
                "concurrency": key[1],
                "usd_per_1m": vals,
                "void": void_in,
                "ratios": [None] * len(vals) if any(void_in) else ratios(vals),
            }
        )
    return {"cost": rows}


def render_compare(cmp: Mapping[str, Any], rc: CompareRenderContext) -> list[str]:
    return ["## Cost (USD per 1M output tokens)", ""] + table(
        ["arm", "c", *rc.ids, *rc.ratio_heads],
        side_by_side(cmp["cost"], "usd_per_1m", fmt_usd),
        rc.stamp,
    )


SECTION = Section(
    key="cost",
    rank=80,
    compute=compute,
    report_rank=120,
    render=render,
    compare_rank=40,
    compare=compare,
    render_compare=render_compare,
)
