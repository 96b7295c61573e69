"""TTFT with a cold and a warm prefix cache, per arm and concurrency, from the closed-loop request
rows (an open-loop request has no concurrency; its TTFT from the schedule is in the SLO section)."""

from __future__ import annotations

from collections import defaultdict
from typing import TypedDict

from tailpod.results.markdown import arm_label, fmt_num, table
from tailpod.results.samples import Spread
from tailpod.results.section import Context, RenderContext, Section
from tailpod.results.stats import spread


class TtftRow(TypedDict):
    arm: str
    concurrency: int
    void: bool
    cold: Spread | None
    warm: Spread | None


def compute(ctx: Context) -> list[TtftRow]:
    pc = ctx.settings.prompt_class
    ttft: dict[tuple[str, int], dict[str, list[float]]] = defaultdict(
        lambda: {"cold": [], "warm": []}
    )
    for r in ctx.run.requests:
        if r.scheduled_at is not None:
            continue  # an open-loop request: its TTFT from the schedule is the SLO section's
        if r.ok and r.ttft_s is not None and (pc is None or r.prompt_class == pc):
            ttft[(r.arm, r.concurrency)][r.cache].append(r.ttft_s)
    order = {a.label: i for i, a in enumerate(ctx.arms)}
    return [
        {
            "arm": arm,
            "concurrency": conc,
            "void": arm in ctx.void,
            "cold": spread(v["cold"]),
            "warm": spread(v["warm"]),
        }
        for (arm, conc), v in sorted(
            ttft.items(), key=lambda kv: (order.get(kv[0][0], 99), kv[0][1])
        )
    ]


def render(rows: list[TtftRow], rc: RenderContext) -> list[str]:
    L = ["## TTFT, cold vs warm prefix cache", "", "Median TTFT (s) over successful requests.", ""]
    if not rows:
        return L + ["No closed-loop request rows with TTFT (an open-loop run's TTFT, from the scheduled "
                    "send, is in the open-loop section).", ""]
    return L + table(
        ["arm", "c", "cold", "warm", "n cold / warm"],
        [
            [
                arm_label(t["arm"], rc.void),
                str(t["concurrency"]),
                fmt_num(t["cold"]["median"] if t["cold"] else None),
                fmt_num(t["warm"]["median"] if t["warm"] else None),
                f"{t['cold']['n'] if t['cold'] else 0} / {t['warm']['n'] if t['warm'] else 0}",
            ]
            for t in rows
        ],
        rc.stamp,
    )


SECTION = Section(key="ttft_cache", rank=90, compute=compute, report_rank=100, render=render)
