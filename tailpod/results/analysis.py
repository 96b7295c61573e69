"""Turn raw rows into the numbers a report quotes. Every function here is pure.

Conventions (docs/results.md, "Analysis"):
- A *sample* is one (arm, concurrency, rep). With several prompt classes a rep's classes are
  pooled: throughput = sum of tokens / sum of wall time; latency medians come from the rep's
  request rows (or, without them, a request-weighted mean of the class cells' p50s); acceptance
  from summed counters.
- Spread across reps is min/max and the inclusive quartiles (numpy's default "linear").
- Speedup = median(spec) / median(plain); its range is min(spec)/max(plain) .. max(spec)/min(plain).
- Crossover = where the throughput speedup falls to 1, interpolated linearly in log2(concurrency)
  by default (settable to linear). "uncertain" when the spec and plain spreads overlap at either
  bracketing point.
- Knee = the first measured concurrency after which one step raises throughput by less than
  `knee_throughput_gain` while the p50 latency grows by more than `knee_latency_growth`.
"""


from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict
from typing import Any

from tailpod.results.facts import GIB_TO_GB, cache_facts, weights_gb
from tailpod.results.hardware import recorded_or_computed
from tailpod.results.io import STAMP, Run
from tailpod.results.samples import (
    LATENCY_METRICS,
    REQUEST_FIELD,
    SUMMARY_METRICS,
    AnalysisSettings,
    Sample,
    build_samples,
    effective_cache,
    summarize,
    summarize_throughput,
)
from tailpod.results.schema import ArmRecord
from tailpod.results.section import Context
from tailpod.results.sections import registered
from tailpod.results.sections.best_k import best_k
from tailpod.results.sections.capacity import capacity_drop, capacity_of
from tailpod.results.sections.crossover import find_crossover
from tailpod.results.sections.knee import find_knee
from tailpod.results.sections.unit_cost import cost_per_tokens
from tailpod.results.stats import ratio_spread, spread

__all__ = [
    "GIB_TO_GB", "LATENCY_METRICS", "REQUEST_FIELD", "SUMMARY_METRICS", "AnalysisSettings",
    "Sample", "build_samples", "cache_facts", "effective_cache", "summarize",
    "summarize_throughput", "weights_gb", "ratio_spread", "spread", "find_crossover", "find_knee",
    "best_k", "capacity_drop", "capacity_of", "cost_per_tokens",
]  # fmt: skip

ANALYSIS_VERSION = 1

# --- crossover, knee, best K ---------------------------------------------------------------------


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


# --- the whole run -------------------------------------------------------------------------------


def _stamp_all(obj: Any) -> Any:
    if isinstance(obj, dict):
        return {k: _stamp_all(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [(_stamp_all(v) | {"stamp": STAMP}) if isinstance(v, dict) else v for v in obj]
    return obj


def analyze(run: Run, settings: AnalysisSettings | None = None) -> dict[str, Any]:
    """Everything the report shows, as a JSON-ready dict (see docs/results.md for the keys)."""
    from tailpod.results.fingerprint import recorded_fingerprint  # they build on this module
    from tailpod.results.serve_tax import serve_tax
    from tailpod.results.slo import compute as slo_section

    st = settings or AnalysisSettings()
    meta = run.meta
    ctx = Context.of(run, st)
    for section in registered():
        value = section.compute(ctx)
        if value is not None or not section.omit_none:
            ctx.done[section.key] = value
    arms, void, warnings = ctx.arms, ctx.void, ctx.warnings
    # The sections still below read the summaries untyped until they are modules too.
    cells: list[dict[str, Any]] = ctx.cells  # type: ignore[assignment]
    cell_at: dict[tuple[str, int], dict[str, Any]] = ctx.cell_at  # type: ignore[assignment]

    # Bytes model between checkpoint arms (plain arms on different checkpoints)
    bytes_rows = []
    plain_by_ckpt: dict[str, ArmRecord] = {}
    for a in arms:
        if a.k == 0 and a.checkpoint and a.label not in void:
            plain_by_ckpt.setdefault(a.checkpoint, a)
    if len(plain_by_ckpt) > 1:
        ordered = sorted(plain_by_ckpt.values(), key=lambda a: -(weights_gb(a.facts) or 0))
        ref = ordered[0]
        for other in ordered[1:]:
            bytes_rows.append(checkpoint_bytes(ref, other, cell_at, cell_at))

    # The claimed GPU against the pod's own facts: a mismatch or an emulated provider is said next
    # to every number (report header, warnings, plots).
    hardware = recorded_or_computed(meta.pod.model_dump())
    if hardware.get("stamp"):
        warnings.append(str(hardware["stamp"]))
    result: dict[str, Any] = {
        "analysis_version": ANALYSIS_VERSION,
        "schema_version": meta.schema_version,
        "run_id": meta.run_id,
        "run_dir": str(run.path) if run.path else None,
        "model": meta.model,
        "engine": meta.engine.name,
        "engine_version": meta.engine.version,
        "image_digest": meta.image.digest,
        "image_ref": meta.image.ref,
        "provider": meta.provider,
        "gpu": meta.pod.gpu,
        "gpu_count": meta.pod.gpu_count,
        "price_per_hr": meta.pod.price_per_hr,
        "measured_from": meta.measured_from,
        "created_at": meta.created_at,
        "plan": meta.plan.model_dump(),
        "stamp": run.stamp,
        "hardware": hardware,
        "settings": asdict(st),
        "concurrency": ctx.concurrencies,
        "warnings": warnings,
        "arms": ctx.done["arms"],
        "cells": ctx.done["cells"],
        "speedup": ctx.done["speedup"],
        "crossover": ctx.done["crossover"],
        "knee": ctx.done["knee"],
        "best_k": ctx.done["best_k"],
        "capacity": ctx.done["capacity"],
        "cost": ctx.done["cost"],
        "ttft_cache": ctx.done["ttft_cache"],
        "acceptance": ctx.done["acceptance"],
        "fingerprint": recorded_fingerprint(run),
        "serve_tax": serve_tax(run, cells, void),
        "slo": slo_section(run, void),
        "bytes_model": bytes_rows,
    }
    if meta.plan.prompt_classes and len(meta.plan.prompt_classes) > 1 and st.prompt_class is None:
        result["by_prompt_class"] = {
            pc: summarize_throughput(build_samples(run, pc, st.cache))
            for pc in meta.plan.prompt_classes
        }
    return _stamp_all(result) if run.off_pod else result


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
