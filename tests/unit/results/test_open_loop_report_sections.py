"""An open-loop (`--request-rate`) or trace (`--trace`) run gets whole Throughput, Speedup, Cost,
Best K and Decision sections, per offered load (results/sections/by_load.py), where its report
once had header-only tables, `no_data` and "No spec arm to choose K from" (newcomer 2.15)."""

from __future__ import annotations

import re
from typing import Any

import pytest

from tailpod.results.analysis import analyze, analyze_for_report
from tailpod.results.io import Run, load_run
from tailpod.results.report import render_run_markdown
from tailpod.results.schema import CellRow
from tests import paths
from tests.helpers.run_builder import build_run

H200_OPEN_LOOP = paths.REPO / "benchmarks/runs/h200_vllm_0.26.0_openloop_2026-12-02"
HEADER_ONLY = re.compile(r"^\| arm \|\n\|---\|\n", re.M)
PRICE = 3.6  # $/h: $3.6 / (3600 s * tok_s) * 1e6 = 1000 / tok_s dollars per Mtok


def _cell(arm: str, rate: float | str | None, attainment: float, tok_s: float) -> CellRow:
    arrival: dict[str, Any] = (
        {"process": "trace", "trace": {"format": "tailpod", "speed": 1.0}} if rate is None
        else {"process": "poisson", "rate": rate, "burstiness": 1.0, "seed": 0, "requests": 20}
    )  # fmt: skip
    return CellRow(
        run_id="run-a", arm=arm, concurrency=0, rep=0, prompt_class="prose",
        cell=f"{arm}|{rate}|r0|prose", requests=20, wall_s=10.0,
        output_tokens=int(tok_s * 10), output_tok_s=tok_s, arrival=arrival,
        achieved_rate_rps=1.8, offered_rate_rps=1.7, slo={"ttft_ms": 200.0}, slo_percentile=90.0,
        slo_attainment=attainment, goodput_rps=attainment * 2, goodput_tok_s=attainment * tok_s,
        ttft_sched_p90_s=0.2, schedule_lag_max_s=0.001,
    )  # fmt: skip


def _run(cells: list[CellRow]) -> Run:
    run = build_run({"plain": {1: [1.0]}, "ngram-k2": {1: [1.0]}}, price=PRICE)
    run.cells[:] = cells  # the builder's closed-loop cells out: an open-loop run has none
    return run


def _open_loop() -> Run:
    # plain's ladder stopped above rate 2 (saturated), so it has no rate-8 cell
    return _run([
        _cell("plain", 2, 0.95, 60.0), _cell("ngram-k2", 2, 0.99, 62.0),
        _cell("ngram-k2", 8, 0.10, 200.0),
        _cell("plain", "inf", 0.05, 300.0), _cell("ngram-k2", "inf", 0.02, 250.0),
    ])  # fmt: skip


def _report(run: Run) -> str:
    values = analyze_for_report(run)
    return render_run_markdown(values.analysis, values.report_only)


def _section(md: str, heading: str) -> str:
    return md.split(f"## {heading}\n", 1)[1].split("\n## ", 1)[0]


def test_open_loop_throughput_and_goodput_are_tabulated_per_rate() -> None:
    md = _report(_open_loop())
    assert not HEADER_ONLY.search(md)
    tput = _section(md, "Throughput")
    assert "| arm | rate=2 | rate=8 | rate=inf |" in tput
    assert "| plain | 60 | not measured | 300 |" in tput
    # goodput tok/s = attainment x tok/s: 0.99 x 62 = 61.38
    assert "| ngram-k2 | 61.38 | 20 | 5 |" in tput


def test_open_loop_speedup_is_spec_over_plain_at_each_rate() -> None:
    an = analyze(_open_loop())
    at = {e["load"]: e for e in an["by_load"]["speedup"]}
    assert at["2"]["throughput"] == pytest.approx(62.0 / 60.0)
    assert at["2"]["goodput"] == pytest.approx((0.99 * 62.0) / (0.95 * 60.0))
    assert at["8"]["throughput"] is None and "plain not measured" in at["8"]["reason"]
    assert at["inf"]["throughput"] == pytest.approx(250.0 / 300.0)
    speedup = _section(render_run_markdown(an), "Speedup over plain")
    assert "| ngram-k2 | 1.03× | plain not measured at this load | 0.83× |" in speedup
    assert "| ngram-k2 | 1.08× | plain not measured at this load | 0.33× |" in speedup


def test_open_loop_cost_is_per_million_tokens_and_per_million_good_tokens() -> None:
    an = analyze(_open_loop())
    at = {(e["arm"], e["load"]): e for e in an["by_load"]["cost"]}
    assert at[("plain", "2")]["usd_per_1m"] == pytest.approx(1000.0 / 60.0)
    assert at[("plain", "2")]["usd_per_good_1m"] == pytest.approx(1000.0 / 57.0)
    cost = _section(render_run_markdown(an), "Cost")
    assert "| plain | $16.67 | not measured | $3.333 |" in cost
    assert "| plain | $17.54 | not measured | $66.67 |" in cost


def test_best_k_of_an_open_loop_run_is_chosen_per_rate_by_goodput() -> None:
    md = _report(_open_loop())
    best = _section(md, "Best K")
    assert "No spec arm to choose K from" not in best
    # rate 2: 61.38 (K=2) > 57 (K=0); rate inf: 15 (K=0) > 5 (K=2)
    assert "| mtp | rate=2 | 2 | ngram-k2 | 61.38 | no |" in best
    assert "| mtp | rate=inf | 0 | plain | 15 | yes |" in best
    # rate 8: K=2 won where plain was not measured, and the row says so
    (row,) = [ln for ln in best.splitlines() if ln.startswith("| mtp | rate=8 |")]
    assert "not measured at this load: plain" in row


def test_crossover_of_an_open_loop_run_says_why_it_is_not_measured() -> None:
    section = _section(_report(_open_loop()), "Crossover and knee")
    assert "no_data" not in section and "Not measured" in section


def test_a_trace_run_has_whole_sections_and_a_decision() -> None:
    run = _run([_cell("plain", None, 0.688, 100.0), _cell("ngram-k2", None, 0.938, 120.0)])
    md = _report(run)
    assert not HEADER_ONLY.search(md)
    assert "| ngram-k2 | 1.20× |" in _section(md, "Speedup over plain")
    decision = _section(md, "Decision")
    assert "| trace | all (pooled) | ngram-k2 | 120.0 |" in decision


def test_the_h200_open_loop_run_has_no_header_only_table() -> None:
    md = _report(load_run(H200_OPEN_LOOP))
    assert not HEADER_ONLY.search(md)
    assert "No spec arm to choose K from" not in md
