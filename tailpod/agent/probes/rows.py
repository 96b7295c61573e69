"""Result rows, format v1 (docs/probe.md, docs/results-schema.json): request rows and cell rows.
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from typing import Any

from .. import OFF_POD_FLAG, SCHEMA_VERSION
from .arrival import SCHEDULE_LAG_FLAG_S, meets_slo
from .basics import LOOP_LAG_FLAG_S
from .metrics import _finite_or_none, censored_percentile, percentile
from .stream import RequestResult


@dataclass
class LoopOutcome:
    """What one load loop measured: its requests, its wall and CPU time, its worst loop lag;
    split over worker processes (procs.py), CPU is their sum and the busiest one's is kept."""

    results: list[RequestResult]
    wall_s: float
    cpu_s: float
    loop_lag_max_s: float | None
    workers: int = 1
    busiest_cpu_s: float | None = None


@dataclass
class CellPlan:
    arm: str
    concurrency: int
    rep: int
    prompt_class: str
    cache: str
    # The sweep's own cell id when the laptop gives one (`probe run` measures the cells it is
    # given and writes their ids as given); None = derived from the fields, the same text.
    cell_id: str | None = None
    # Open loop: the cell's `arrival` (arrival.Arrival.as_json()); concurrency is then the cap
    # on requests in flight, 0 for none. None = the closed loop of `concurrency` workers.
    arrival: dict[str, Any] | None = None
    # A soak cell (`benchmark --soak`): the closed loop runs for this many seconds instead of
    # a number of requests (load.run_timed_loop). None = an ordinary cell.
    soak_s: float | None = None

    @property
    def cell(self) -> str:
        if self.cell_id is None and self.soak_s is not None:
            return (f"{self.arm}|soak|c{self.concurrency}|r{self.rep}|{self.prompt_class}"
                    + ("|warm" if self.cache == "warm" else ""))
        if self.cell_id is None and self.arrival is not None:
            cap = f"|c{self.concurrency}" if self.concurrency else ""
            base = (f"{self.arm}|rate{self.arrival.get('rate')}{cap}|r{self.rep}|"
                    f"{self.prompt_class}")
            return base + ("|warm" if self.cache == "warm" else "")
        base = self.cell_id or f"{self.arm}|c{self.concurrency}|r{self.rep}|{self.prompt_class}"
        return base + ("|warm" if self.cache == "warm" else "")


class RowWriter:
    def __init__(self, path: str) -> None:
        self.path = path
        self._fh = sys.stdout if path == "-" else open(path, "a", encoding="utf-8")  # noqa: SIM115

    def write(self, row: dict[str, Any]) -> None:
        self._fh.write(json.dumps(row, allow_nan=False, sort_keys=False) + "\n")
        self._fh.flush()

    def close(self) -> None:
        if self._fh is not sys.stdout:
            self._fh.close()


def _row_head(kind: str, run_id: str, plan: CellPlan) -> dict[str, Any]:
    """The keys every row of results format v1 starts with: what it is and which cell it is of."""
    return {
        "kind": kind,
        "schema_version": SCHEMA_VERSION,
        "run_id": run_id,
        "arm": plan.arm,
        "concurrency": plan.concurrency,
        "rep": plan.rep,
        "prompt_class": plan.prompt_class,
        "cell": plan.cell,
    }


def _lag(r: RequestResult) -> float | None:
    """How late the request went out against its schedule (s); None in a closed loop."""
    return None if r.t_sched_perf is None else max(0.0, r.t_send_perf - r.t_sched_perf)


def _from_schedule(r: RequestResult, value: float | None) -> float | None:
    lag = _lag(r)
    return None if value is None or lag is None else value + lag


def _open_loop_fields(r: RequestResult) -> dict[str, Any]:
    """scheduled_at and sent_at on the clock of t_start; TTFT and end-to-end from the
    scheduled time (what the user at the other end waited, queueing in the client included)."""
    lag = _lag(r)
    if lag is None:
        return {}
    return {
        "scheduled_at": r.t_start - lag,
        "sent_at": r.t_start,
        "ttft_sched_s": _finite_or_none(_from_schedule(r, r.ttft_s)),
        "e2e_sched_s": _finite_or_none(_from_schedule(r, r.e2e_s)),
    }


def request_row(run_id: str, plan: CellPlan, r: RequestResult, where: str) -> dict[str, Any]:
    return {
        **_row_head("request", run_id, plan),
        "index": r.index,
        "ok": r.ok,
        "error": r.error,
        "cache": r.cache,
        "prompt_tokens": r.prompt_tokens,
        "completion_tokens": r.completion_tokens,
        "ttft_s": _finite_or_none(r.ttft_s),
        "e2e_s": _finite_or_none(r.e2e_s),
        "decode_tok_s": _finite_or_none(r.decode_tok_s),
        "tpot_s": _finite_or_none(r.tpot_s),
        "chunks": r.chunks,
        "chunk_gap_p50_s": _finite_or_none(r.chunk_gap_p50_s),
        "chunk_gap_max_s": _finite_or_none(r.chunk_gap_max_s),
        "t_start": r.t_start,
        "measured_from": where,
        "flags": list(r.flags),
        "finish_reason": r.finish_reason,
        **({"server_timings": r.server_timings} if r.server_timings else {}),
        **_open_loop_fields(r),
        **_reasoning_fields(r),
    }


def _reasoning_fields(r: RequestResult) -> dict[str, Any]:
    """Time to first answer where reasoning text came first (without reasoning it is ttft_s),
    and the reasoning tokens the server counted; no keys otherwise (docs/probe.md)."""
    out: dict[str, Any] = {}
    if r.reasoned:
        out["ttfa_s"] = _finite_or_none(r.ttfa_s)
    if r.reasoning_tokens is not None:
        out["reasoning_tokens"] = r.reasoning_tokens
    return out


def _reasoning_cell(ok: list[RequestResult]) -> dict[str, Any]:
    """p50/p90 of time to first answer over the successful requests, once any of them reasoned;
    one that never answered counts as later than every answer (the figure is null where the
    percentile would fall on it). Without reasoning the first answer is the first token."""
    if not any(r.reasoned for r in ok):
        return {}
    answered = [r.ttfa_s for r in ok if r.ttfa_s is not None]
    missing = len(ok) - len(answered)
    return {
        "ttfa_p50_s": _finite_or_none(censored_percentile(answered, missing, 50)),
        "ttfa_p90_s": _finite_or_none(censored_percentile(answered, missing, 90)),
    }


def slo_fields(results: list[RequestResult], wall: float, slo: dict[str, float] | None,
               percentile_target: float | None) -> dict[str, Any]:
    """SLO attainment (share of all requests, failed ones included, meeting every target),
    request goodput (such requests per second of the cell's wall time) and token goodput (their
    output tokens per second). Latencies from the scheduled time in an open loop."""
    if not slo:
        return {}
    met = [r for r in results
           if meets_slo(slo, _from_schedule(r, r.ttft_s) if r.t_sched_perf is not None
                        else r.ttft_s, r.tpot_s,
                        _from_schedule(r, r.e2e_s) if r.t_sched_perf is not None else r.e2e_s,
                        r.ok)]
    attainment = len(met) / len(results) if results else None
    target = 90.0 if percentile_target is None else float(percentile_target)
    return {
        "slo": dict(slo),
        "slo_percentile": target,
        "slo_attainment": attainment,
        "slo_met": attainment is not None and attainment * 100.0 >= target,
        "goodput_rps": len(met) / wall if wall > 0 else 0.0,
        "goodput_tok_s": sum(r.completion_tokens or 0 for r in met) / wall if wall > 0 else 0.0,
    }


def _open_loop_cell(plan: CellPlan, results: list[RequestResult], wall: float,
                    flags: list[str]) -> dict[str, Any]:
    if plan.arrival is None:
        return {}
    lags = [lag for lag in (_lag(r) for r in results) if lag is not None]
    lag_p50 = percentile(lags, 50)
    if lag_p50 is not None and lag_p50 > SCHEDULE_LAG_FLAG_S:
        flags.append("behind_schedule")
    ok = [r for r in results if r.ok]

    def p(name: str, q: float) -> float | None:
        return _finite_or_none(percentile([_from_schedule(r, getattr(r, name)) for r in ok], q))

    ttft_sched = [_from_schedule(r, r.ttft_s) for r in ok]
    ttft_vals = [v for v in ttft_sched if v is not None]
    rate = plan.arrival.get("rate")
    return {
        "arrival": dict(plan.arrival),
        "offered_rate_rps": rate if isinstance(rate, (int, float)) and rate != float("inf")
        else None,
        "achieved_rate_rps": len(ok) / wall if wall > 0 else 0.0,
        "schedule_lag_p50_s": _finite_or_none(lag_p50),
        "schedule_lag_max_s": _finite_or_none(max(lags)) if lags else None,
        "ttft_sched_mean_s": sum(ttft_vals) / len(ttft_vals) if ttft_vals else None,
        "ttft_sched_p50_s": p("ttft_s", 50),
        "ttft_sched_p90_s": p("ttft_s", 90),
        "ttft_sched_p99_s": p("ttft_s", 99),
        "e2e_sched_p50_s": p("e2e_s", 50),
        "e2e_sched_p90_s": p("e2e_s", 90),
        "e2e_sched_p99_s": p("e2e_s", 99),
    }


def cell_row(
    run_id: str,
    plan: CellPlan,
    outcome: LoopOutcome,
    acceptance: dict[str, Any] | None,
    extra_flags: list[str],
    where: str,
    threshold: float,
    slo: dict[str, float] | None = None,
    slo_percentile: float | None = None,
) -> dict[str, Any]:
    """Aggregate one cell. Failed requests are counted, flagged, and left out of latency stats."""
    results = outcome.results
    ok = [r for r in results if r.ok]
    failed = len(results) - len(ok)
    tokens = sum(r.completion_tokens or 0 for r in ok)
    wall = outcome.wall_s
    flags: list[str] = []
    if failed:
        flags.append("failures")
    if any("no_usage" in r.flags for r in ok):
        flags.append("no_usage")  # output_tokens is then a lower bound
    no_answer = any("no_answer" in r.flags for r in ok)
    # One process's CPU over the wall: with worker processes, the busiest one's (each has a
    # core of its own; their sum over the wall may pass 1 and still leave each one idle time).
    busiest = outcome.cpu_s if outcome.busiest_cpu_s is None else outcome.busiest_cpu_s
    cpu_frac = busiest / wall if wall > 0 else 0.0
    client_bound = cpu_frac >= threshold
    if outcome.loop_lag_max_s is not None and outcome.loop_lag_max_s > LOOP_LAG_FLAG_S:
        flags.append("loop_lag")
    open_loop = _open_loop_cell(plan, results, wall, flags)
    if "behind_schedule" in flags and not plan.concurrency:
        # with no in-flight cap nothing but the client holds a due request back: a schedule
        # it cannot keep is the client's limit, whatever its CPU reads
        client_bound = True
    if client_bound:
        # in the place it has always had: after failures and no_usage
        flags.insert(sum(f in ("failures", "no_usage") for f in flags), "client_bound")
    if no_answer:
        flags.append("no_answer")
    for f in extra_flags:
        if f not in flags:
            flags.append(f)
    if where != "pod":
        flags.append(OFF_POD_FLAG)

    def col(name: str) -> list[float | None]:
        return [getattr(r, name) for r in ok]

    def p(name: str, q: float) -> float | None:
        return _finite_or_none(percentile(col(name), q))

    return {
        **_row_head("cell", run_id, plan),
        "cache": plan.cache,
        "requests": len(results),
        "failed": failed,
        "wall_s": wall,
        "output_tokens": tokens,
        "output_tok_s": tokens / wall if wall > 0 else 0.0,
        "ttft_p50_s": p("ttft_s", 50),
        "ttft_p90_s": p("ttft_s", 90),
        "ttft_p99_s": p("ttft_s", 99),
        "e2e_p50_s": p("e2e_s", 50),
        "e2e_p90_s": p("e2e_s", 90),
        "e2e_p99_s": p("e2e_s", 99),
        "decode_tok_s_p50": p("decode_tok_s", 50),
        "tpot_p50_s": p("tpot_s", 50),
        **_reasoning_cell(ok),
        "client_cpu_s": outcome.cpu_s,
        # only when split: the rows of one process keep the shape format v1 always had
        **({"load_workers": outcome.workers} if outcome.workers > 1 else {}),
        "loop_lag_max_s": outcome.loop_lag_max_s,
        "client_bound": client_bound,
        "acceptance": acceptance,
        "flags": flags,
        "void": False,
        "measured_from": where,
        **open_loop,
        **slo_fields(results, wall, slo, slo_percentile),
        **({"soak_s": plan.soak_s} if plan.soak_s is not None else {}),
    }
