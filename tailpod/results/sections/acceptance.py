"""Acceptance per spec arm: length, rate and per-position acceptance from the draft counters pooled
over every cell of the arm, closed-loop samples and open-loop cells alike (an open-loop-only run
has no samples: its acceptance was left out until the H200 run of 2026-12-02 showed the gap); a
warning when a drafter accepts about nothing."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TypedDict

from tailpod.results.fingerprint import BROKEN_HEAD_ACCEPT_LEN
from tailpod.results.markdown import arm_label, fmt_num, table
from tailpod.results.section import Context, RenderContext, Section


class AcceptanceRow(TypedDict, total=False):
    """One spec arm; the counters (drafts, draft_tokens, accepted) only when it drafted."""

    arm: str
    k: int
    method: str | None
    void: bool
    drafts: int
    draft_tokens: int
    accepted: int
    acceptance_length: float | None
    acceptance_rate: float | None
    per_position: list[float]


@dataclass
class _Counts:
    """One pooled unit's draft counters; per position weighted by its drafts."""

    drafts: int
    draft_tokens: int
    accepted: int
    per_position_weighted: list[float]


def _open_loop_counts(ctx: Context, arm: str) -> list[_Counts]:
    out = []
    for cell in ctx.run.cells:
        acc = cell.acceptance
        if (cell.arm != arm or cell.arrival is None or acc is None
                or acc.drafts <= 0):
            continue
        out.append(_Counts(acc.drafts, acc.draft_tokens or 0, acc.accepted,
                           [p * acc.drafts for p in acc.per_position]))
    return out


def compute(ctx: Context) -> list[AcceptanceRow]:
    acceptance: list[AcceptanceRow] = []
    for a in ctx.arms:
        if not a.k:
            continue
        own = [_Counts(s.drafts, s.draft_tokens, s.accepted, list(s.per_position_weighted))
               for s in ctx.samples if s.arm == a.label]
        own += _open_loop_counts(ctx, a.label)
        drafts = sum(s.drafts for s in own)
        row: AcceptanceRow = {"arm": a.label, "k": a.k, "method": a.method,
                              "void": a.label in ctx.void}  # fmt: skip
        if not drafts:
            acceptance.append(row | {"acceptance_length": None, "acceptance_rate": None,
                                     "per_position": []})  # fmt: skip
            continue
        dtoks = sum(s.draft_tokens for s in own)
        acc = sum(s.accepted for s in own)
        width = max(len(s.per_position_weighted) for s in own)
        per_pos = [
            sum(s.per_position_weighted[i] for s in own if i < len(s.per_position_weighted))
            / drafts
            for i in range(width)
        ]
        length = max(1.0, 1 + acc / drafts)
        acceptance.append(
            row
            | {
                "drafts": drafts,
                "draft_tokens": dtoks,
                "accepted": acc,
                "acceptance_length": length,
                "acceptance_rate": max(0.0, acc / dtoks) if dtoks else None,
                "per_position": per_pos,
            }
        )
        if length < BROKEN_HEAD_ACCEPT_LEN:
            ctx.warnings.append(
                f"{a.label}: acceptance length {length:.2f} ≈ 1 — draft head not "
                "accepting (broken MTP head or quantized-away layers?)"
            )
    return acceptance


def render(rows: list[AcceptanceRow], rc: RenderContext) -> list[str]:
    return ["## Acceptance", ""] + table(
        ["arm", "K", "acceptance length", "acceptance rate", "per position", "drafts"],
        [
            [
                arm_label(a["arm"], rc.void),
                str(a["k"]),
                fmt_num(a["acceptance_length"]),
                fmt_num(a["acceptance_rate"]),
                ", ".join(f"{p:.2f}" for p in a["per_position"]) or "—",
                str(a.get("drafts", "—")),
            ]
            for a in rows
        ],
        rc.stamp,
    )


SECTION = Section(key="acceptance", rank=100, compute=compute, report_rank=90, render=render)
