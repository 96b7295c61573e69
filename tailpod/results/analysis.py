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

from dataclasses import asdict, dataclass
from functools import cache
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError, create_model

from tailpod.errors import TailpodError
from tailpod.results.hardware import recorded_or_computed
from tailpod.results.io import STAMP, Run, validation_summary
from tailpod.results.samples import (
    LATENCY_METRICS,
    REQUEST_FIELD,
    SUMMARY_METRICS,
    AnalysisSettings,
    CellSummary,
    Sample,
    build_samples,
    effective_cache,
    summarize,
    summarize_throughput,
)
from tailpod.results.section import Context
from tailpod.results.sections import registered
from tailpod.results.sections.best_k import best_k
from tailpod.results.sections.bytes_model import bytes_model, checkpoint_bytes
from tailpod.results.sections.capacity import capacity_drop, capacity_of
from tailpod.results.sections.crossover import find_crossover
from tailpod.results.sections.knee import find_knee
from tailpod.results.sections.unit_cost import cost_per_tokens
from tailpod.results.startup_facts import GIB_TO_GB, cache_facts, weights_gb
from tailpod.results.stats import ratio_spread, spread

# The names callers and tests import from here; each is defined in the module named above.
__all__ = [
    "ANALYSIS_VERSION", "GIB_TO_GB", "LATENCY_METRICS", "REQUEST_FIELD", "SUMMARY_METRICS",
    "AnalysisHeader", "AnalysisSettings", "CellSummary", "ReportValues", "Sample", "analysis_model",
    "analyze", "check_analysis",
    "analyze_for_report", "best_k", "build_samples",
    "bytes_model", "cache_facts", "capacity_drop", "capacity_of", "checkpoint_bytes",
    "cost_per_tokens", "effective_cache", "find_crossover", "find_knee", "ratio_spread", "spread",
    "summarize", "summarize_throughput", "weights_gb",
]  # fmt: skip

ANALYSIS_VERSION = 1


class AnalysisHeader(BaseModel):
    """The run's own fields at the head of an analysis (`tailpod report --json`); the model of
    the whole document adds one key per analysed section (`analysis_model`)."""

    model_config = ConfigDict(extra="forbid")
    analysis_version: int
    schema_version: int
    run_id: str
    run_dir: str | None
    model: str
    engine: str
    engine_version: str | None
    image_digest: str | None
    image_ref: str | None
    provider: str
    gpu: str | None
    gpu_count: int | None
    price_per_hr: float | None
    measured_from: str
    created_at: str | None
    plan: dict[str, Any]
    stamp: str | None
    hardware: dict[str, Any]
    provider_facts: dict[str, Any] | None
    cold_start: dict[str, Any] | None
    settings: dict[str, Any]
    concurrency: list[int]
    warnings: list[str]


def analysis_model() -> type[BaseModel]:
    """The analysis document: the header, then each section in the analysis by its key (the
    registry is results/sections/, read each time: a section module added is a key declared);
    any other key is refused."""
    return _model_with(tuple(s.key for s in registered() if s.in_analysis))


@cache
def _model_with(section_keys: tuple[str, ...]) -> type[BaseModel]:
    sections: dict[str, Any] = {key: (Any, None) for key in section_keys}
    model: type[BaseModel] = create_model("Analysis", __base__=AnalysisHeader, **sections)
    return model


def check_analysis(doc: dict[str, Any]) -> dict[str, Any]:
    """`doc` checked against the analysis model: a key no section or header field declares (a
    misspelling) is a bug, said in one line."""
    try:
        analysis_model().model_validate(doc)
    except ValidationError as exc:
        raise TailpodError("the analysis does not fit its model: "
                           f"{validation_summary(exc, 'the analysis')}") from None
    return doc


def _stamp_all(obj: Any) -> Any:
    if isinstance(obj, dict):
        return {k: _stamp_all(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [(_stamp_all(v) | {"stamp": STAMP}) if isinstance(v, dict) else v for v in obj]
    return obj


@dataclass(frozen=True)
class ReportValues:
    """What report.md renders: the analysis, and the values of the report-only sections (those
    whose `in_analysis` is False, results/section.py) by key."""

    analysis: dict[str, Any]
    report_only: dict[str, Any]


def analyze(run: Run, settings: AnalysisSettings | None = None) -> dict[str, Any]:
    """Everything the report shows, as a JSON-ready dict (see docs/results.md for the keys): the
    run's own fields, then one key per report section (results/sections/), in section rank."""
    return _analyze(run, settings, with_report_only=False).analysis


def analyze_for_report(run: Run, settings: AnalysisSettings | None = None) -> ReportValues:
    """The analysis, and after it the report-only sections computed over it."""
    return _analyze(run, settings, with_report_only=True)


def _analyze(run: Run, settings: AnalysisSettings | None, with_report_only: bool) -> ReportValues:
    st = settings or AnalysisSettings()
    meta = run.meta
    ctx = Context.of(run, st)
    report_only: dict[str, Any] = {}
    for section in registered():
        if not section.in_analysis:
            if with_report_only:
                report_only[section.key] = section.compute(ctx)
            continue
        value = section.compute(ctx)
        if value is not None or not section.omit_none:
            ctx.done[section.key] = value
    # The claimed GPU against the pod's own facts: a mismatch or an emulated provider is said next
    # to every number (report header, warnings, plots).
    hardware = recorded_or_computed(meta.pod.model_dump())
    if hardware.get("stamp"):
        ctx.warnings.append(str(hardware["stamp"]))
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
        "provider_facts": meta.provider_facts,
        "cold_start": meta.cold_start,
        "settings": asdict(st),
        "concurrency": ctx.concurrencies,
        "warnings": ctx.warnings,
        **ctx.done,
    }
    check_analysis(result)
    return ReportValues(_stamp_all(result) if run.off_pod else result, report_only)
