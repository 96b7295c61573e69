"""Throughput, p50 end-to-end latency and per-request decode speed per arm and concurrency (the
analysis' `cells`: results/samples.py summarize()), and their side-by-side across runs."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tailpod.results.markdown import (
    fmt_metric,
    fmt_num,
    grid,
    load_grid,
    load_head,
    side_by_side,
    table,
)
from tailpod.results.samples import CellSummary
from tailpod.results.section import (
    CompareContext,
    CompareRenderContext,
    Context,
    RenderContext,
    Section,
)


def compute(ctx: Context) -> list[CellSummary]:
    for c in ctx.cells:
        if c["failed"]:
            ctx.warnings.append(f"{c['arm']} c={c['concurrency']}: {c['failed']} failed requests")
        if (why := c["void_metrics"].get("output_tok_s")) is not None:
            ctx.warnings.append(f"{c['arm']} c={c['concurrency']}: void: {why}")
        if "client_bound" in c["flags"]:
            ctx.warnings.append(
                f"{c['arm']} c={c['concurrency']}: client-bound, throughput is a floor"
            )
    return ctx.cells


def render(cells: list[CellSummary], rc: RenderContext) -> list[str]:
    an, head = rc.analysis, rc.concurrency_head
    by_load = an.get("by_load")
    L = ["## Throughput", ""]
    if by_load:
        L += _render_by_load(by_load, rc)
        if not cells:  # an open-loop or trace run: no concurrency to tabulate
            return L
    L += ["Aggregate output tokens/s, median [min–max] over reps.", ""]
    L += table(head, grid(an, cells, lambda e: fmt_metric(e, "output_tok_s")), rc.stamp)
    L += ["p50 end-to-end latency (s), median [min–max] over reps.", ""]
    L += table(head, grid(an, cells, lambda e: fmt_metric(e, "e2e_p50_s")), rc.stamp)
    L += ["Per-request decode speed p50 (tok/s), median [min–max] over reps.", ""]
    L += table(head, grid(an, cells, lambda e: fmt_metric(e, "decode_tok_s_p50")), rc.stamp)
    return L


def _render_by_load(by_load: Mapping[str, Any], rc: RenderContext) -> list[str]:
    """Per offered load (sections/by_load.py): output and, under an SLO, goodput tokens/s."""
    an, head = rc.analysis, load_head(by_load["loads"])
    L = ["Output tokens/s at each offered load (open loop: the request rate in req/s; trace: the "
         "replayed log at its own times), median over reps.", ""]
    L += table(head, load_grid(an, by_load["points"], lambda p: fmt_num(p["output_tok_s"])),
               rc.stamp)
    if by_load["metric"] == "goodput_tok_s":
        L += ["Goodput tokens/s (tokens of the requests that met the SLO), median over reps.", ""]
        L += table(head, load_grid(an, by_load["points"], lambda p: fmt_num(p["goodput_tok_s"])),
                   rc.stamp)
    return L


def ratios(values: list[float | None]) -> list[float | None]:
    """Each run's value over the first run's (None where either is missing or the first is 0)."""
    base = values[0]
    return [None if (v is None or not base) else v / base for v in values]


def medians(cc: CompareContext, metric: str) -> list[dict[str, Any]]:
    """Per (arm, concurrency) key: every run's median of `metric`, voids, ratios to run 0."""
    index = [{(e["arm"], e["concurrency"]): e for e in a["cells"]} for a in cc.analyses]
    out = []
    for key in cc.keys:
        void_in = [v.get(key[0]) for v in cc.voids]
        vals, void_values = [], []
        for idx in index:
            entry = idx.get(key)
            sp = entry.get(metric) if entry else None
            vals.append(sp["median"] if sp else None)
            void_values.append((entry.get("void_metrics") or {}).get(metric) if entry else None)
        out.append(
            {
                "arm": key[0],
                "concurrency": key[1],
                "values": vals,
                "void": void_in,
                "void_values": void_values,
                "ratios": [None] * len(vals) if any(void_in) else ratios(vals),
            }
        )
    return out


def compare(cc: CompareContext) -> dict[str, Any]:
    return {"throughput": medians(cc, "output_tok_s"), "decode": medians(cc, "decode_tok_s_p50")}


def render_compare(cmp: Mapping[str, Any], rc: CompareRenderContext) -> list[str]:
    head = ["arm", "c", *rc.ids, *rc.ratio_heads]
    L = ["## Throughput (median output tok/s)", ""]
    L += table(head, side_by_side(cmp["throughput"], "values", fmt_num), rc.stamp)
    L += ["## Per-request decode speed (median p50 tok/s)", ""]
    L += table(head, side_by_side(cmp["decode"], "values", fmt_num), rc.stamp)
    return L


SECTION = Section(
    key="cells",
    rank=20,
    compute=compute,
    report_rank=20,
    render=render,
    compare_rank=20,
    compare=compare,
    render_compare=render_compare,
)
