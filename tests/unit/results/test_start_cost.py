"""`tailpod compare` of a cold start and a warm one (results/sections/start_cost.py): the phases of
vLLM 0.26.0's two real H200 starts (tests/fixtures/engine-logs, the cold one compiled, the second
hit the compile cache), their cache hit, and billed seconds and dollars to the first measured
token, with the difference. Phase figures are the numbers printed on the fixture lines; the billed
figures come from constructed ledger events and rows, worked by hand in the comments."""

from __future__ import annotations

from typing import Any

import pytest

from tailpod.engines.vllm import parse_vllm_log
from tailpod.provision.volumes import cold_start, to_first_token
from tailpod.results.analysis import analyze
from tailpod.results.compare import compare_analyses
from tailpod.results.report import render_compare_markdown
from tests import paths
from tests.helpers.run_builder import build_run

LOGS = paths.FIXTURES / "engine-logs"
COLD_LOG = "vllm_v0260_plain_gpu_target_h200_cold_2026-12.txt"
WARM_LOG = "vllm_v0260_plain_gpu_target_h200_cache_hit_2026-12.txt"
# one request: sent at 50.0 on the pod, first token 0.5 s later, last token at 52.5
ROWS = [{"kind": "request", "ok": True, "t_start": 50.0, "ttft_s": 0.5, "e2e_s": 2.5}]


def _cold(log: str, created: float, ready: float, rows_at: float) -> dict[str, Any]:
    facts = parse_vllm_log((LOGS / log).read_text()).facts
    record = cold_start([{"t": created, "event": "creating"}], 3.6, ready, facts, None)
    done = to_first_token(record, ROWS, rows_at)
    assert done is not None
    return done


def _analysis(run_id: str, cold: dict[str, Any] | None,
              facts: dict[str, Any] | None = None) -> dict[str, Any]:
    run = build_run({"plain": {1: [10.0]}}, run_id=run_id, facts={"plain": facts or {}})
    run.meta.cold_start = cold
    return analyze(run)


def _row(part: dict[str, Any], key: str) -> dict[str, Any]:
    return next(r for r in part["rows"] if r["key"] == key)


def test_compare_puts_the_cold_and_the_warm_start_side_by_side() -> None:
    # cold: created at 1000, serving at 1180 (180 s, $0.18 at $3.60/h); the rows arrived at 1202
    # and the pod spent 52.5 - 50.5 = 2 s after the first token, so it came at 1200: 200 s, $0.20.
    # warm: created at 5000, serving at 5060 (60 s, $0.06); rows at 5072: 70 s, $0.07.
    cold = _analysis("cold", _cold(COLD_LOG, 1000.0, 1180.0, 1202.0))
    warm = _analysis("warm", _cold(WARM_LOG, 5000.0, 5060.0, 5072.0))
    part = compare_analyses([cold, warm])["start_cost"]
    assert part["compile_cache_hit"] == [False, True]
    assert _row(part, "compile_s") == {"key": "compile_s", "values": [13.91, None],
                                       "diff": [None]}
    assert _row(part, "compile_cache_load_s")["values"] == [None, 0.456]
    assert _row(part, "torch_compile_total_s")["diff"] == [pytest.approx(1.63 - 17.69)]
    assert _row(part, "init_engine_s")["values"] == [119.81, 13.96]
    assert _row(part, "init_engine_s")["diff"] == [pytest.approx(-105.85)]
    # the model load and init engine: 2.297665 + 119.81 and 2.429280 + 13.96
    start = _row(part, "engine_start_s")
    assert start["values"] == [pytest.approx(122.107665), pytest.approx(16.38928)]
    assert _row(part, "billed_s_to_first_token") == {
        "key": "billed_s_to_first_token", "values": [200.0, 70.0], "diff": [-130.0]}
    assert _row(part, "usd_to_first_token")["values"] == [pytest.approx(0.2), pytest.approx(0.07)]
    assert _row(part, "usd_to_first_token")["diff"] == [pytest.approx(-0.13)]
    assert _row(part, "billed_s_to_ready")["diff"] == [-120.0]


def test_the_comparison_markdown_shows_the_difference() -> None:
    cold = _analysis("cold", _cold(COLD_LOG, 1000.0, 1180.0, 1202.0))
    warm = _analysis("warm", _cold(WARM_LOG, 5000.0, 5060.0, 5072.0))
    md = render_compare_markdown(compare_analyses([cold, warm])).replace(" ", "")
    assert "##Start:coldandwarm" in md
    assert "|compilecache|compiled|hit||" in md
    assert "|billed_s_to_first_token|200s|70s|-130s|" in md
    assert "|usd_to_first_token|$0.2000|$0.0700|-$0.1300|" in md


def test_a_run_without_a_rented_pod_compares_its_first_arms_phases() -> None:
    facts = parse_vllm_log((LOGS / WARM_LOG).read_text()).facts
    local = _analysis("local", None, facts)
    assert local["start_cost"]["source"] == "arm plain"
    assert local["start_cost"]["compile_cache_hit"] is True
    assert local["start_cost"]["billed_s_to_first_token"] is None
    nothing = _analysis("bare", None)
    assert "start_cost" not in nothing
    part = compare_analyses([nothing, local])["start_cost"]
    assert _row(part, "init_engine_s") == {"key": "init_engine_s", "values": [None, 13.96],
                                           "diff": [None]}
    assert compare_analyses([nothing, nothing])["start_cost"] is None
