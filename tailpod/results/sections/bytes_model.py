"""Bytes model: the decode speedup that weight bytes alone predict between two checkpoints (plain
arms on different checkpoints in one run, or the plain arms of runs of different models), next
to the measured one, and the per-step traffic the format does not shrink when measured falls
short."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, TypedDict, cast

from tailpod.results.markdown import fmt_num, table
from tailpod.results.schema import ArmRecord
from tailpod.results.section import (
    CompareContext,
    CompareRenderContext,
    Context,
    RenderContext,
    Section,
)
from tailpod.results.startup_facts import cache_facts, weights_gb


class BytesRow(TypedDict, total=False):
    """Two plain arms on different checkpoints (A the larger), at their lowest common c, and what
    bytes_model() says of them."""

    arm_a: str
    checkpoint_a: str | None
    arm_b: str
    checkpoint_b: str | None
    concurrency: int | None
    weights_a_gb: float | None
    weights_b_gb: float | None
    predicted: float | None
    measured: float | None
    residual: float | None
    implied_untouched_gb: float | None
    caches: dict[str, float]
    status: str  # ok, unknown
    detail: str


def bytes_model(
    weights_a_gb: float | None,
    weights_b_gb: float | None,
    decode_a: float | None,
    decode_b: float | None,
    caches: dict[str, float] | None = None,
) -> dict[str, Any]:
    """Decode speedup of checkpoint B over A that weight bytes alone predict (A/B), next to the
    measured one. When measured falls short, solve (Wa+U)/(Wb+U) = measured for U: the per-step
    traffic the format does not shrink (KV and state caches, activations)."""
    out: dict[str, Any] = {
        "weights_a_gb": weights_a_gb,
        "weights_b_gb": weights_b_gb,
        "predicted": None,
        "measured": None,
        "residual": None,
        "implied_untouched_gb": None,
        "caches": caches or {},
    }
    if not weights_a_gb or not weights_b_gb:
        return out | {"status": "unknown", "detail": "startup facts lack a weight size"}
    predicted = weights_a_gb / weights_b_gb
    out["predicted"] = predicted
    if not decode_a or not decode_b:
        return out | {"status": "unknown", "detail": "no measured decode speed"}
    measured = decode_b / decode_a
    out["measured"] = measured
    out["residual"] = measured / predicted
    if measured >= predicted:
        return out | {
            "status": "ok",
            "detail": "measured meets or beats the weight-bytes prediction",
        }
    if measured > 1:
        out["implied_untouched_gb"] = (weights_a_gb - measured * weights_b_gb) / (measured - 1)
    shortfall = (1 - measured / predicted) * 100
    if caches:
        shown = ", ".join(f"{k}={v:g}" for k, v in sorted(caches.items()))
        detail = (
            f"measured {measured:.2f}× vs {predicted:.2f}× predicted ({shortfall:.0f}% short); "
            f"attributed to traffic the format does not touch, KV/state caches ({shown})"
        )
    else:
        detail = (
            f"measured {measured:.2f}× vs {predicted:.2f}× predicted ({shortfall:.0f}% short); "
            "startup facts do not show KV/state cache sizes, so the residual is unattributed"
        )
    if out["implied_untouched_gb"] is not None:
        detail += f"; implied untouched traffic ≈ {out['implied_untouched_gb']:.2f} GB per step"
    return out | {"status": "ok", "detail": detail}


def _decode_at_lowest(
    arm: str, cell_at: dict[tuple[str, int], dict[str, Any]], concs: Sequence[int]
) -> tuple[float | None, int | None]:
    for conc in sorted(concs):
        c = cell_at.get((arm, conc))
        if c is None:
            continue
        for metric in ("decode_tok_s_p50", "output_tok_s"):
            if c.get(metric):
                return c[metric]["median"], conc
    return None, None


def checkpoint_bytes(
    ref: ArmRecord,
    other: ArmRecord,
    cells_ref: dict[tuple[str, int], dict[str, Any]],
    cells_other: dict[tuple[str, int], dict[str, Any]],
) -> dict[str, Any]:
    """Bytes model for two plain arms on different checkpoints, at their lowest common c."""
    common = sorted(
        {c for (a, c) in cells_ref if a == ref.label}
        & {c for (a, c) in cells_other if a == other.label}
    )
    da, conc = _decode_at_lowest(ref.label, cells_ref, common)
    db, _ = _decode_at_lowest(other.label, cells_other, common[:1] if common else [])
    caches = {f"{ref.label}.{k}": v for k, v in cache_facts(ref.facts).items()}
    caches |= {f"{other.label}.{k}": v for k, v in cache_facts(other.facts).items()}
    model = bytes_model(weights_gb(ref.facts), weights_gb(other.facts), da, db, caches)
    return {
        "arm_a": ref.label,
        "checkpoint_a": ref.checkpoint,
        "arm_b": other.label,
        "checkpoint_b": other.checkpoint,
        "concurrency": conc,
        **model,
    }

def compute(ctx: Context) -> list[BytesRow]:
    rows: list[BytesRow] = []
    plain_by_ckpt: dict[str, ArmRecord] = {}
    for a in ctx.arms:
        if a.k == 0 and a.checkpoint and a.label not in ctx.void:
            plain_by_ckpt.setdefault(a.checkpoint, a)
    if len(plain_by_ckpt) > 1:
        ordered = sorted(plain_by_ckpt.values(), key=lambda a: -(weights_gb(a.facts) or 0))
        ref = ordered[0]
        cell_at: dict[tuple[str, int], dict[str, Any]] = ctx.cell_at  # type: ignore[assignment]
        for other in ordered[1:]:
            rows.append(cast(BytesRow, checkpoint_bytes(ref, other, cell_at, cell_at)))
    return rows


def render(rows: list[BytesRow], rc: RenderContext) -> list[str]:
    if not rows:
        return []
    L = [
        "## Bytes model",
        "",
        "Decode speedup that weight bytes alone predict (A/B) next to the measured one.",
        "",
    ]
    return L + table(
        ["A", "B", "weights A / B (GB)", "predicted", "measured", "at c", "detail"],
        [
            [
                b["arm_a"],
                b["arm_b"],
                f"{fmt_num(b['weights_a_gb'])} / {fmt_num(b['weights_b_gb'])}",
                f"{b['predicted']:.2f}×" if b["predicted"] else "—",
                f"{b['measured']:.2f}×" if b["measured"] else "—",
                str(b.get("concurrency") or "—"),
                b["detail"],
            ]
            for b in rows
        ],
        rc.stamp,
    )


def compare(cc: CompareContext) -> dict[str, Any]:
    rows = []
    base = cc.analyses[0]
    for other in cc.analyses[1:]:
        if other["model"] == base["model"]:
            continue
        pa = next((a for a in base["arms"] if a["k"] == 0 and not a["void"]), None)
        pb = next((a for a in other["arms"] if a["k"] == 0 and not a["void"]), None)
        if not pa or not pb:
            continue
        ca = {(e["arm"], e["concurrency"]): e for e in base["cells"]}
        cb = {(e["arm"], e["concurrency"]): e for e in other["cells"]}
        common = sorted(
            {c for (arm, c) in ca if arm == pa["label"]}
            & {c for (arm, c) in cb if arm == pb["label"]}
        )
        da = db = None
        conc = common[0] if common else None
        if conc is not None:
            for metric in ("decode_tok_s_p50", "output_tok_s"):
                sa, sb = ca[(pa["label"], conc)].get(metric), cb[(pb["label"], conc)].get(metric)
                if sa and sb:
                    da, db = sa["median"], sb["median"]
                    break
        caches = {f"{base['run_id']}.{k}": v for k, v in (pa.get("cache_facts") or {}).items()}
        caches |= {f"{other['run_id']}.{k}": v for k, v in (pb.get("cache_facts") or {}).items()}
        rows.append(
            {
                "run_a": base["run_id"],
                "checkpoint_a": base["model"],
                "arm_a": pa["label"],
                "run_b": other["run_id"],
                "checkpoint_b": other["model"],
                "arm_b": pb["label"],
                "concurrency": conc,
                **bytes_model(pa.get("weights_gb"), pb.get("weights_gb"), da, db, caches),
            }
        )
    return {"bytes_model": rows}


def render_compare(cmp: Mapping[str, Any], rc: CompareRenderContext) -> list[str]:
    if not cmp["bytes_model"]:
        return []
    return ["## Bytes model across checkpoints", ""] + table(
        ["A", "B", "weights A / B (GB)", "predicted", "measured", "detail"],
        [
            [
                f"{b['run_a']} ({b['checkpoint_a']})",
                f"{b['run_b']} ({b['checkpoint_b']})",
                f"{fmt_num(b['weights_a_gb'])} / {fmt_num(b['weights_b_gb'])}",
                f"{b['predicted']:.2f}×" if b["predicted"] else "—",
                f"{b['measured']:.2f}×" if b["measured"] else "—",
                b["detail"],
            ]
            for b in cmp["bytes_model"]
        ],
        rc.stamp,
    )


SECTION = Section(
    key="bytes_model",
    rank=140,
    compute=compute,
    report_rank=130,
    render=render,
    compare_rank=80,
    compare=compare,
    render_compare=render_compare,
)
