"""The open-loop section (SLO attainment and goodput against request rate): its computation and
markdown live in results/slo.py, which the open-loop benchmark also prints from; this module only
registers them."""

from __future__ import annotations

from typing import Any

from tailpod.results import slo
from tailpod.results.section import Context, RenderContext, Section


def compute(ctx: Context) -> dict[str, Any] | None:
    return slo.compute(ctx.run, ctx.void)


def render(section: dict[str, Any] | None, rc: RenderContext) -> list[str]:
    return slo.render(section, rc.stamp)


SECTION = Section(key="slo", rank=130, compute=compute, report_rank=80, render=render)
