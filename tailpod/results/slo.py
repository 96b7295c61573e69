"""The open-loop section: SLO attainment and goodput against request rate, per arm, and the highest
rate at which the SLO holds (with its $/Mtok when the run knows the pod's price).

Reads the cell rows of open-loop cells (those with `arrival`, docs/agent.md "Open loop"): per
(arm, rate), the median over reps of each figure. The max rate under SLO of an arm is the highest
measured rate at which it, and every lower measured rate, meets the target (median attainment >=
the SLO percentile): a rate that passes only above a failing one is not counted as safe.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable, Mapping
from typing import Any, TypedDict

from tailpod.agent.probes.arrival import SESSION_FORMATS
from tailpod.results.io import Run
from tailpod.results.stats import spread, usd_per_mtok

# The rate figure (results/plots.py plot_rate), drawn beside report.md when a run has a point
# at a finite rate; named here so the section that links it and the plotter agree.
RATE_PLOT_FILE = "rate.png"

FIGURES = ("slo_attainment", "goodput_rps", "goodput_tok_s", "achieved_rate_rps",
           "output_tok_s", "ttft_sched_p90_s", "schedule_lag_max_s")  # fmt: skip


def _rate(arrival: Any) -> float | None:
    if not isinstance(arrival, dict):
        return None
    raw = arrival.get("rate")
    if raw == "inf":
        return math.inf
    return float(raw) if isinstance(raw, (int, float)) else None


class _Figures(TypedDict):
    """The medians over reps of FIGURES and whether the SLO held: the tail of every point."""

    slo_attainment: float | None
    goodput_rps: float | None
    goodput_tok_s: float | None
    achieved_rate_rps: float | None
    output_tok_s: float | None
    ttft_sched_p90_s: float | None
    schedule_lag_max_s: float | None
    slo_met: bool | None


class _RateKey(TypedDict):
    arm: str
    rate: float
    reps: int
    void: bool


class RatePoint(_RateKey, _Figures):
    """One (arm, rate): the median over reps of each of FIGURES, and whether the SLO held."""


class _TraceKey(TypedDict):
    arm: str
    reps: int
    void: bool
    format: str | None
    speed: float | None
    requests: int | None
    offered_rate_rps: float | None


class TracePoint(_TraceKey, _Figures):
    """One arm's trace replay (`--trace`): the medians over reps of its offered rate and FIGURES."""


class SloArm(TypedDict):
    """An arm's highest rate at which it and every lower measured rate met the SLO."""

    arm: str
    void: bool
    max_rate_under_slo: float | None
    goodput_rps_at_max: float | None
    usd_per_mtok_at_max: float | None
    bracket_above: float | None


class _SloRequired(TypedDict):
    slo: dict[str, float] | None  # the targets the cells recorded (`--slo`), None without one
    slo_percentile: float | None
    points: list[RatePoint]
    arms: list[SloArm]


class SloSection(_SloRequired, total=False):
    """The analysis' `slo`: the open-loop points and arms, a trace replay's points and the
    `--find-max-rate` search as run.json recorded it (max_rate_search)."""

    trace: list[TracePoint]
    search: dict[str, Any]


def _medians(rows: Iterable[Mapping[str, Any]], keys: tuple[str, ...]) -> dict[str, float | None]:
    rows = list(rows)
    out: dict[str, float | None] = {}
    for key in keys:
        sp = spread(r.get(key) for r in rows)
        out[key] = sp["median"] if sp else None
    return out


def _met(attainment: float | None, target: float | None) -> bool | None:
    return None if attainment is None or target is None else attainment * 100.0 >= float(target)


def _is_trace(arrival: Any) -> bool:
    return isinstance(arrival, dict) and arrival.get("process") == "trace"


def _trace_points(rows_by_arm: dict[str, list[dict[str, Any]]], target: float | None,
                  void: dict[str, str]) -> list[TracePoint]:
    """Per arm, the median over reps of a trace replay's figures, and whether it met the SLO."""
    out = []
    for arm, rows in sorted(rows_by_arm.items()):
        trace = rows[0]["arrival"].get("trace") or {}
        out.append(TracePoint(
            arm=arm, reps=len(rows), void=arm in void, format=trace.get("format"),
            speed=trace.get("speed"), requests=rows[0].get("requests"),
            offered_rate_rps=_medians(rows, ("offered_rate_rps",))["offered_rate_rps"],
            **_figures(rows, target),
        ))  # fmt: skip
    return out


def _figures(rows: list[dict[str, Any]], target: float | None) -> _Figures:
    """The medians over one point's reps (`rows`) of FIGURES, and whether the SLO held."""
    m = _medians(rows, FIGURES)
    return _Figures(
        slo_attainment=m["slo_attainment"], goodput_rps=m["goodput_rps"],
        goodput_tok_s=m["goodput_tok_s"], achieved_rate_rps=m["achieved_rate_rps"],
        output_tok_s=m["output_tok_s"], ttft_sched_p90_s=m["ttft_sched_p90_s"],
        schedule_lag_max_s=m["schedule_lag_max_s"], slo_met=_met(m["slo_attainment"], target),
    )  # fmt: skip


def compute(run: Run, void: dict[str, str] | None = None) -> SloSection | None:
    """None when the run has no open-loop cell; else {points, arms, slo, slo_percentile} and,
    for a trace replay (`--trace`), `trace`: one point per arm."""
    void = void or {}
    groups: dict[tuple[str, float], list[dict[str, Any]]] = defaultdict(list)
    traced: dict[str, list[dict[str, Any]]] = defaultdict(list)
    slo: dict[str, float] | None = None
    target: float | None = None
    for cell in run.cells:
        row = cell.model_dump()
        if row.get("slo"):
            slo, target = row["slo"], row.get("slo_percentile")
        if _is_trace(row.get("arrival")):
            traced[cell.arm].append(row)
            continue
        rate = _rate(row.get("arrival"))
        if rate is None:
            continue
        groups[(cell.arm, rate)].append(row)
    if not groups and not traced:
        return None
    price = run.meta.pod.price_per_hr
    points = []
    for (arm, rate), rows in sorted(groups.items()):
        points.append(RatePoint(arm=arm, rate=rate, reps=len(rows), void=arm in void,
                                **_figures(rows, target)))
    arms: list[SloArm] = []
    for arm in sorted({p["arm"] for p in points}):
        mine = sorted((p for p in points if p["arm"] == arm), key=lambda p: p["rate"])
        best: RatePoint | None = None
        for p in mine:
            if p["slo_met"] is not True:
                break
            best = p
        usd_mtok = None
        tok_s = best["output_tok_s"] if best is not None else None
        if price and tok_s:
            usd_mtok = usd_per_mtok(price, tok_s)
        arms.append(SloArm(
            arm=arm, void=arm in void,
            max_rate_under_slo=best["rate"] if best else None,
            goodput_rps_at_max=best["goodput_rps"] if best else None,
            usd_per_mtok_at_max=usd_mtok,
            bracket_above=next((p["rate"] for p in mine if p["slo_met"] is not True), None),
        ))  # fmt: skip
    section = SloSection(slo=slo, slo_percentile=target, points=points, arms=arms)
    if traced:
        section["trace"] = _trace_points(traced, target, void)
    search = run.meta.max_rate_search
    if isinstance(search, dict):
        section["search"] = search
    return section


def _num(v: float | None, spec: str, scale: float = 1.0) -> str:
    if v is None:
        return "-"
    return "inf" if math.isinf(v) else format(v * scale, spec)


def _pct(share: float | None) -> str:
    """An attainment as a percentage; "-" alone where none was measured (no --slo)."""
    return "-" if share is None else f"{_num(share, '.1f', 100.0)}%"


def render(section: SloSection | None, stamp: str | None = None) -> list[str]:
    """Markdown lines for the report; nothing when the run had no open-loop cell."""
    if not section:
        return []
    L = ["## Open loop: SLO attainment and goodput against request rate", ""]
    slo = section.get("slo")
    if slo:
        targets = ", ".join(f"{k} {v:g}" for k, v in slo.items())
        L += [f"SLO: {targets}; a rate passes when at least {section['slo_percentile']:g}% of "
              "its requests meet every target (latency from the scheduled send).", ""]
    else:
        L += ["No SLO was given (`--slo`): attainment and goodput are not measured.", ""]
    if stamp:
        L += [f"**{stamp}**", ""]
    if section.get("trace"):
        L += _render_trace(section["trace"])
    if not section["points"]:
        return L
    if any(0 < p["rate"] < math.inf for p in section["points"]):
        L += [f"![SLO attainment and TTFT p90 against request rate]({RATE_PLOT_FILE})", ""]
    L += ["| arm | rate req/s | reps | achieved req/s | attainment | goodput req/s | "
          "goodput tok/s | TTFT p90 ms (sched) | lag max ms | SLO |",
          "|---|---|---|---|---|---|---|---|---|---|"]
    for p in section["points"]:
        arm = f"~~{p['arm']}~~ VOID" if p["void"] else p["arm"]
        met = {True: "met", False: "missed", None: "-"}[p["slo_met"]]
        L.append(f"| {arm} | {_num(p['rate'], 'g')} | {p['reps']} | "
                 f"{_num(p['achieved_rate_rps'], '.2f')} | "
                 f"{_pct(p['slo_attainment'])} | {_num(p['goodput_rps'], '.2f')} | "
                 f"{_num(p['goodput_tok_s'], '.1f')} | {_num(p['ttft_sched_p90_s'], '.0f', 1e3)} | "
                 f"{_num(p['schedule_lag_max_s'], '.1f', 1e3)} | {met} |")
    L.append("")
    if slo:
        L += ["| arm | max rate under SLO | goodput there req/s | $/Mtok there | first failing rate |",
              "|---|---|---|---|---|"]
        for a in section["arms"]:
            arm = f"~~{a['arm']}~~ VOID" if a["void"] else a["arm"]
            L.append(f"| {arm} | {_num(a['max_rate_under_slo'], 'g')} | "
                     f"{_num(a['goodput_rps_at_max'], '.2f')} | "
                     f"{_num(a['usd_per_mtok_at_max'], '.3f')} | "
                     f"{_num(a['bracket_above'], 'g')} |")
        L.append("")
    if section.get("search"):
        L += _render_search(section["search"])
    return L


def _render_search(search: dict[str, Any]) -> list[str]:
    L = ["### Max rate under SLO, by bisection (`--find-max-rate`)", "",
         f"Between {_num(search.get('low'), 'g')} and {_num(search.get('high'), 'g')} req/s, "
         f"{search.get('reps')} rep(s) at each probed rate, stopped at high/low - 1 <= "
         f"{_num(search.get('tol'), 'g')}.", "",
         "| arm | max rate under SLO | bracket | status | probed rates |", "|---|---|---|---|---|"]
    for arm, a in sorted((search.get("arms") or {}).items()):
        br = a.get("bracket")
        bracket = f"[{_num(br[0], 'g')}, {_num(br[1], 'g')})" if br else "-"
        probed = ", ".join(_num(r, "g") for r in a.get("probed") or [])
        L.append(f"| {arm} | {_num(a.get('max_rate'), 'g')} | {bracket} | {a.get('status')} | "
                 f"{probed} |")
    L.append("")
    return L


def _render_trace(points: list[TracePoint]) -> list[str]:
    sessions = bool(points) and all(p["format"] in SESSION_FORMATS for p in points)
    what = ("The sessions replayed from their own start times (over its speed); each turn goes "
            "out after the previous answer ended and its think or tool wait, sending the whole "
            "conversation so far, its output held to the turn's length (docs/probe.md, "
            "\"Sessions\")." if sessions else
            "The request log replayed at its own arrival times (over its speed); prompts built to "
            "the logged input lengths (approximately, in words), outputs held to the logged "
            "lengths.")
    L = ["### Trace replay", "", what, "",
         "| arm | format | speed | reps | offered req/s | achieved req/s | attainment | "
         "goodput req/s | goodput tok/s | TTFT p90 ms (sched) | lag max ms | SLO |",
         "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for p in points:
        arm = f"~~{p['arm']}~~ VOID" if p["void"] else p["arm"]
        met = {True: "met", False: "missed", None: "-"}[p["slo_met"]]
        L.append(f"| {arm} | {p['format'] or '-'} | {_num(p['speed'], 'g')} | {p['reps']} | "
                 f"{_num(p['offered_rate_rps'], '.2f')} | {_num(p['achieved_rate_rps'], '.2f')} | "
                 f"{_pct(p['slo_attainment'])} | {_num(p['goodput_rps'], '.2f')} | "
                 f"{_num(p['goodput_tok_s'], '.1f')} | {_num(p['ttft_sched_p90_s'], '.0f', 1e3)} | "
                 f"{_num(p['schedule_lag_max_s'], '.1f', 1e3)} | {met} |")
    L.append("")
    return L
