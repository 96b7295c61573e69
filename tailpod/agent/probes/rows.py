"""Result rows, format v1 (docs/probe.md, docs/results-schema.json): request rows and cell rows.
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from typing import Any

from .. import OFF_POD_FLAG, SCHEMA_VERSION
from .common import LOOP_LAG_FLAG_S
from .metrics import _finite_or_none, percentile
from .stream import RequestResult


@dataclass
class LoopOutcome:
    """What one load loop measured: its requests, its wall and CPU time, its worst loop lag."""

    results: list[RequestResult]
    wall_s: float
    cpu_s: float
    loop_lag_max_s: float | None


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

    @property
    def cell(self) -> str:
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
        **({"server_timings": r.server_timings} if r.server_timings else {}),
    }


def cell_row(
    run_id: str,
    plan: CellPlan,
    outcome: LoopOutcome,
    acceptance: dict[str, Any] | None,
    extra_flags: list[str],
    where: str,
    threshold: float,
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
    cpu_frac = outcome.cpu_s / wall if wall > 0 else 0.0
    client_bound = cpu_frac >= threshold
    if client_bound:
        flags.append("client_bound")
    if outcome.loop_lag_max_s is not None and outcome.loop_lag_max_s > LOOP_LAG_FLAG_S:
        flags.append("loop_lag")
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
        "client_cpu_s": outcome.cpu_s,
        "loop_lag_max_s": outcome.loop_lag_max_s,
        "client_bound": client_bound,
        "acceptance": acceptance,
        "flags": flags,
        "void": False,
        "measured_from": where,
    }
