"""A measured cell's p90, its failed requests and its SLO (issue 37 item 10): the p90 is read from
the requests that succeeded only, failed requests are counted and flagged and never meet the SLO,
the SLO attainment is a share of every request (failed ones included), and a cell whose share
equals the target meets it (docs/probe.md). Expected values are worked out by hand below."""

from __future__ import annotations

import pytest

from tailpod.agent.probes import load, rows, stream

PLAN = rows.CellPlan("plain", 4, 0, "prose", "cold")
SLO = {"ttft_ms": 500.0}


def _req(i: int, ttft: float, ok: bool = True, tokens: int = 10) -> stream.RequestResult:
    # a failed request here got its first token (then broke): its latency and tokens must still
    # stay out of the cell's figures
    return stream.RequestResult(
        index=i, cache="cold", ok=ok, error=None if ok else "stream cut",
        prompt_tokens=5, completion_tokens=tokens, ttft_s=ttft, e2e_s=ttft + 1.0,
        decode_tok_s=10.0 + i, tpot_s=0.05 + 0.01 * i, chunks=10, chunk_gap_p50_s=0.1, chunk_gap_max_s=0.2,
        t_start=0.0)


def _cell(target: float | None = 50.0) -> dict:
    # 8 successes with TTFT 0.1 … 0.8 s, 2 failures with TTFT 0.05 s (7 tokens each)
    results = [_req(i, 0.1 * (i + 1)) for i in range(8)]
    results += [_req(8, 0.05, ok=False, tokens=7), _req(9, 0.05, ok=False, tokens=7)]
    outcome = load.LoopOutcome(results, wall_s=2.0, cpu_s=0.1, loop_lag_max_s=0.001)
    return rows.cell_row("r", PLAN, outcome, None, [], "pod", 0.8, slo=SLO,
                         slo_percentile=target)


def test_the_p90_is_read_from_the_successful_requests_only() -> None:
    row = _cell()
    # sorted successes 0.1 … 0.8: position 7 × 0.9 = 6.3 → 0.7 + 0.3 × 0.1 = 0.73
    # (with the two failures' 0.05 it would be 0.71; the p50 0.45, the p99 0.793)
    assert row["ttft_p90_s"] == pytest.approx(0.73)
    assert row["ttft_p50_s"] == pytest.approx(0.45)
    assert row["ttft_p99_s"] == pytest.approx(0.793)
    assert row["e2e_p90_s"] == pytest.approx(1.73)


def test_failed_requests_are_counted_flagged_and_left_out_of_the_tokens() -> None:
    row = _cell()
    assert row["requests"] == 10 and row["failed"] == 2
    assert "failures" in row["flags"]
    assert row["output_tokens"] == 80  # 8 × 10, not the failures' 14
    assert row["output_tok_s"] == pytest.approx(40.0)


def test_slo_attainment_counts_failed_requests_and_never_lets_them_meet_it() -> None:
    row = _cell()
    # met: the successes with TTFT ≤ 0.5 s (0.1 … 0.5) = 5; the failures (0.05 s) do not meet it
    assert row["slo"] == SLO
    assert row["slo_attainment"] == pytest.approx(5 / 10)  # of all 10, not of the 8 that worked
    assert row["goodput_rps"] == pytest.approx(5 / 2.0)
    assert row["goodput_tok_s"] == pytest.approx(50 / 2.0)


def test_a_cell_whose_share_equals_the_target_meets_the_slo() -> None:
    assert _cell(50.0)["slo_met"] is True  # 50 % of requests met it, target 50 %: inclusive
    assert _cell(50.1)["slo_met"] is False
    row = _cell(None)  # no target given: the probe's default, 90 %
    assert row["slo_percentile"] == 90.0 and row["slo_met"] is False


def test_the_whole_row_of_a_measured_cell() -> None:
    from tailpod.agent import SCHEMA_VERSION

    row = _cell()
    assert row["acceptance"] is None
    expected = {
        "kind": "cell", "schema_version": SCHEMA_VERSION, "run_id": "r", "arm": "plain",
        "concurrency": 4, "rep": 0, "prompt_class": "prose", "cell": "plain|c4|r0|prose",
        "cache": "cold", "requests": 10, "failed": 2, "wall_s": 2.0, "output_tokens": 80,
        "client_cpu_s": 0.1, "loop_lag_max_s": 0.001, "client_bound": False,
        "flags": ["failures"], "void": False, "measured_from": "pod",
        "slo": SLO, "slo_percentile": 50.0, "slo_met": True,
    }
    assert {k: row[k] for k in expected} == expected
    # the successes' (i = 0 … 7) medians: e2e 1.1 … 1.8 → 1.45, decode 10 … 17 tok/s → 13.5,
    # TPOT 0.05 … 0.12 s → 0.085
    assert row["e2e_p50_s"] == pytest.approx(1.45)
    assert row["e2e_p99_s"] == pytest.approx(1.793)
    assert row["decode_tok_s_p50"] == pytest.approx(13.5)
    assert row["tpot_p50_s"] == pytest.approx(0.085)
    assert "load_workers" not in row  # one process: the shape format v1 always had
    assert not any(k.startswith(("arrival", "offered", "ttft_sched")) for k in row)  # closed loop


def test_the_client_bound_flag_at_its_threshold_and_its_place_among_the_flags() -> None:
    from tailpod.agent.probes.basics import LOOP_LAG_FLAG_S

    no_usage = _req(0, 0.1)
    no_usage.flags = ["no_usage"]
    results = [no_usage, _req(1, 0.2), _req(2, 0.3, ok=False)]

    def row(cpu_s: float, wall: float, lag: float, workers: int = 1,
            busiest: float | None = None) -> dict:
        out = load.LoopOutcome(results, wall_s=wall, cpu_s=cpu_s, loop_lag_max_s=lag,
                               workers=workers, busiest_cpu_s=busiest)
        return rows.cell_row("r", PLAN, out, None, ["extra"], "pod", 0.8)

    # CPU exactly 80 % of a 0.5 s wall: client-bound (the threshold is inclusive), placed after
    # failures and no_usage; the loop lag exactly at its bound is not flagged
    at = row(cpu_s=0.4, wall=0.5, lag=LOOP_LAG_FLAG_S)
    assert at["client_bound"] is True
    assert at["flags"] == ["failures", "no_usage", "client_bound", "extra"]
    assert at["output_tok_s"] == pytest.approx(20 / 0.5)  # the two successes' 10 tokens each
    below = row(cpu_s=0.39, wall=0.5, lag=LOOP_LAG_FLAG_S * 1.01)
    assert below["client_bound"] is False
    assert below["flags"] == ["failures", "no_usage", "loop_lag", "extra"]
    # with workers, the busiest one's CPU decides, not their sum
    split = row(cpu_s=0.9, wall=0.5, lag=0.0, workers=2, busiest=0.3)
    assert split["client_bound"] is False and split["load_workers"] == 2
    # no wall time: no throughput, and not client-bound
    zero = row(cpu_s=0.4, wall=0.0, lag=0.0)
    assert zero["output_tok_s"] == 0.0 and zero["client_bound"] is False
