"""Percentiles, the client-bound flag and the cell aggregation, on known inputs."""

from __future__ import annotations

import pytest

from tailpod.agent import OFF_POD_FLAG
from tailpod.agent.probes import load, metrics, rows, stream


@pytest.mark.parametrize(
    ("values", "q", "expected"),
    [
        ([1, 2, 3, 4], 50, 2.5),
        ([4, 1, 3, 2], 50, 2.5),  # order does not matter
        ([10, 20, 30, 40, 50], 90, 46.0),
        ([10, 20, 30, 40, 50], 50, 30.0),
        (list(range(1, 101)), 99, 99.01),
        (list(range(1, 101)), 90, 90.1),
        ([7.0], 99, 7.0),
        ([1, 2], 0, 1.0),
        ([1, 2], 100, 2.0),
        ([None, 3.0, None, 1.0], 50, 2.0),  # missing values are left out
    ],
)
def test_percentile_is_linear_interpolation(values: list, q: float, expected: float) -> None:
    assert metrics.percentile(values, q) == pytest.approx(expected, abs=1e-12)


def test_percentile_of_nothing_is_none() -> None:
    assert metrics.percentile([], 50) is None
    assert metrics.percentile([None, None], 99) is None


def _result(i: int, ok: bool = True, ttft: float | None = 0.1, tokens: int | None = 10,
            flags: list[str] | None = None) -> stream.RequestResult:
    return stream.RequestResult(
        index=i, cache="cold", ok=ok, error=None if ok else "HTTP 500: x",
        prompt_tokens=5, completion_tokens=tokens if ok else None,
        ttft_s=ttft if ok else None, e2e_s=1.0 if ok else None, decode_tok_s=9.0 if ok else None,
        tpot_s=0.1 if ok else None, chunks=10, chunk_gap_p50_s=0.1, chunk_gap_max_s=0.2,
        t_start=0.0, flags=flags or [],
    )


PLAN = rows.CellPlan("plain", 4, 0, "prose", "cold")


def test_cell_counts_failures_and_excludes_them_from_latency() -> None:
    results = [_result(0, ttft=0.1), _result(1, ttft=0.3), _result(2, ok=False),
               _result(3, ttft=0.2)]
    outcome = load.LoopOutcome(results, wall_s=2.0, cpu_s=0.1, loop_lag_max_s=0.001)
    row = rows.cell_row("r", PLAN, outcome, None, [], "pod", 0.8)
    assert row["requests"] == 4 and row["failed"] == 1
    assert "failures" in row["flags"]
    assert row["ttft_p50_s"] == pytest.approx(0.2)  # median of the three that succeeded
    assert row["output_tokens"] == 30 and row["output_tok_s"] == pytest.approx(15.0)
    assert row["client_bound"] is False and row["cell"] == "plain|c4|r0|prose"


def test_cell_flags_client_bound_at_the_threshold() -> None:
    results = [_result(0)]
    busy = load.LoopOutcome(results, wall_s=1.0, cpu_s=0.85, loop_lag_max_s=0.0)
    idle = load.LoopOutcome(results, wall_s=1.0, cpu_s=0.5, loop_lag_max_s=0.0)
    assert "client_bound" in rows.cell_row("r", PLAN, busy, None, [], "pod", 0.8)["flags"]
    assert rows.cell_row("r", PLAN, busy, None, [], "pod", 0.8)["client_bound"] is True
    assert "client_bound" not in rows.cell_row("r", PLAN, idle, None, [], "pod", 0.8)["flags"]


def test_cell_marks_missing_usage_and_off_pod() -> None:
    results = [_result(0), _result(1, tokens=None, flags=["no_usage"])]
    outcome = load.LoopOutcome(results, wall_s=1.0, cpu_s=0.0, loop_lag_max_s=0.2)
    row = rows.cell_row("r", PLAN, outcome, None, [], "off-pod", 0.8)
    assert row["output_tokens"] == 10  # the unknown count is never estimated
    assert {"no_usage", "loop_lag", OFF_POD_FLAG} <= set(row["flags"])
    assert row["measured_from"] == "off-pod"
