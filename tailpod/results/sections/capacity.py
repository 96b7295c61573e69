"""Capacity: KV pool tokens and request slots per arm as its engine reported them at startup, and
what speculation cost against plain."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypedDict, cast

from tailpod.results.markdown import arm_label, fmt_num, table
from tailpod.results.section import (
    CompareContext,
    CompareRenderContext,
    Context,
    RenderContext,
    Section,
)
from tailpod.results.startup_facts import num as _num


class CapacityRow(TypedDict):
    """One arm: capacity_of()'s figures and, for a spec arm, capacity_drop() against its plain."""

    arm: str
    k: int
    void: bool
    engine: str | None
    kv_tokens: float | None
    max_total_num_tokens: float | None
    max_running_requests: float | None
    slots_source: str | None
    max_concurrency: float | None
    max_model_len_for_concurrency: float | None
    drop: dict[str, Any] | None


def capacity_of(
    engine: str | None, facts: dict[str, Any], engine_config: dict[str, Any]
) -> dict[str, Any]:
    """KV pool tokens and request slots as the engine reported them at startup."""
    slots = _num(facts.get("max_running_requests"))
    slots_source = "startup: max_running_requests" if slots is not None else None
    if slots is None and engine_config.get("max_running_requests"):
        slots = _num(engine_config["max_running_requests"])
        slots_source = "engine_config: max_running_requests (requested cap)"
    kv = _num(facts.get("kv_tokens"))
    if kv is None:
        kv = _num(facts.get("max_total_num_tokens"))
    return {
        "engine": engine,
        "kv_tokens": kv,
        "max_total_num_tokens": _num(facts.get("max_total_num_tokens")),
        "max_running_requests": slots,
        "slots_source": slots_source,
        "max_concurrency": _num(facts.get("max_concurrency")),
        "max_model_len_for_concurrency": _num(facts.get("max_model_len_for_concurrency")),
    }


def capacity_drop(base: dict[str, Any], spec: dict[str, Any]) -> dict[str, Any]:
    """What the spec arm lost against plain: KV tokens, slots, vLLM's max concurrency."""
    out: dict[str, Any] = {}
    parts = []
    for key, name in (
        ("kv_tokens", "KV tokens"),
        ("max_running_requests", "slots"),
        ("max_concurrency", "max concurrency"),
    ):
        a, b = base.get(key), spec.get(key)
        if a and b is not None:
            out[key] = {"from": a, "to": b, "change_pct": (b / a - 1) * 100}
            if b < a:
                parts.append(
                    f"{name} {_fmt_count(a)} → {_fmt_count(b)} ({(b / a - 1) * 100:+.1f}%)"
                )
    out["detail"] = (
        ("speculation cut " + ", ".join(parts)) if parts else "no drop shown by startup facts"
    )
    return out


def _fmt_count(v: float) -> str:
    return f"{v:,.0f}" if float(v).is_integer() else f"{v:,.2f}"


def compute(ctx: Context) -> list[CapacityRow]:
    engine = ctx.run.meta.engine.name
    caps = {
        a.label: capacity_of(a.startup.engine if a.startup else engine, a.facts, a.engine_config)
        for a in ctx.arms
    }
    rows: list[CapacityRow] = []
    for a in ctx.arms:
        row = {"arm": a.label, "k": a.k, "void": a.label in ctx.void, **caps[a.label]}
        base = ctx.baseline_for(a) if a.k else None
        row["drop"] = capacity_drop(caps[base.label], caps[a.label]) if base else None
        rows.append(cast(CapacityRow, row))
    return rows


def render(rows: list[CapacityRow], rc: RenderContext) -> list[str]:
    L = ["## Capacity", "", "From each arm's engine startup lines (raw lines are in run.json).", ""]
    L += table(
        ["arm", "K", "KV pool tokens", "max running requests", "vLLM max concurrency",
         "drop vs plain"],
        [
            [
                arm_label(c["arm"], rc.void),
                str(c["k"]),
                fmt_num(c["kv_tokens"]),
                fmt_num(c["max_running_requests"]),
                fmt_num(c["max_concurrency"]),
                (c["drop"] or {}).get("detail", "—") if c["drop"] else "—",
            ]
            for c in rows
        ],
        rc.stamp,
    )  # fmt: skip
    return L


def compare(cc: CompareContext) -> dict[str, Any]:
    out = []
    for arm in cc.arm_labels:
        rows = [next((c for c in a["capacity"] if c["arm"] == arm), None) for a in cc.analyses]
        out.append(
            {
                "arm": arm,
                "kv_tokens": [r["kv_tokens"] if r else None for r in rows],
                "max_running_requests": [r["max_running_requests"] if r else None for r in rows],
                "max_concurrency": [r["max_concurrency"] if r else None for r in rows],
            }
        )
    return {"capacity": out}


def render_compare(cmp: Mapping[str, Any], rc: CompareRenderContext) -> list[str]:
    rows = [
        [
            c["arm"],
            *[
                f"{fmt_num(kv)} / {fmt_num(s)}"
                for kv, s in zip(c["kv_tokens"], c["max_running_requests"], strict=True)
            ],
        ]
        for c in cmp["capacity"]
    ]
    return ["## Capacity (KV tokens / max running requests)", ""] + table(
        ["arm", *rc.ids], rows, rc.stamp
    )


SECTION = Section(
    key="capacity",
    rank=70,
    compute=compute,
    report_rank=110,
    render=render,
    compare_rank=70,
    compare=compare,
    render_compare=render_compare,
)
