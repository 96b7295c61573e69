"""The open-loop section (SLO attainment and goodput against request rate): its computation and
markdown live in results/slo.py, which the open-loop benchmark also prints from; this module only
registers them."""

from __future__ import annotations

from tailpod.results import slo
from tailpod.results.section import Context, RenderContext, Section
from tailpod.results.slo import SloSection


def compute(ctx: Context) -> SloSection | None:
    return slo.compute(ctx.run, ctx.void)


def render(section: SloSection | None, rc: RenderContext) -> list[str]:
    return slo.render(section, rc.stamp)


SECTION = Section(key="slo", rank=130, compute=compute, report_rank=80, render=render)
