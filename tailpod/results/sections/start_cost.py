"""What the start cost: the engine's startup phases, whether the compile cache was hit, and the
billed seconds and dollars to the engine serving and to the first measured token. A rented pod's
run has them in run.json `cold_start` (the pod's ledger record, completed by the sweep: see
provision/volumes.py cold_start and to_first_token); any other run has only the phases, from its
first arm's startup facts. `tailpod compare` puts a cold start and a warm one side by side, with
each later run's difference from the first."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypedDict

from tailpod.engines.base import STARTUP_PHASES, engine_start_s
from tailpod.results.markdown import fmt_num, table
from tailpod.results.section import CompareContext, CompareRenderContext, Context, Section

# The money and time of a start, in the order a start reaches them (run.json cold_start's keys).
BILLED = ("billed_s_to_ready", "usd_to_ready", "billed_s_to_first_token", "usd_to_first_token")


class StartCost(TypedDict):
    source: str  # "cold_start" (the pod's record) or "arm LABEL" (that arm's startup facts)
    phases: dict[str, float | None]  # STARTUP_PHASES, seconds
    engine_start_s: float | None  # engines/base.py engine_start_s of the phases
    compile_cache_hit: bool | None
    compile_cache_load_error: str | None
    billed_s_to_ready: float | None
    usd_to_ready: float | None
    billed_s_to_first_token: float | None
    usd_to_first_token: float | None
    volume: str | None


def _number(v: Any) -> float | None:
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None


def start_cost(cold: Mapping[str, Any] | None,
               arm_phases: list[tuple[str, Mapping[str, Any]]]) -> StartCost | None:
    """The start's cost from run.json `cold_start`, else from the first arm whose startup facts
    hold phases; None when neither does."""
    if cold:
        source, phases = "cold_start", dict(cold.get("phases") or {})
    elif arm_phases:
        label, found = arm_phases[0]
        source, phases, cold = f"arm {label}", dict(found), {}
    else:
        return None
    numbers = {k: _number(phases.get(k)) for k in STARTUP_PHASES}
    hit = cold.get("compile_cache_hit", phases.get("compile_cache_hit"))
    return StartCost(
        source=source, phases=numbers, engine_start_s=engine_start_s(numbers),
        compile_cache_hit=hit if isinstance(hit, bool) else None,
        compile_cache_load_error=phases.get("compile_cache_load_error"),
        billed_s_to_ready=_number(cold.get("billed_s_to_ready")),
        usd_to_ready=_number(cold.get("usd_to_ready")),
        billed_s_to_first_token=_number(cold.get("billed_s_to_first_token")),
        usd_to_first_token=_number(cold.get("usd_to_first_token")),
        volume=cold.get("volume"))


def compute(ctx: Context) -> StartCost | None:
    arms = [(a.label, a.facts["startup_phases"]) for a in ctx.arms
            if isinstance(a.facts.get("startup_phases"), Mapping)]
    return start_cost(ctx.run.meta.cold_start, arms)


def _diffs(values: list[float | None]) -> list[float | None]:
    """Each later run's value less the first run's (None where either is unknown)."""
    base = values[0]
    return [None if v is None or base is None else round(v - base, 6) for v in values[1:]]


def compare(cc: CompareContext) -> dict[str, Any]:
    costs: list[Mapping[str, Any] | None] = [an.get("start_cost") for an in cc.analyses]
    if not any(costs):
        return {"start_cost": None}
    rows = []
    for key in (*STARTUP_PHASES, "engine_start_s", *BILLED):
        values = [_number(((c or {}).get("phases") or {}).get(key) if key in STARTUP_PHASES
                          else (c or {}).get(key)) for c in costs]
        if any(v is not None for v in values):
            rows.append({"key": key, "values": values, "diff": _diffs(values)})
    return {"start_cost": {
        "runs": costs,
        "compile_cache_hit": [(c or {}).get("compile_cache_hit") for c in costs],
        "rows": rows,
    }}


def _hit(v: Any) -> str:
    return "hit" if v is True else "compiled" if v is False else "—"


def _signed(v: float | None, usd: bool) -> str:
    if v is None:
        return "—"
    return (f"{'-' if v < 0 else '+'}${abs(v):.4f}" if usd
            else f"{'-' if v < 0 else '+'}{fmt_num(abs(v))} s")


def render_compare(cmp: Mapping[str, Any], rc: CompareRenderContext) -> list[str]:
    part = cmp.get("start_cost")
    if not part:
        return []
    heads = ["", *rc.ids, *(f"{i} − {rc.ids[0]}" for i in rc.ids[1:])]
    body = [["compile cache", *(_hit(h) for h in part["compile_cache_hit"]),
             *("" for _ in rc.ids[1:])]]
    for row in part["rows"]:
        usd = row["key"].startswith("usd_")
        shown = [(f"${v:.4f}" if usd else f"{fmt_num(v)} s") if v is not None else "—"
                 for v in row["values"]]
        body.append([row["key"], *shown, *(_signed(d, usd) for d in row["diff"])])
    return ["## Start: cold and warm", "",
            "The engine's startup phases (seconds, as its log states them), the compile cache, "
            "and what the start billed to serving and to the first measured token.", ""] \
        + table(heads, body, rc.stamp)


SECTION = Section(
    key="start_cost",
    rank=160,
    compute=compute,
    compare_rank=90,
    compare=compare,
    render_compare=render_compare,
    omit_none=True,
)
