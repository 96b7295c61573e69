"""Samples and per-cell summaries: the rows every report section reads (docs/results.md, "Analysis").

A *sample* is one (arm, concurrency, rep). With several prompt classes a rep's classes are pooled:
throughput = sum of tokens / sum of wall time; latency medians come from the rep's request rows
(or, without them, a request-weighted mean of the class cells' p50s); acceptance from summed
counters. Spread across reps is min/max and the inclusive quartiles (results/stats.py).
"""

from __future__ import annotations

import statistics
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, TypedDict, cast

from tailpod.results.io import Run
from tailpod.results.stats import spread, thin_percentile

LATENCY_METRICS = ("ttft_p50_s", "e2e_p50_s", "decode_tok_s_p50", "tpot_p50_s")
REQUEST_FIELD = {
    "ttft_p50_s": "ttft_s",
    "e2e_p50_s": "e2e_s",
    "decode_tok_s_p50": "decode_tok_s",
    "tpot_p50_s": "tpot_s",
}


@dataclass(frozen=True)
class AnalysisSettings:
    interpolation: Literal["log2", "linear"] = "log2"
    knee_throughput_gain: float = 0.10
    knee_latency_growth: float = 0.25
    knee_latency_metric: str = "e2e_p50_s"
    prompt_class: str | None = None  # None pools every class
    cache: str | None = "cold"  # cells of this prefix-cache state; None pools cold and warm



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
    void_metrics: dict[str, str] = field(default_factory=dict)  # metric -> why it is null


def effective_cache(run: Run, cache: str | None) -> str | None:
    """The cache state to analyse: the one asked for if the run has such cells, else all."""
    return cache if cache is not None and any(c.cache == cache for c in run.cells) else None


def build_samples(
    run: Run, prompt_class: str | None = None, cache: str | None = "cold"
) -> list[Sample]:
    cache = effective_cache(run, cache)
    groups: dict[tuple[str, int, int], list[Any]] = defaultdict(list)
    for cell in run.cells:
        if cell.arrival is not None:
            continue  # open-loop cells are the SLO section's (results/slo.py), not concurrency's
        if (prompt_class is None or cell.prompt_class == prompt_class) and (
            cache is None or cell.cache == cache
        ):
            groups[(cell.arm, cell.concurrency, cell.rep)].append(cell)
    req_groups: dict[tuple[str, int, int], list[Any]] = defaultdict(list)
    for req in run.requests:
        if (
            req.ok
            and req.scheduled_at is None
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
        void_metrics: dict[str, str] = {}
        for metric in LATENCY_METRICS:
            if len(cells) == 1:
                metrics[metric] = getattr(cells[0], metric)
                if metrics[metric] is None and metric in cells[0].void_fields:
                    void_metrics[metric] = cells[0].void_fields[metric]
                continue
            rows = req_groups.get(key, [])
            reqs = [getattr(r, REQUEST_FIELD[metric]) for r in rows]
            reqs = [v for v in reqs if v is not None]
            thin = thin_percentile(50, len(reqs))
            if reqs and thin is None:
                metrics[metric], pooled = statistics.median(reqs), "requests"
            elif reqs or any(REQUEST_FIELD[metric] in r.void_fields for r in rows):
                # request rows there are, too few of them stand: no median of a handful
                metrics[metric], pooled = None, "requests"
                void_metrics[metric] = (f"{len(reqs)} of {len(rows)} requests have one; "
                                        f"{(thin or '').split('; ')[-1]}")
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
            void_metrics=void_metrics,
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
        void_cell = next((c for c in cells if c.void), None)
        arm = run.meta.arm(key[0])
        if void_cell is not None and not (arm is not None and arm.is_void):
            # a void cell of an arm that stands (a deployment measured with a dead lane,
            # measure/deploy.py): none of its figures is quoted (a void arm is struck through)
            why = void_cell.void_reason or "cell marked void"
            sample.metrics = {m: None for m in sample.metrics}
            sample.void_metrics = {m: why for m in SUMMARY_METRICS}
        samples.append(sample)
    return samples



SUMMARY_METRICS = ("output_tok_s", *LATENCY_METRICS, "acceptance_length", "acceptance_rate")


Spread = dict[str, Any]  # stats.spread(): n, median, min, max, q1, q3, iqr, values


class CellSummary(TypedDict):
    """One (arm, concurrency): its reps' bookkeeping and the spread of every SUMMARY_METRICS."""

    arm: str
    concurrency: int
    reps: int
    requests: int
    failed: int
    flags: list[str]
    prompt_classes: list[str]
    latency_pooling: list[str]
    void_metrics: dict[str, str]  # a metric null in every rep, and why (evidence.py)
    output_tok_s: Spread | None
    ttft_p50_s: Spread | None
    e2e_p50_s: Spread | None
    decode_tok_s_p50: Spread | None
    tpot_p50_s: Spread | None
    acceptance_length: Spread | None
    acceptance_rate: Spread | None


class ThroughputCell(TypedDict):
    arm: str
    concurrency: int
    output_tok_s: Spread | None


def summarize(samples: Sequence[Sample]) -> list[CellSummary]:
    """Per (arm, concurrency): the spread of every metric across reps."""
    by_key: dict[tuple[str, int], list[Sample]] = defaultdict(list)
    for s in samples:
        by_key[(s.arm, s.concurrency)].append(s)
    out: list[dict[str, Any]] = []
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
        entry["void_metrics"] = {}
        for metric in SUMMARY_METRICS:
            entry[metric] = spread(s.metrics.get(metric) for s in group)
            why = next((s.void_metrics[metric] for s in group if metric in s.void_metrics), None)
            if entry[metric] is None and why is not None:
                entry["void_metrics"][metric] = why
        out.append(entry)
    return cast(list[CellSummary], out)  # every CellSummary key is set just above


def summarize_throughput(samples: Sequence[Sample]) -> list[ThroughputCell]:
    return [
        {"arm": c["arm"], "concurrency": c["concurrency"], "output_tok_s": c["output_tok_s"]}
        for c in summarize(samples)
    ]

