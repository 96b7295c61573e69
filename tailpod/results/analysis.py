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

import math
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import asdict
from typing import Any

from tailpod.results.facts import GIB_TO_GB, cache_facts, weights_gb
from tailpod.results.facts import num as _num
from tailpod.results.fingerprint import BROKEN_HEAD_ACCEPT_LEN
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
from tailpod.results.sections.crossover import find_crossover
from tailpod.results.sections.knee import find_knee
from tailpod.results.stats import ratio_spread, spread, usd_per_mtok

__all__ = [
    "GIB_TO_GB", "LATENCY_METRICS", "REQUEST_FIELD", "SUMMARY_METRICS", "AnalysisSettings",
    "Sample", "build_samples", "cache_facts", "effective_cache", "summarize",
    "summarize_throughput", "weights_gb", "ratio_spread", "spread", "find_crossover", "find_knee",
]  # fmt: skip

ANALYSIS_VERSION = 1

# --- crossover, knee, best K ---------------------------------------------------------------------


def best_k(candidates: dict[int, dict[str, Any]]) -> dict[str, Any]:
    """Best K from {k: spread} (higher median is better; ties go to the smaller K), and whether
    the next larger K measured shows that going further stops helping."""
    if not candidates:
        return {"best_k": None, "stops": False, "evidence": "no candidates"}
    ks = sorted(candidates)
    best = max(ks, key=lambda k: (candidates[k]["median"], -k))
    b = candidates[best]
    larger = [k for k in ks if k > best]
    if not larger:
        return {
            "best_k": best,
            "value": b["median"],
            "stops": False,
            "next_k": None,
            "evidence": f"not shown to stop: K={best} is the largest K measured",
        }
    nxt = larger[0]
    n = candidates[nxt]
    if n["median"] < b["median"]:
        noise = n["max"] >= b["min"]
        return {
            "best_k": best,
            "value": b["median"],
            "stops": True,
            "next_k": nxt,
            "within_noise": noise,
            "evidence": f"K={nxt} {n['median']:.1f} < K={best} {b['median']:.1f}"
            + (" (rep spreads overlap)" if noise else ""),
        }
    return {
        "best_k": best,
        "value": b["median"],
        "stops": False,
        "next_k": nxt,
        "evidence": f"not shown to stop: K={nxt} ties K={best} at {b['median']:.1f}",
    }


# --- capacity, cost, bytes -----------------------------------------------------------------------


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


def cost_per_tokens(price_per_hr: float | None, tok_s: float | None) -> dict[str, Any]:
    """USD per 1k and per 1M output tokens at a throughput. Unknown price -> unknown, never 0."""
    if price_per_hr is None:
        return {
            "status": "unknown",
            "usd_per_1k": None,
            "usd_per_1m": None,
            "reason": "pod price unknown",
        }
    if not tok_s or tok_s <= 0:
        return {
            "status": "unknown",
            "usd_per_1k": None,
            "usd_per_1m": None,
            "reason": "no throughput",
        }
    per_mtok = usd_per_mtok(price_per_hr, tok_s)
    return {
        "status": "ok",
        "usd_per_1k": per_mtok / 1e3,
        "usd_per_1m": per_mtok,
        "reason": None,
    }


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
    arms, void, samples, concurrencies, warnings = (
        ctx.arms, ctx.void, ctx.samples, ctx.concurrencies, ctx.warnings
    )
    # The sections still below read the summaries untyped until they are modules too.
    cells: list[dict[str, Any]] = ctx.cells  # type: ignore[assignment]
    cell_at: dict[tuple[str, int], dict[str, Any]] = ctx.cell_at  # type: ignore[assignment]

    # Best K per method (plain is K=0 of every method on the same checkpoint)
    best: dict[str, Any] = {
        "metric": "output_tok_s",
        "per_concurrency": [],
        "overall": [],
        "excluded_void": sorted(a.label for a in arms if a.k and a.label in void),
    }
    methods = sorted({a.method for a in arms if a.k and a.method and a.label not in void})
    for method in methods:
        family = [a for a in arms if a.label not in void and (a.method == method or a.k == 0)]
        spec_ckpts = {a.checkpoint for a in family if a.k}
        family = [a for a in family if a.k or a.checkpoint in spec_ckpts]
        for conc in concurrencies:
            cands = {
                a.k: cell_at[(a.label, conc)]["output_tok_s"]
                for a in family
                if (a.label, conc) in cell_at and cell_at[(a.label, conc)]["output_tok_s"]
            }
            if cands:
                res = best_k(cands)
                label = next((a.label for a in family if a.k == res["best_k"]), None)
                best["per_concurrency"].append(
                    {"method": method, "concurrency": conc, "best_arm": label, **res}
                )
        # Overall: geometric mean across the concurrencies every candidate measured.
        common = [
            c
            for c in concurrencies
            if all(
                (a.label, c) in cell_at and cell_at[(a.label, c)]["output_tok_s"] for a in family
            )
        ]
        if common:
            geo = {}
            for a in family:
                vals = [cell_at[(a.label, c)]["output_tok_s"]["median"] for c in common]
                g = math.exp(sum(math.log(v) for v in vals) / len(vals))
                geo[a.k] = {"median": g, "min": g, "max": g}
            res = best_k(geo)
            wins = [p["best_k"] for p in best["per_concurrency"] if p["method"] == method]
            best["overall"].append(
                {
                    "method": method,
                    "over_concurrency": common,
                    "basis": "geometric mean of median throughput",
                    "best_arm": next((a.label for a in family if a.k == res["best_k"]), None),
                    "wins": {str(k): wins.count(k) for k in sorted(set(wins))},
                    **res,
                }
            )

    # Capacity
    capacity = []
    caps = {
        a.label: capacity_of(
            a.startup.engine if a.startup else meta.engine.name, a.facts, a.engine_config
        )
        for a in arms
    }
    for a in arms:
        row = {"arm": a.label, "k": a.k, "void": a.label in void, **caps[a.label]}
        base = ctx.baseline_for(a) if a.k else None
        row["drop"] = capacity_drop(caps[base.label], caps[a.label]) if base else None
        capacity.append(row)

    # Cost
    price = meta.pod.price_per_hr
    costs = []
    for c in cells:
        if c["arm"] in void:
            costs.append(
                {
                    "arm": c["arm"],
                    "concurrency": c["concurrency"],
                    "status": "void",
                    "usd_per_1k": None,
                    "usd_per_1m": None,
                    "price_per_hr": price,
                    "reason": f"VOID: {void[c['arm']]}",
                }
            )
            continue
        tput = c["output_tok_s"]
        cost = cost_per_tokens(price, tput["median"] if tput else None)
        if cost["status"] == "ok" and tput:
            cost["usd_per_1m_range"] = [
                cost_per_tokens(price, tput["max"])["usd_per_1m"],
                cost_per_tokens(price, tput["min"])["usd_per_1m"],
            ]
        costs.append(
            {"arm": c["arm"], "concurrency": c["concurrency"], "price_per_hr": price, **cost}
        )
    if price is None:
        warnings.append("pod price unknown: cost columns are 'unknown'")

    # TTFT cold/warm from request rows
    ttft: dict[tuple[str, int], dict[str, list[float]]] = defaultdict(
        lambda: {"cold": [], "warm": []}
    )
    for r in run.requests:
        if (
            r.ok
            and r.ttft_s is not None
            and (st.prompt_class is None or r.prompt_class == st.prompt_class)
        ):
            ttft[(r.arm, r.concurrency)][r.cache].append(r.ttft_s)
    order = {a.label: i for i, a in enumerate(arms)}
    ttft_rows = [
        {
            "arm": arm,
            "concurrency": conc,
            "void": arm in void,
            "cold": spread(v["cold"]),
            "warm": spread(v["warm"]),
        }
        for (arm, conc), v in sorted(
            ttft.items(), key=lambda kv: (order.get(kv[0][0], 99), kv[0][1])
        )
    ]

    # Acceptance per K (pooled counters over every cell of the arm)
    acceptance = []
    for a in arms:
        if not a.k:
            continue
        own = [s for s in samples if s.arm == a.label]
        drafts = sum(s.drafts for s in own)
        if not drafts:
            acceptance.append(
                {
                    "arm": a.label,
                    "k": a.k,
                    "method": a.method,
                    "void": a.label in void,
                    "acceptance_length": None,
                    "acceptance_rate": None,
                    "per_position": [],
                }
            )
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
            {
                "arm": a.label,
                "k": a.k,
                "method": a.method,
                "void": a.label in void,
                "drafts": drafts,
                "draft_tokens": dtoks,
                "accepted": acc,
                "acceptance_length": length,
                "acceptance_rate": max(0.0, acc / dtoks) if dtoks else None,
                "per_position": per_pos,
            }
        )
        if length < BROKEN_HEAD_ACCEPT_LEN:
            warnings.append(
                f"{a.label}: acceptance length {length:.2f} ≈ 1 — draft head not "
                "accepting (broken MTP head or quantized-away layers?)"
            )

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
        "price_per_hr": price,
        "measured_from": meta.measured_from,
        "created_at": meta.created_at,
        "plan": meta.plan.model_dump(),
        "stamp": run.stamp,
        "hardware": hardware,
        "settings": asdict(st),
        "concurrency": concurrencies,
        "warnings": warnings,
        "arms": ctx.done["arms"],
        "cells": ctx.done["cells"],
        "speedup": ctx.done["speedup"],
        "crossover": ctx.done["crossover"],
        "knee": ctx.done["knee"],
        "best_k": best,
        "capacity": capacity,
        "cost": costs,
        "ttft_cache": ttft_rows,
        "acceptance": acceptance,
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
