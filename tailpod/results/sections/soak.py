"""Acceptance over time in a soak cell (`benchmark --soak MINUTES`, issue 39 item 4): each arm's
one long closed-loop cell, its requests' own acceptance bucketed per minute of the soak, and the
collapse rule that flags the minute and the context position where acceptance fell; any other
cell of LONG_CELL_S or more with the requests' own acceptance is read the same way.
docs/results.md, "Soak: acceptance over time"; absent from the analysis without such cells.

Why a rule of its own: the /metrics delta of a cell (and `compare` between runs) averages a
collapse away, and engines have shipped one that holds until restart (vllm-project/vllm#52873:
acceptance fell to zero engine-wide after a request crossed position 32,768).
"""

from __future__ import annotations

import statistics
from typing import Any, TypedDict

from tailpod.results.markdown import arm_label, fmt_num, table
from tailpod.results.schema import CellRow, RequestRow
from tailpod.results.section import Context, RenderContext, Section
from tailpod.results.sections.per_request import COLLAPSE_SHARE, _bands

SOAK_PLOT_FILE = "soak.png"
WINDOW_S = 60.0  # the bucket: one minute of the soak, from its first request sent
# A minute is judged only with this many verify steps: a few requests' acceptance is noise (a
# short or repetitive answer accepts far more or less than the arm does).
MIN_STEPS = 32
# The reference: the median accepted drafts per step of the first judged minutes (up to this many;
# one fewer than the judged minutes when there are few, so at least one minute is left to judge).
REFERENCE_MINUTES = 3
# A collapse that a minute would dilute: this many requests in a row, in the order they were sent,
# each with a verify step and no draft accepted (acceptance length at its floor of 1.0), after a
# request that accepted one. Eight in a row at the floor is not chance for an arm that accepts at
# all: at a per-request floor probability p it happens with p**8 (p = 0.5 gives 0.4 %).
FLOOR_RUN = 8
# An ordinary cell this long is read minute by minute too (two minutes: a reference and one to
# judge against it).
LONG_CELL_S = 2 * WINDOW_S


class SoakMinute(TypedDict):
    minute: int  # 1 = the soak's first WINDOW_S
    requests: int
    steps: int
    accepted: int
    accepted_per_step: float | None
    acceptance_length: float | None
    position_max: int | None  # the furthest context position (prompt + output tokens) reached
    judged: bool


class SoakCollapse(TypedDict):
    rule: str  # "minute" | "floor_run"
    minute: int
    at_s: float  # seconds from the soak's first request sent
    position: int | None
    detail: str


class SoakRow(TypedDict):
    arm: str
    prompt_class: str
    concurrency: int
    soak_s: float | None  # None: an ordinary cell of LONG_CELL_S or more
    wall_s: float
    requests: int
    failed: int
    reference: float | None  # accepted drafts per step of the reference minutes
    minutes: list[SoakMinute]
    collapse: SoakCollapse | None
    # the same requests by prompt length band, with that section's collapse rule
    # (sections/per_request.py _bands): the soak's requests are in no other section
    bands: list[dict[str, Any]] | None


def _position(r: RequestRow) -> int | None:
    if r.prompt_tokens is None:
        return None
    return r.prompt_tokens + (r.completion_tokens or 0)


def _reached(rows: list[RequestRow], t: float) -> int | None:
    """The furthest context position of the requests sent up to time `t` (epoch seconds)."""
    got = [p for r in rows if r.t_start <= t and (p := _position(r)) is not None]
    return max(got) if got else None


def _spec(r: RequestRow) -> tuple[int, int] | None:
    """(verify steps, accepted drafts) of one request's own figures."""
    s = r.spec_acceptance
    if not r.ok or not isinstance(s, dict) or s.get("steps") is None:
        return None
    return int(s["steps"]), int(s.get("accepted") or 0)


def _minutes(rows: list[RequestRow], t0: float) -> list[SoakMinute]:
    buckets: dict[int, list[RequestRow]] = {}
    for r in rows:
        buckets.setdefault(int((r.t_start - t0) // WINDOW_S), []).append(r)
    out: list[SoakMinute] = []
    for m in range(max(buckets) + 1 if buckets else 0):
        mine = buckets.get(m, [])
        figs = [f for r in mine if (f := _spec(r)) is not None]
        steps, accepted = sum(s for s, _ in figs), sum(a for _, a in figs)
        per = accepted / steps if steps else None
        pos = [p for r in mine if (p := _position(r)) is not None]
        out.append({"minute": m + 1, "requests": len(mine), "steps": steps, "accepted": accepted,
                    "accepted_per_step": per,
                    "acceptance_length": None if per is None else 1.0 + per,
                    "position_max": max(pos) if pos else None, "judged": steps >= MIN_STEPS})
    return out


def _minute_rule(minutes: list[SoakMinute], rows: list[RequestRow], t0: float
                 ) -> tuple[float | None, SoakCollapse | None]:
    """The reference, and the first judged minute after it whose accepted drafts per step fall
    below COLLAPSE_SHARE of it (per step, not length: length's floor of 1 hides a fall to zero)."""
    judged = [m for m in minutes if m["judged"]]
    if len(judged) < 2:
        return None, None
    ref_minutes = judged[:min(REFERENCE_MINUTES, len(judged) - 1)]
    ref = statistics.median(m["accepted_per_step"] or 0.0 for m in ref_minutes)
    if ref <= 0:
        return ref, None
    for m in judged[len(ref_minutes):]:
        per = m["accepted_per_step"] or 0.0
        if per < COLLAPSE_SHARE * ref:
            start = t0 + (m["minute"] - 1) * WINDOW_S
            first = min((r.t_start for r in rows if r.t_start >= start), default=start)
            return ref, {"rule": "minute", "minute": m["minute"], "at_s": first - t0,
                         "position": _reached(rows, first),
                         "detail": f"minute {m['minute']}: {per:.2f} accepted drafts per step, "
                                   f"below {COLLAPSE_SHARE:.0%} of the first minutes' {ref:.2f}"}
    return ref, None


def _floor_rule(rows: list[RequestRow], t0: float) -> SoakCollapse | None:
    """The first FLOOR_RUN requests in a row (send order) at the floor after one that accepted."""
    accepted_before, run_start, run = False, None, 0
    for r in sorted(rows, key=lambda r: r.t_start):
        fig = _spec(r)
        if fig is None or fig[0] == 0:
            continue
        if fig[1] > 0:
            accepted_before, run_start, run = True, None, 0
            continue
        if not accepted_before:
            continue
        run_start = run_start or r
        run += 1
        if run >= FLOOR_RUN:
            at = run_start.t_start
            return {"rule": "floor_run", "minute": int((at - t0) // WINDOW_S) + 1,
                    "at_s": at - t0, "position": _reached(rows, at),
                    "detail": f"{FLOOR_RUN} requests in a row accepted no draft (length 1.0) "
                              "after requests that did"}
    return None


def soak_row(cell: CellRow, rows: list[RequestRow]) -> SoakRow:
    """One soak cell: its minutes and the earlier of the two collapse rules' flags."""
    t0 = min((r.t_start for r in rows), default=0.0)
    minutes = _minutes(rows, t0)
    ref, by_minute = _minute_rule(minutes, rows, t0)
    by_floor = _floor_rule(rows, t0)
    found = [c for c in (by_minute, by_floor) if c is not None]
    return {"arm": cell.arm, "prompt_class": cell.prompt_class, "concurrency": cell.concurrency,
            "soak_s": cell.soak_s, "wall_s": cell.wall_s, "requests": cell.requests,
            "failed": cell.failed, "reference": ref, "minutes": minutes,
            "collapse": min(found, key=lambda c: c["at_s"]) if found else None,
            "bands": _bands([r for r in rows if r.ok])}


def compute(ctx: Context) -> list[SoakRow] | None:
    out: list[SoakRow] = []
    long = [c for c in ctx.run.cells if c.wall_s >= LONG_CELL_S and c.acceptance_per_request]
    for cell, requests in [*((c, ctx.run.soak_requests) for c in ctx.run.soak_cells),
                           *((c, ctx.run.requests) for c in long)]:
        row = soak_row(cell, [r for r in requests if r.cell == cell.cell])
        c = row["collapse"]
        if c is not None:
            pos = "" if c["position"] is None else f", context position {c['position']}"
            what = "soak" if cell.soak_s is not None else f"cell {cell.cell}"
            ctx.warnings.append(f"{what}: {cell.arm} acceptance collapsed at minute "
                                f"{c['minute']} ({c['at_s']:.0f} s in{pos}): {c['detail']}")
        out.append(row)
    return out or None


def render(rows: list[SoakRow] | None, rc: RenderContext) -> list[str]:
    if not rows:
        return []
    L = ["## Soak: acceptance over time", "",
         "Each arm's soak cell (one closed loop of the given concurrency for the given time over "
         "its prompt class, prompts cycled, cold cache), and any other cell of "
         f"{LONG_CELL_S / 60:g} minutes or more: the requests' own acceptance per minute "
         f"(token-weighted). **COLLAPSE**: a minute with at least {MIN_STEPS} verify steps whose "
         f"accepted drafts per step fall below {COLLAPSE_SHARE:.0%} of the first minutes' median, "
         f"or {FLOOR_RUN} requests in a row that accepted no draft after requests that did; the "
         "flag names the minute and the furthest context position reached by then.", ""]
    for r in rows:
        c = r["collapse"]
        flag = ("no collapse" if c is None else
                f"**COLLAPSE** at minute {c['minute']} ({c['at_s']:.0f} s in, context position "
                f"{'unknown' if c['position'] is None else c['position']}): {c['detail']}")
        what = (f"soak of {r['soak_s'] / 60:g} min" if r["soak_s"] is not None
                else f"a cell of {r['wall_s'] / 60:.1f} min")
        L += [f"**{arm_label(r['arm'], rc.void)}**, {r['prompt_class']}, c={r['concurrency']}, "
              f"{what}, {r['requests']} requests ({r['failed']} failed): {flag}.", ""]
        L += table(["minute", "requests", "verify steps", "accepted/step", "length",
                    "max position", "judged"],
                   [[str(m["minute"]), str(m["requests"]), str(m["steps"]),
                     fmt_num(m["accepted_per_step"]), fmt_num(m["acceptance_length"]),
                     "-" if m["position_max"] is None else str(m["position_max"]),
                     "yes" if m["judged"] else f"no (< {MIN_STEPS} steps)"]
                    for m in r["minutes"]], rc.stamp)
        if r["bands"] and len(r["bands"]) > 1:
            L += table(["prompt tokens", "n", "accepted/step", "length", "flag"],
                       [[b["band"], str(b["requests"]), fmt_num(b["accepted_per_step"]),
                         fmt_num(b["acceptance_length"]), "**COLLAPSE**" if b["collapse"] else ""]
                        for b in r["bands"]], rc.stamp)
    L += [f"![Acceptance per minute of the soak]({SOAK_PLOT_FILE})", ""]
    return L


SECTION = Section(key="soak", rank=107, compute=compute, report_rank=97, render=render,
                  omit_none=True)
