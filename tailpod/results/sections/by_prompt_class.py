"""Throughput by prompt class: with several classes in the plan and none chosen, each class's own
throughput grid beside the pooled one (absent from the analysis otherwise)."""

from __future__ import annotations

from tailpod.results.markdown import fmt_spread, grid, table
from tailpod.results.samples import ThroughputCell, build_samples, summarize_throughput
from tailpod.results.section import Context, RenderContext, Section


def compute(ctx: Context) -> dict[str, list[ThroughputCell]] | None:
    classes = ctx.run.meta.plan.prompt_classes
    if not classes or len(classes) < 2 or ctx.settings.prompt_class is not None:
        return None
    return {
        pc: summarize_throughput(build_samples(ctx.run, pc, ctx.settings.cache)) for pc in classes
    }


def render(by_class: dict[str, list[ThroughputCell]] | None, rc: RenderContext) -> list[str]:
    if not by_class:
        return []
    L = ["## Throughput by prompt class", ""]
    for pc, rows in by_class.items():
        L += [f"### {pc}", ""]
        L += table(
            rc.concurrency_head, grid(rc.analysis, rows, lambda e: fmt_spread(e["output_tok_s"])),
            rc.stamp,
        )  # fmt: skip
    return L


SECTION = Section(
    key="by_prompt_class", rank=150, compute=compute, report_rank=140, render=render,
    omit_none=True,
)  # fmt: skip
