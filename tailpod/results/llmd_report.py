"""`tailpod export --format llmd-report`: a run as llm-d's benchmark report v0.2.1 (the format of
llm-d/llm-d-benchmark, llmdbenchmark/analysis/benchmark_report/br_v0_2_1_json_schema.json; kept
with its source in tests/fixtures/llmd-benchmark-report/). One report per arm and load point
(a concurrency, an offered rate, the replayed trace) and cache, each a whole file: the format
describes one stack under one load. docs/results.md ("llm-d's benchmark report") lists what goes
where and what the format has no place for.

Numbers come from the rows as read (io.load_run, thin evidence already void): request latencies
and lengths are statistics over every successful request of the point's reps, pooled; throughput
statistics are over its reps. A percentile the evidence rules call thin (stats.thin_percentile)
is left out, never quoted."""

from __future__ import annotations

import hashlib
import json
import math
import os
import re
import statistics
import tempfile
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from tailpod import __version__
from tailpod.agent.probes.arrival import SESSION_FORMATS
from tailpod.agent.probes.metrics import percentile
from tailpod.results.analysis import analyze
from tailpod.results.io import STAMP, Run
from tailpod.results.markdown import scrub_argv
from tailpod.results.schema import CellRow, RequestRow
from tailpod.results.stats import thin_percentile
from tailpod.secrets import redact

LLMD_REPORT_VERSION = "0.2.1"
LLMD_DIR = "llmd-report"  # the default output folder, in the run directory
_PERCENTILES = (50, 90, 99)


def stats(values: Sequence[float | None], units: str) -> dict[str, Any] | None:
    """The format's Statistics of `values`: mean, min, max, the sample standard deviation (two
    values or more) and p50/p90/p99 where there are enough values for each; None when empty."""
    xs = [float(v) for v in values if v is not None and math.isfinite(v)]
    if not xs:
        return None
    out: dict[str, Any] = {"units": units, "mean": statistics.fmean(xs), "min": min(xs),
                           "max": max(xs)}
    if len(xs) > 1:
        out["stddev"] = statistics.stdev(xs)
    for q in _PERCENTILES:
        if thin_percentile(q, len(xs)) is None:
            out[f"p{q}"] = percentile(xs, q)
    return out


def _arrival(c: CellRow) -> dict[str, Any] | None:
    return c.arrival


def load_of(c: CellRow) -> tuple[str, float | None]:
    """("concurrency", c), ("rate", req/s) or ("trace", None): the cell's load point."""
    a = _arrival(c)
    if a is None:
        return "concurrency", float(c.concurrency)
    if a.get("process") == "trace":
        return "trace", None
    try:
        return "rate", float(a["rate"])  # "inf": every request at once
    except (KeyError, TypeError, ValueError):
        return "rate", None


def _load_name(load: tuple[str, float | None]) -> str:
    kind, value = load
    return kind if value is None else f"{kind}-{value:g}"


def _omit_none(d: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in d.items() if v is not None}


def _per_rep(cells: Sequence[CellRow], reqs: Sequence[RequestRow]) -> dict[str, list[float]]:
    """Each rep's output tok/s, request rate and input tok/s (its prompt classes pooled: sums of
    tokens and requests over the sum of wall time)."""
    by_rep: dict[int, list[CellRow]] = defaultdict(list)
    for c in cells:
        by_rep[c.rep].append(c)
    prompt_by_rep: dict[int, list[int | None]] = defaultdict(list)
    for r in reqs:
        prompt_by_rep[r.rep].append(r.prompt_tokens)
    out: dict[str, list[float]] = {"output": [], "requests": [], "input": []}
    for rep, mine in sorted(by_rep.items()):
        wall = sum(c.wall_s for c in mine)
        if wall <= 0:
            continue
        out["output"].append(sum(c.output_tokens for c in mine) / wall)
        out["requests"].append(sum(c.requests - c.failed for c in mine) / wall)
        prompts = prompt_by_rep.get(rep) or []
        if prompts and all(p is not None for p in prompts):
            out["input"].append(sum(p for p in prompts if p is not None) / wall)
    return out


def _stamps(an: dict[str, Any]) -> list[str]:
    out = [f"{STAMP}: measured off-pod (numbers include the network and client path)"] \
        if an.get("stamp") else []
    if (an.get("hardware") or {}).get("stamp"):
        out.append(str(an["hardware"]["stamp"]))
    return out


def _analysis_at(an: dict[str, Any], key: str, arm: str, conc: float | None) -> dict[str, Any]:
    return next((e for e in an.get(key) or [] if e.get("arm") == arm
                 and conc is not None and e.get("concurrency") == conc), {})


def _report(run: Run, an: dict[str, Any], arm: str, load: tuple[str, float | None], cache: str,
            cells: list[CellRow], reqs: list[RequestRow]) -> dict[str, Any]:
    meta = run.meta
    rec = meta.arm(arm)
    engine_config = rec.engine_config if rec else {}
    ok = [r for r in reqs if r.ok]
    kind, value = load
    conc = value if kind == "concurrency" else None
    stamps = _stamps(an)
    void = rec.void_reason or "void" if rec and rec.void else None
    arm_an: dict[str, Any] = next((a for a in an["arms"] if a["label"] == arm), {})
    cell_an = _analysis_at(an, "cells", arm, conc)
    cost = _analysis_at(an, "cost", arm, conc)
    void_fields: dict[str, str] = {}
    for row in (*cells, *reqs):
        void_fields |= row.void_fields
    keywords = ["tailpod", arm, f"{kind}" if value is None else f"{kind}={value:g}", cache]
    keywords += ["VOID"] if void else []
    keywords += ["off-pod"] if an.get("stamp") else []
    keywords += [str((an.get("hardware") or {}).get("verdict"))] \
        if (an.get("hardware") or {}).get("stamp") else []
    tailpod_facts = _omit_none({
        "run_id": meta.run_id, "arm": arm, "spec": rec.spec if rec else None,
        "gate": rec.gate.model_dump() if rec and rec.gate else None,
        "void": void, "unverified": rec.unverified if rec else None,
        "stamps": stamps, "measured_from": meta.measured_from,
        "hardware_verdict": (an.get("hardware") or {}).get("verdict"),
        "price_per_hr": meta.pod.price_per_hr, "provider": meta.provider,
        "usd_per_1m_output_tokens": cost.get("usd_per_1m"),
        "acceptance_length": (cell_an.get("acceptance_length") or {}).get("median"),
        "acceptance_rate": (cell_an.get("acceptance_rate") or {}).get("median"),
        "reps": len({c.rep for c in cells}), "prompt_classes": sorted({c.prompt_class
                                                                       for c in cells}),
        "void_fields": void_fields or None, "arm_checkpoint": arm_an.get("checkpoint"),
    })
    cfg = json.dumps(engine_config, sort_keys=True, default=str).encode()
    engine = {
        "metadata": {"label": f"{meta.engine.name}-{arm}",
                     "cfg_id": hashlib.sha256(cfg).hexdigest()[:16],
                     "description": f"{meta.engine.name} serving arm {arm} of tailpod run "
                                    f"{meta.run_id}"},
        "standardized": {
            "kind": "inference_engine", "tool": meta.engine.name,
            "tool_version": meta.engine.version or "unknown", "role": "replica", "replicas": 1,
            "model": {"name": str(engine_config.get("model") or meta.model)},
            "accelerator": {"model": meta.pod.gpu or "none (CPU)",
                            "count": int(meta.pod.gpu_count or 0),
                            "parallelism": _parallelism(engine_config)},
        },
        "native": {"args": {"argv": scrub_argv(rec.argv) if rec else []},
                   "config": {"engine_config": engine_config, "tailpod": tailpod_facts}},
    }
    prompts = [r.prompt_tokens for r in ok if r.prompt_tokens is not None]
    outputs = [r.completion_tokens for r in ok if r.completion_tokens is not None]
    scenario: dict[str, Any] = {"stack": [engine]}
    if prompts:  # the format needs the input length; without request rows it is not known
        scenario["load"] = {
            "metadata": {"schema_version": "0.0.1",
                         "description": _load_description(kind, cache, cells,
                                                          tailpod_facts["prompt_classes"])},
            "standardized": _omit_none({
                "tool": "tailpod", "tool_version": __version__, "source": "unknown",
                "input_seq_len": _seq(prompts),
                "output_seq_len": _seq(outputs) if outputs else None,
                "concurrency": int(value) if kind == "concurrency" and value else None,
                "rate_qps": value if kind == "rate" and value and math.isfinite(value) else None,
            }),
            "native": {"config": {"plan": _plan_as_run(meta.plan.model_dump(), kind, reqs)}},
        }
    per_rep = _per_rep(cells, reqs)
    return {
        "version": LLMD_REPORT_VERSION,
        "run": _omit_none({
            "uid": f"{meta.run_id}/{arm}/{_load_name(load)}/{cache}", "eid": meta.run_id,
            "time": {"start": meta.created_at, "end": meta.finished_at},
            "description": " · ".join([f"tailpod {meta.run_id}: {arm} at {_load_name(load)} "
                                       f"({cache} cache) on {meta.provider} "
                                       f"{meta.pod.gpu or 'no GPU'}",
                                       *(f"VOID: {void}" for _ in [0] if void), *stamps]),
            "keywords": keywords,
        }),
        "scenario": scenario,
        "results": {"request_performance": {"aggregate": {
            "requests": _omit_none({
                "total": sum(c.requests for c in cells),
                "failures": sum(c.failed for c in cells),
                "input_length": stats(prompts, "count"),
                "output_length": stats(outputs, "count"),
            }),
            "latency": _omit_none({
                "time_to_first_token": stats([r.ttft_s for r in ok], "s"),
                "time_per_output_token": stats([r.tpot_s for r in ok], "s/token"),
                "request_latency": stats([r.e2e_s for r in ok], "s"),
            }) or None,
            "throughput": _omit_none({
                "output_token_rate": stats(per_rep["output"], "tokens/s"),
                "input_token_rate": stats(per_rep["input"], "tokens/s"),
                "request_rate": stats(per_rep["requests"], "queries/s"),
            }) or None,
        }}},
    }


def _session_format(cells: Sequence[CellRow]) -> str | None:
    """The session trace format the cells replayed (`session`, `aiperf-multi-turn`), else None."""
    for c in cells:
        fmt = ((c.arrival or {}).get("trace") or {}).get("format")
        if fmt in SESSION_FORMATS:
            return str(fmt)
    return None


def _load_description(kind: str, cache: str, cells: Sequence[CellRow],
                      classes: Sequence[str]) -> str:
    """What load the cells ran: a session replay named as one (its turns are built from the
    prompt classes), any other load by its kind."""
    fmt = _session_format(cells) if kind == "trace" else None
    if fmt is not None:
        return (f"tailpod session trace replay (format {fmt}), {cache} prefix cache, turns "
                f"built from prompt classes {', '.join(classes)}")
    return f"tailpod {kind} load, {cache} prefix cache, prompt classes {', '.join(classes)}"


def _peak_in_flight(reqs: Sequence[RequestRow]) -> int | None:
    """The most requests in flight at once (from each request's start and end-to-end time)."""
    edges = sorted((t, step) for r in reqs if r.t_start is not None and r.e2e_s is not None
                   for t, step in ((r.t_start, 1), (r.t_start + r.e2e_s, -1)))
    if not edges:
        return None
    peak = now = 0
    for _t, step in edges:  # an end sorts before a start at the same instant
        now += step
        peak = max(peak, now)
    return peak


def _plan_as_run(plan: dict[str, Any], kind: str, reqs: Sequence[RequestRow]) -> dict[str, Any]:
    """The run's plan, with a trace replay's concurrency the one it ran: a trace sets its own
    arrivals, so the sweep's concurrency list was never used by it."""
    if kind != "trace":
        return plan
    peak = _peak_in_flight(reqs)
    return {**plan, "concurrency": [peak] if peak is not None else [],
            "concurrency_source": "most requests in flight during the replay"}


def _parallelism(engine_config: dict[str, Any]) -> dict[str, int]:
    """The tensor parallelism the arm's engine config asked for; nothing it did not say."""
    tp = engine_config.get("tensor_parallel")
    return {"tp": tp} if isinstance(tp, int) and tp >= 1 else {}


def _seq(values: Sequence[int]) -> dict[str, Any]:
    """A SequenceLength: fixed when every value is the same, else `other` with its spread."""
    lo, hi = min(values), max(values)
    out: dict[str, Any] = {"distribution": "fixed" if lo == hi else "other",
                           "value": statistics.fmean(values), "min": lo, "max": max(hi, 1)}
    if len(values) > 1:
        out["std_dev"] = statistics.stdev(values)
    return out


def llmd_reports(run: Run) -> dict[str, dict[str, Any]]:
    """{file name: report} for every (arm, load point, cache) of the run with a cell row."""
    an = analyze(run)
    groups: dict[tuple[str, tuple[str, float | None], str], list[CellRow]] = defaultdict(list)
    for c in run.cells:
        groups[(c.arm, load_of(c), c.cache)].append(c)
    out = {}
    order = sorted(groups, key=lambda g: (g[0], g[1][0], g[1][1] if g[1][1] is not None else 0.0,
                                          g[2]))
    for arm, load, cache in order:
        cells = groups[(arm, load, cache)]
        ids = {c.cell for c in cells}
        reqs = [r for r in run.requests if r.cell in ids and r.cache == cache]
        name = re.sub(r"[^A-Za-z0-9._-]+", "_", f"{arm}_{_load_name(load)}_{cache}") + ".json"
        out[name] = _report(run, an, arm, load, cache, cells, reqs)
    return out


def write_llmd_reports(run: Run, out_dir: str | os.PathLike[str]) -> Path:
    """Each report as a JSON file in `out_dir` (made if missing), written beside and renamed into
    place; secrets redacted from the text as from every other output."""
    target = Path(out_dir)
    target.mkdir(parents=True, exist_ok=True)
    for name, report in llmd_reports(run).items():
        fd, tmp = tempfile.mkstemp(dir=target, prefix=f".{name}.")
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(redact(json.dumps(report, indent=2, allow_nan=False)) + "\n")
        os.chmod(tmp, 0o644)
        os.replace(tmp, target / name)
    return target
