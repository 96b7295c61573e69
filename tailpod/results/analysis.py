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
import re
import statistics
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

from tailpod.results.fingerprint import BROKEN_HEAD_ACCEPT_LEN
from tailpod.results.hardware import recorded_or_computed
from tailpod.results.io import STAMP, Run
from tailpod.results.schema import ArmRecord
from tailpod.results.stats import ratio_spread, spread, usd_per_mtok

ANALYSIS_VERSION = 1
LATENCY_METRICS = ("ttft_p50_s", "e2e_p50_s", "decode_tok_s_p50", "tpot_p50_s")
REQUEST_FIELD = {
    "ttft_p50_s": "ttft_s",
    "e2e_p50_s": "e2e_s",
    "decode_tok_s_p50": "decode_tok_s",
    "tpot_p50_s": "tpot_s",
}
GIB_TO_GB = 1.073741824


@dataclass(frozen=True)
class AnalysisSettings:
    interpolation: Literal["log2", "linear"] = "log2"
    knee_throughput_gain: float = 0.10
    knee_latency_growth: float = 0.25
    knee_latency_metric: str = "e2e_p50_s"
    prompt_class: str | None = None  # None pools every class
    cache: str | None = "cold"  # cells of this prefix-cache state; None pools cold and warm


# --- small statistics ----------------------------------------------------------------------------


# --- samples -------------------------------------------------------------------------------------


@dataclass
class Sample:
    arm: str
    concurrency: int
    rep: int
    metrics: dict[str, float | None]
    requests: int = 0
    failed: int = 0
    drafts: int = 0
    draft_tokens: int = 0
    accepted: int = 0
    per_position_weighted: list[float] = field(default_factory=list)
    flags: set[str] = field(default_factory=set)
    prompt_classes: set[str] = field(default_factory=set)
    pooled_latency: str = "cell"  # "cell", "requests" or "weighted_mean"


def effective_cache(run: Run, cache: str | None) -> str | None:
    """The cache state to analyse: the one asked for if the run has such cells, else all."""
    return cache if cache is not None and any(c.cache == cache for c in run.cells) else None


def build_samples(
    run: Run, prompt_class: str | None = None, cache: str | None = "cold"
) -> list[Sample]:
    cache = effective_cache(run, cache)
    groups: dict[tuple[str, int, int], list[Any]] = defaultdict(list)
    for cell in run.cells:
        if getattr(cell, "arrival", None) is not None:
            continue  # open-loop cells are the SLO section's (results/slo.py), not concurrency's
        if (prompt_class is None or cell.prompt_class == prompt_class) and (
            cache is None or cell.cache == cache
        ):
            groups[(cell.arm, cell.concurrency, cell.rep)].append(cell)
    req_groups: dict[tuple[str, int, int], list[Any]] = defaultdict(list)
    for req in run.requests:
        if (
            req.ok
            and getattr(req, "scheduled_at", None) is None
            and (prompt_class is None or req.prompt_class == prompt_class)
            and (cache is None or req.cache == cache)
        ):
            req_groups[(req.arm, req.concurrency, req.rep)].append(req)

    samples = []
    for key in sorted(groups):
        cells = groups[key]
        wall = sum(c.wall_s for c in cells)
        tokens = sum(c.output_tokens for c in cells)
        # One cell: the writer's own output_tok_s (= output_tokens / wall_s by definition).
        # Several prompt classes: pool by time, sum of tokens over sum of wall time.
        pooled_tput = tokens / wall if wall > 0 else None
        metrics: dict[str, float | None] = {
            "output_tok_s": cells[0].output_tok_s if len(cells) == 1 else pooled_tput,
        }
        pooled = "cell"
        for metric in LATENCY_METRICS:
            if len(cells) == 1:
                metrics[metric] = getattr(cells[0], metric)
                continue
            reqs = [getattr(r, REQUEST_FIELD[metric]) for r in req_groups.get(key, [])]
            reqs = [v for v in reqs if v is not None]
            if reqs:
                metrics[metric], pooled = statistics.median(reqs), "requests"
            else:
                pairs = [(getattr(c, metric), c.requests - c.failed) for c in cells]
                pairs = [(v, w) for v, w in pairs if v is not None and w > 0]
                weight = sum(w for _, w in pairs)
                metrics[metric] = sum(v * w for v, w in pairs) / weight if weight else None
                pooled = "weighted_mean"
        sample = Sample(
            arm=key[0],
            concurrency=key[1],
            rep=key[2],
            metrics=metrics,
            requests=sum(c.requests for c in cells),
            failed=sum(c.failed for c in cells),
            flags={f for c in cells for f in c.flags}
            | ({"client_bound"} if any(c.client_bound for c in cells) else set()),
            prompt_classes={c.prompt_class for c in cells},
            pooled_latency=pooled,
        )
        for c in cells:
            acc = c.acceptance
            if acc is None or acc.drafts <= 0:
                continue
            sample.drafts += acc.drafts
            sample.draft_tokens += acc.draft_tokens
            sample.accepted += acc.accepted
            pos = [p * acc.drafts for p in acc.per_position]
            width = max(len(pos), len(sample.per_position_weighted))
            sample.per_position_weighted = [
                (sample.per_position_weighted[i] if i < len(sample.per_position_weighted) else 0)
                + (pos[i] if i < len(pos) else 0)
                for i in range(width)
            ]
        sample.metrics["acceptance_length"] = (
            max(1.0, 1 + sample.accepted / sample.drafts) if sample.drafts else None
        )
        sample.metrics["acceptance_rate"] = (
            max(0.0, sample.accepted / sample.draft_tokens) if sample.draft_tokens else None
        )
        samples.append(sample)
    return samples


SUMMARY_METRICS = ("output_tok_s", *LATENCY_METRICS, "acceptance_length", "acceptance_rate")


def summarize(samples: Sequence[Sample]) -> list[dict[str, Any]]:
    """Per (arm, concurrency): the spread of every metric across reps."""
    by_key: dict[tuple[str, int], list[Sample]] = defaultdict(list)
    for s in samples:
        by_key[(s.arm, s.concurrency)].append(s)
    out = []
    for (arm, conc), group in by_key.items():
        entry: dict[str, Any] = {
            "arm": arm,
            "concurrency": conc,
            "reps": len(group),
            "requests": sum(s.requests for s in group),
            "failed": sum(s.failed for s in group),
            "flags": sorted({f for s in group for f in s.flags}),
            "prompt_classes": sorted({p for s in group for p in s.prompt_classes}),
            "latency_pooling": sorted({s.pooled_latency for s in group}),
        }
        for metric in SUMMARY_METRICS:
            entry[metric] = spread(s.metrics.get(metric) for s in group)
        out.append(entry)
    return out


# --- crossover, knee, best K ---------------------------------------------------------------------


def _interp(c_lo: float, c_hi: float, t: float, how: str) -> float:
    if how == "log2":
        x = math.log2(c_lo) + t * (math.log2(c_hi) - math.log2(c_lo))
        return float(2**x)
    return c_lo + t * (c_hi - c_lo)


def find_crossover(points: Sequence[dict[str, Any]], interpolation: str = "log2") -> dict[str, Any]:
    """Where plain overtakes a spec arm. `points`: {concurrency, speedup, overlap} per measured c.

    Status: "crossover" | "uncertain" (spreads overlap at a bracketing point) | "none_in_range"
    (spec ahead everywhere) | "below_range" (plain already level or ahead at the lowest c) |
    "no_data".
    """
    pts = sorted(
        (p for p in points if p.get("speedup") is not None), key=lambda p: p["concurrency"]
    )
    base: dict[str, Any] = {"interpolation": interpolation, "concurrency": None, "bracket": None}
    if not pts:
        return base | {"status": "no_data", "detail": "no measured speedup"}
    if pts[0]["speedup"] <= 1:
        tie = " (tie)" if pts[0]["speedup"] == 1 else ""
        return base | {
            "status": "below_range",
            "detail": "plain is level or ahead already at the lowest measured "
            f"c={pts[0]['concurrency']}{tie}",
        }
    for i in range(len(pts) - 1):
        lo, hi = pts[i], pts[i + 1]
        if lo["speedup"] > 1 >= hi["speedup"]:
            t = (lo["speedup"] - 1) / (lo["speedup"] - hi["speedup"])
            at = _interp(lo["concurrency"], hi["concurrency"], t, interpolation)
            uncertain = bool(lo.get("overlap") or hi.get("overlap"))
            later = [p["concurrency"] for p in pts[i + 2 :] if p["speedup"] > 1]
            detail = (
                f"plain overtakes between c={lo['concurrency']} (speedup {lo['speedup']:.3f}) and "
                f"c={hi['concurrency']} (speedup {hi['speedup']:.3f}); "
                f"≈ c={at:.2f} ({interpolation})"
            )
            if uncertain:
                detail += (
                    "; rep spreads overlap at a bracketing point, so the crossing is within noise"
                )
            if later:
                detail += f"; speedup rises above 1 again at c={later}"
            return base | {
                "status": "uncertain" if uncertain else "crossover",
                "concurrency": at,
                "bracket": [lo["concurrency"], hi["concurrency"]],
                "recrossings": later,
                "detail": detail,
            }
    return base | {
        "status": "none_in_range",
        "detail": f"spec ahead at every measured concurrency up to c={pts[-1]['concurrency']}",
    }


def find_knee(
    points: Sequence[dict[str, Any]],
    throughput_gain: float = 0.10,
    latency_growth: float = 0.25,
) -> dict[str, Any]:
    """First c after which throughput grows < throughput_gain per step while latency grows more
    than latency_growth. `points`: {concurrency, throughput, latency} per measured c."""
    pts = sorted(
        (p for p in points if p.get("throughput") and p.get("latency")),
        key=lambda p: p["concurrency"],
    )
    thresholds = {"throughput_gain": throughput_gain, "latency_growth": latency_growth}
    if len(pts) < 2:
        return {
            "status": "no_data",
            "concurrency": None,
            "thresholds": thresholds,
            "steps": [],
            "detail": "fewer than two measured concurrencies",
        }
    steps = []
    for a, b in zip(pts, pts[1:], strict=False):
        gain = b["throughput"] / a["throughput"] - 1
        growth = b["latency"] / a["latency"] - 1
        steps.append(
            {
                "from": a["concurrency"],
                "to": b["concurrency"],
                "throughput_gain": gain,
                "latency_growth": growth,
                "saturated": gain < throughput_gain and growth > latency_growth,
            }
        )
    for i, step in enumerate(steps):
        if step["saturated"]:
            sustained = all(s["saturated"] for s in steps[i:])
            knee = pts[i]
            detail = (
                f"throughput {knee['throughput']:.1f} tok/s at c={knee['concurrency']}; next step "
                f"{step['throughput_gain'] * 100:+.1f}% throughput, "
                f"{step['latency_growth'] * 100:+.1f}% p50 latency"
            )
            if not sustained:
                detail += "; not sustained over every later step"
            return {
                "status": "knee",
                "concurrency": knee["concurrency"],
                "throughput": knee["throughput"],
                "latency": knee["latency"],
                "sustained": sustained,
                "thresholds": thresholds,
                "steps": steps,
                "detail": detail,
            }
    return {
        "status": "none_in_range",
        "concurrency": None,
        "thresholds": thresholds,
        "steps": steps,
        "detail": "throughput still growing (or latency flat) at every step",
    }


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


def _num(value: Any) -> float | None:
    if value is None or isinstance(value, bool):
        return None
    try:
        return float(str(value).replace(",", ""))
    except ValueError:
        return None


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


_CACHE_FACT = re.compile(r"(kv|cache|state|mamba|ssm|conv).*_(gb|gib)$")


def weights_gb(facts: dict[str, Any]) -> float | None:
    """Target weight size from startup facts, in GB (vLLM reports GiB)."""
    if _num(facts.get("weights_gb")) is not None:
        return _num(facts.get("weights_gb"))
    gib = _num(facts.get("weights_gib"))
    return gib * GIB_TO_GB if gib is not None else None


def cache_facts(facts: dict[str, Any]) -> dict[str, float]:
    """Startup facts that size KV or state caches (traffic a weight format does not touch)."""
    out = {}
    for key, value in facts.items():
        num = _num(value)
        if num is not None and _CACHE_FACT.search(key) and "weight" not in key:
            out[key] = num
    return out


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


def _arm_info(run: Run) -> list[ArmRecord]:
    arms = list(run.meta.arms)
    known = {a.label for a in arms}
    for label in dict.fromkeys(c.arm for c in run.cells):
        if label not in known:
            arms.append(ArmRecord(label=label))
            known.add(label)
    return arms


def _void_reasons(run: Run, arms: Sequence[ArmRecord]) -> dict[str, str]:
    reasons = {a.label: a.void_text() for a in arms if a.is_void}
    for cell in run.cells:
        if (cell.void or "void" in cell.flags) and cell.arm not in reasons:
            reasons[cell.arm] = "cell marked void by the sweep"
    return reasons


def _baseline_for(
    arm: ArmRecord, arms: Sequence[ArmRecord], void: dict[str, str]
) -> ArmRecord | None:
    plain = [a for a in arms if a.k == 0]
    same = [a for a in plain if a.checkpoint == arm.checkpoint] or plain
    same.sort(key=lambda a: (a.label in void, a.label != "plain"))
    return same[0] if same else None


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
    arms = _arm_info(run)
    void = _void_reasons(run, arms)
    samples = build_samples(run, st.prompt_class, st.cache)
    cells = summarize(samples)
    cell_at = {(c["arm"], c["concurrency"]): c for c in cells}
    concurrencies = sorted({c["concurrency"] for c in cells})
    warnings = list(run.load_warnings)
    if st.cache is not None and effective_cache(run, st.cache) is None and run.cells:
        warnings.append(f"no {st.cache}-cache cells: throughput pools every cache state")
    if st.cache is not None and any(c.cache != st.cache for c in run.cells):
        warnings.append(f"throughput tables use {st.cache}-cache cells only")
    if run.off_pod:
        warnings.append(f"measured off-pod: {STAMP}")
    if run.migrated_from is not None:
        warnings.append(f"read from schema v{run.migrated_from} (migrated in memory)")

    arm_rows = []
    for a in arms:
        base = _baseline_for(a, arms, void) if a.k else None
        arm_rows.append(
            {
                "label": a.label,
                "k": a.k,
                "method": a.method,
                "checkpoint": a.checkpoint,
                "void": a.label in void,
                "void_reason": void.get(a.label),
                "unverified": a.unverified_text,
                "gate": a.gate.model_dump() if a.gate else None,
                "baseline": base.label if base else None,
                "restart_s": a.restart_s,
                "argv": a.argv,
                "weights_gb": weights_gb(a.facts),
                "cache_facts": cache_facts(a.facts),
            }
        )
        if a.label not in {c["arm"] for c in cells}:
            warnings.append(f"arm {a.label}: no cell rows")
        if a.unverified_text:
            warnings.append(f"arm {a.label}: speedup UNVERIFIED ({a.unverified_text})")

    for c in cells:
        if c["failed"]:
            warnings.append(f"{c['arm']} c={c['concurrency']}: {c['failed']} failed requests")
        if "client_bound" in c["flags"]:
            warnings.append(f"{c['arm']} c={c['concurrency']}: client-bound, throughput is a floor")

    # Speedups and crossovers
    speedups: list[dict[str, Any]] = []
    crossovers: list[dict[str, Any]] = []
    for a in arms:
        if a.k == 0:
            continue
        base = _baseline_for(a, arms, void)
        if a.label in void:
            crossovers.append(
                {
                    "arm": a.label,
                    "status": "void",
                    "concurrency": None,
                    "detail": f"VOID: {void[a.label]}",
                }
            )
        elif base is None or base.label in void:
            crossovers.append(
                {
                    "arm": a.label,
                    "status": "no_baseline",
                    "concurrency": None,
                    "detail": "no usable plain arm",
                }
            )
        points = []
        for conc in concurrencies:
            spec_cell = cell_at.get((a.label, conc))
            base_cell = cell_at.get((base.label, conc)) if base else None
            if spec_cell is None:
                continue
            entry: dict[str, Any] = {
                "arm": a.label,
                "baseline": base.label if base else None,
                "concurrency": conc,
                "unverified": a.unverified_text,
            }
            if a.label in void:
                entry |= {
                    "void": True,
                    "reason": f"VOID: {void[a.label]}",
                    "throughput": None,
                    "decode": None,
                }
            elif base is None or base_cell is None or base.label in void:
                entry |= {
                    "void": False,
                    "reason": "no plain measurement at this concurrency",
                    "throughput": None,
                    "decode": None,
                }
            else:
                entry |= {
                    "void": False,
                    "reason": None,
                    "throughput": ratio_spread(
                        spec_cell["output_tok_s"], base_cell["output_tok_s"]
                    ),
                    "decode": ratio_spread(
                        spec_cell["decode_tok_s_p50"], base_cell["decode_tok_s_p50"]
                    ),
                }
                if entry["throughput"]:
                    points.append({"concurrency": conc, **entry["throughput"]})
            speedups.append(entry)
        if a.label not in void and base is not None and base.label not in void:
            crossovers.append(
                {"arm": a.label, "baseline": base.label, **find_crossover(points, st.interpolation)}
            )

    # Knees
    knees = []
    for a in arms:
        pts = []
        for conc in concurrencies:
            at = cell_at.get((a.label, conc))
            if at and at["output_tok_s"] and at[st.knee_latency_metric]:
                pts.append(
                    {
                        "concurrency": conc,
                        "throughput": at["output_tok_s"]["median"],
                        "latency": at[st.knee_latency_metric]["median"],
                    }
                )
        knee = find_knee(pts, st.knee_throughput_gain, st.knee_latency_growth)
        knees.append(
            {
                "arm": a.label,
                "void": a.label in void,
                "latency_metric": st.knee_latency_metric,
                **knee,
            }
        )

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
        base = _baseline_for(a, arms, void) if a.k else None
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
        "provider_facts": meta.provider_facts,
        "settings": asdict(st),
        "concurrency": concurrencies,
        "warnings": warnings,
        "arms": arm_rows,
        "cells": cells,
        "speedup": speedups,
        "crossover": crossovers,
        "knee": knees,
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


def summarize_throughput(samples: Sequence[Sample]) -> list[dict[str, Any]]:
    return [
        {"arm": c["arm"], "concurrency": c["concurrency"], "output_tok_s": c["output_tok_s"]}
        for c in summarize(samples)
    ]


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
