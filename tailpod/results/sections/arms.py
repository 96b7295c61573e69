"""The Arms table: every arm's K, method, checkpoint, gate verdict, baseline and (scrubbed) argv."""

from __future__ import annotations

from typing import Any, TypedDict

from tailpod.results.markdown import arm_label, scrub_argv, table
from tailpod.results.section import Context, RenderContext, Section
from tailpod.results.startup_facts import cache_facts, weights_gb


class ArmRow(TypedDict):
    label: str
    k: int
    method: str | None
    checkpoint: str | None
    void: bool
    void_reason: str | None
    unverified: str | None
    gate: dict[str, Any] | None
    baseline: str | None
    restart_s: float | None
    argv: list[str]
    weights_gb: float | None
    cache_facts: dict[str, float]


def compute(ctx: Context) -> list[ArmRow]:
    rows: list[ArmRow] = []
    cell_arms = {c["arm"] for c in ctx.cells}
    for a in ctx.arms:
        base = ctx.baseline_for(a) if a.k else None
        rows.append(
            {
                "label": a.label,
                "k": a.k,
                "method": a.method,
                "checkpoint": a.checkpoint,
                "void": a.label in ctx.void,
                "void_reason": ctx.void.get(a.label),
                "unverified": a.unverified_text,
                "gate": a.gate.model_dump() if a.gate else None,
                "baseline": base.label if base else None,
                "restart_s": a.restart_s,
                "argv": a.argv,
                "weights_gb": weights_gb(a.facts),
                "cache_facts": cache_facts(a.facts),
            }
        )
        if a.label not in cell_arms:
            ctx.warnings.append(f"arm {a.label}: no cell rows")
        if a.unverified_text:
            ctx.warnings.append(f"arm {a.label}: speedup UNVERIFIED ({a.unverified_text})")
    return rows


def render(arms: list[ArmRow], rc: RenderContext) -> list[str]:
    rows = []
    for a in arms:
        gate = a.get("gate") or {}
        gate_txt = gate.get("status", "—")
        if gate.get("first_mismatch"):
            mm = gate["first_mismatch"]
            gate_txt += f" (prompt {mm['prompt']}, position {mm['position']})"
        if a.get("unverified"):
            gate_txt += f" — UNVERIFIED: {a['unverified']}"
        rows.append(
            [
                arm_label(a["label"], rc.void),
                str(a["k"]),
                a.get("method") or "—",
                a.get("checkpoint") or "—",
                gate_txt,
                a.get("baseline") or "—",
                "`" + " ".join(scrub_argv(a.get("argv") or [])) + "`" if a.get("argv") else "—",
            ]
        )
    return ["## Arms", ""] + table(
        ["arm", "K", "method", "checkpoint", "gate", "baseline", "argv"], rows, rc.stamp
    )


SECTION = Section(key="arms", rank=10, compute=compute, report_rank=10, render=render)
