"""The Decision section of report.md: the run's decision.json when `tailpod decide` wrote one, else
the throughput decision computed here over this analysis's crossover and knee (results/decide.py,
docs/decide.md). Report-only: the decision is not part of the analysis, and `tailpod decide` is
where it is chosen with other objectives or across runs."""

from __future__ import annotations

import json
from typing import Any

from tailpod.results import decide
from tailpod.results.markdown import STAMP_LINE
from tailpod.results.section import AFTER_PLOTS, Context, RenderContext, Section


def compute(ctx: Context) -> Any:
    """decision.json as `tailpod decide` wrote it (any JSON value but null), else the computed
    decision; the analysis sections before this one are `ctx.done`."""
    saved = ctx.run.path / decide.DECISION_FILE if ctx.run.path else None
    dec = None
    if saved is not None and saved.is_file():
        try:
            dec = json.loads(saved.read_text())
        except json.JSONDecodeError:
            dec = None
    if dec is None:
        dec = decide.compute([ctx.run], analyses=[ctx.done])
    return dec


def render(dec: Any, rc: RenderContext) -> list[str]:
    # decide.render writes the off-pod stamp line above its tables when the decision says so
    return decide.render(dec, STAMP_LINE)


SECTION = Section(key="decision", rank=1010, compute=compute, report_rank=AFTER_PLOTS + 10,
                  render=render, in_analysis=False)  # fmt: skip
