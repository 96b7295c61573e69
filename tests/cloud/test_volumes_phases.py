"""What a cold start cost: vLLM's startup phases read from real logs
(tests/fixtures/engine-logs, sources in index.json), a warm start's cache hit, and the billed
seconds and dollars from the create call to the engine serving. Expected figures are the numbers
printed on the fixture lines (read by hand), never computed by the parser."""

from __future__ import annotations

from pathlib import Path

import pytest

from tailpod.engines.vllm import parse_vllm_log
from tailpod.provision.volumes import cold_start

LOGS = Path(__file__).resolve().parents[1] / "fixtures" / "engine-logs"


def phases(name: str) -> dict[str, object]:
    return dict(parse_vllm_log((LOGS / name).read_text()).facts["startup_phases"])


def test_the_h200_v0_26_cold_start_phases() -> None:
    got = phases("vllm_0.26.0_h200_tiny_mimo_plain_2026-12.txt")
    assert got == {
        "weights_load_s": 0.01,  # "Loading weights took 0.01 seconds"
        "model_load_s": 2.84399,  # "Model loading took 0.01 GiB and 2.843990 seconds"
        "dynamo_transform_s": 2.33,
        "compile_s": 9.25,  # "Compiling a graph for compile range (1, 8192) takes 9.25 s"
        "compile_cache_load_s": None,
        "torch_compile_total_s": 12.2,  # "torch.compile took 12.20 s in total" (0.26 wording)
        "profile_warmup_s": 0.19,
        "cuda_graph_capture_s": 1.0,
        "init_engine_s": 114.23,
        "compile_cache_hit": False,  # it compiled: no cache to load from
    }


def test_tensor_parallel_phases_keep_the_slowest_worker() -> None:
    got = phases("vllm_v011_qwen3vl30b_tp4_3090_2025-10.txt")
    assert got["weights_load_s"] == 25.29  # of 24.06, 25.29, 24.85, 25.24
    assert got["model_load_s"] == 25.534107
    assert got["torch_compile_total_s"] == 13.11  # of 13.11, 12.36, 12.67, 12.90 ("takes")
    assert got["cuda_graph_capture_s"] == 19.0 and got["init_engine_s"] == 54.87


def test_a_log_without_phases_states_none() -> None:
    got = phases("vllm_0.26.0_h200_tiny_mimo_metrics_2026-12.txt")  # a /metrics dump
    assert set(got.values()) == {None}


def test_a_warm_start_shows_the_cache_hit() -> None:
    # lines as vLLM prints them on a warm start (vllm/compilation/backends.py, decorators.py)
    warm = (
        "(EngineCore pid=7) INFO 12-02 01:00:00 [backends.py:285] Directly load the compiled "
        "graph(s) for compile range (1, 8192) from the cache, took 1.128 s\n"
        "(EngineCore pid=7) INFO 12-02 01:00:00 [decorators.py:305] Directly load AOT "
        "compilation from path /workspace/tailpod/compile/k/vllm/torch_compile_cache/x\n"
        "(EngineCore pid=7) INFO 12-02 01:00:01 [monitor.py:53] torch.compile took 3.40 s in "
        "total\n")
    got = parse_vllm_log(warm).facts["startup_phases"]
    assert got["compile_cache_hit"] is True
    assert got["compile_cache_load_s"] == 1.128 and got["compile_s"] is None
    assert got["torch_compile_total_s"] == 3.4


def test_billed_time_runs_from_the_create_call_to_serving() -> None:
    events = [{"t": 100.0, "event": "intent"}, {"t": 101.5, "event": "creating"},
              {"t": 140.0, "event": "created"}]
    cold = cold_start(events, 3.6, 161.5, {"startup_phases": {"compile_cache_hit": True}},
                      {"name": "cache1"})
    assert cold["billed_s_to_ready"] == 60.0
    assert cold["usd_to_ready"] == pytest.approx(0.06)  # 60 s at $3.60/h
    assert cold["compile_cache_hit"] is True and cold["volume"] == "cache1"
    unknown = cold_start([{"t": 1.0, "event": "intent"}], 3.6, 9.0, {}, None)
    assert unknown["billed_s_to_ready"] is None and unknown["usd_to_ready"] is None
