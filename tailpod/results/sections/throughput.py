"""Throughput, p50 end-to-end latency and per-request decode speed per arm and concurrency (the
analysis' `cells`: results/samples.py summarize())."""

from __future__ import annotations

from tailpod.results.markdown import fmt_spread, grid, table
from tailpod.results.samples import CellSummary
from tailpod.results.section import (
    Context,
    RenderContext,
    Section,
)


def compute(ctx: Context) -> list[CellSummary]:
    for c in ctx.cells:
        if c["failed"]:
            ctx.warnings.append(f"{c['arm']} c={c['concurrency']}: {c['failed']} failed requests")
        if "client_bound" in c["flags"]:
            ctx.warnings.append(
                f"{c['arm']} c={c['concurrency']}: client-bound, throughput is a floor"
            )
    return ctx.cells


def render(cells: list[CellSummary], rc: RenderContext) -> list[str]:
    an, head = rc.analysis, rc.concurrency_head
    L = ["## Throughput", "", "Aggregate output tokens/s, median [min–max] over reps.", ""]
    L += table(head, grid(an, cells, lambda e: fmt_spread(e["output_tok_s"])), rc.stamp)
    L += ["p50 end-to-end latency (s), median [min–max] over reps.", ""]
    L += table(head, grid(an, cells, lambda e: fmt_spread(e["e2e_p50_s"])), rc.stamp)
    L += ["Per-request decode speed p50 (tok/s), median [min–max] over reps.", ""]
    L += table(head, grid(an, cells, lambda e: fmt_spread(e["decode_tok_s_p50"])), rc.stamp)
    return L


SECTION = Section(
    key="cells",
    rank=20,
    compute=compute,
    report_rank=20,
    render=render,
)
