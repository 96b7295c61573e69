"""Speedup over plain: each spec arm's throughput and per-request decode speed over its baseline's,
per concurrency (speedup = median(spec) / median(plain); range min(spec)/max(plain) ..
max(spec)/min(plain), results/stats.py ratio_spread)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, TypedDict

from tailpod.results.markdown import fmt_ratio, grid, load_grid, load_head, side_by_side, table
from tailpod.results.section import (
    CompareContext,
    CompareRenderContext,
    Context,
    RenderContext,
    Section,
)
from tailpod.results.stats import ratio_spread

Ratio = dict[str, Any]  # stats.ratio_spread(): speedup, lo, hi, overlap, n


class SpeedupEntry(TypedDict):
    arm: str
    baseline: str | None
    concurrency: int
    unverified: str | None
    void: bool
    reason: str | None
    throughput: Ratio | None
    decode: Ratio | None
    decode_void: str | None  # why no decode ratio: a side's decode p50 is void (evidence.py)


def compute(ctx: Context) -> list[SpeedupEntry]:
    out: list[SpeedupEntry] = []
    for a in ctx.arms:
        if a.k == 0:
            continue
        base = ctx.baseline_for(a)
        for conc in ctx.concurrencies:
            spec_cell = ctx.cell_at.get((a.label, conc))
            base_cell = ctx.cell_at.get((base.label, conc)) if base else None
            if spec_cell is None:
                continue
            entry: SpeedupEntry = {
                "arm": a.label,
                "baseline": base.label if base else None,
                "concurrency": conc,
                "unverified": a.unverified_text,
                "void": False,
                "reason": None,
                "throughput": None,
                "decode": None,
                "decode_void": None,
            }
            if a.label in ctx.void:
                entry["void"], entry["reason"] = True, f"VOID: {ctx.void[a.label]}"
            elif base is None or base_cell is None or base.label in ctx.void:
                entry["reason"] = "no plain measurement at this concurrency"
            else:
                entry["throughput"] = ratio_spread(
                    spec_cell["output_tok_s"], base_cell["output_tok_s"]
                )
                entry["decode"] = ratio_spread(
                    spec_cell["decode_tok_s_p50"], base_cell["decode_tok_s_p50"]
                )
                entry["decode_void"] = next(
                    (f"{side['arm']} {why}" for side in (spec_cell, base_cell)
                     if (why := side["void_metrics"].get("decode_tok_s_p50"))), None)
            out.append(entry)
    return out


def _cell(key: str) -> Callable[[SpeedupEntry], str]:
    def f(e: SpeedupEntry) -> str:
        if e.get("void"):
            return "VOID"
        ratio = e[key]  # type: ignore[literal-required]
        if not ratio and key == "decode" and e.get("decode_void"):
            return f"void: {e['decode_void']}"
        if not ratio:
            return str(e.get("reason") or "—")
        # A speedup whose output nobody verified is never printed as a plain figure.
        return fmt_ratio(ratio) + (" UNVERIFIED" if e.get("unverified") else "")

    return f


def _load_cell(key: str) -> Callable[[Mapping[str, Any]], str]:
    def f(e: Mapping[str, Any]) -> str:
        if e["void"]:
            return "VOID"
        ratio = e[key]
        if ratio is None:
            return str(e["reason"] or "—")
        return f"{ratio:.2f}×"

    return f


def _render_by_load(by_load: Mapping[str, Any], rc: RenderContext) -> list[str]:
    """Per offered load (sections/by_load.py): spec / plain, as a ratio of medians over reps."""
    an, head = rc.analysis, load_head(by_load["loads"])
    L = ["At each offered load, spec / plain output tokens/s (a ratio of medians over reps). "
         "Below saturation every arm delivers the offered load, so this sits near 1; the "
         "difference shows in goodput and latency.", ""]
    L += table(head, load_grid(an, by_load["speedup"], _load_cell("throughput")), rc.stamp)
    if by_load["metric"] == "goodput_tok_s":
        L += ["Goodput tokens/s (requests that met the SLO), spec / plain.", ""]
        L += table(head, load_grid(an, by_load["speedup"], _load_cell("goodput")), rc.stamp)
    return L


def render(entries: list[SpeedupEntry], rc: RenderContext) -> list[str]:
    an, head = rc.analysis, rc.concurrency_head
    by_load = an.get("by_load")
    if by_load and not an["cells"]:  # an open-loop or trace run: no concurrency to tabulate
        return ["## Speedup over plain", ""] + _render_by_load(by_load, rc)
    L = [
        "## Speedup over plain",
        "",
        "Aggregate throughput, spec / plain: median ratio "
        "[min(spec)/max(plain)–max(spec)/min(plain)]. "
        "Void arms never get a speedup; an arm whose output the gate did not verify (gate "
        "skipped, or text compared instead of token ids) is marked UNVERIFIED.",
        "",
    ]
    L += table(head, grid(an, entries, _cell("throughput")), rc.stamp)
    L += ["Per-request decode speed (p50), spec / plain.", ""]
    L += table(head, grid(an, entries, _cell("decode")), rc.stamp)
    return L + (_render_by_load(by_load, rc) if by_load else [])


def compare(cc: CompareContext) -> dict[str, Any]:
    speed = [{(s["arm"], s["concurrency"]): s for s in a["speedup"]} for a in cc.analyses]
    rows = []
    for key in cc.keys:
        void_in = [v.get(key[0]) for v in cc.voids]
        spd = []
        for si in speed:
            s = si.get(key)
            spd.append(s["throughput"]["speedup"] if s and s.get("throughput") else None)
        if any(v is not None for v in spd) or any(void_in):
            rows.append({"arm": key[0], "concurrency": key[1], "values": spd, "void": void_in})
    return {"speedup": rows}


def render_compare(cmp: Mapping[str, Any], rc: CompareRenderContext) -> list[str]:
    if not cmp["speedup"]:
        return []
    return ["## Spec speedup over plain, per run", ""] + table(
        ["arm", "c", *rc.ids],
        side_by_side(cmp["speedup"], "values", lambda v: "—" if v is None else f"{v:.2f}×"),
        rc.stamp,
    )


SECTION = Section(
    key="speedup",
    rank=30,
    compute=compute,
    report_rank=30,
    render=render,
    compare_rank=30,
    compare=compare,
    render_compare=render_compare,
)
