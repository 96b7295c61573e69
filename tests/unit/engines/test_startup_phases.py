"""SGLang's and llama.cpp's startup phases, read from the real logs in tests/fixtures/engine-logs
(sources in its index.json) into the phase keys vLLM uses (engines/base.py STARTUP_PHASES). Every
expected figure is a number printed on a fixture line, or the difference of two lines' own
timestamps worked out by hand in the comment beside it."""

from __future__ import annotations

import pytest

from tailpod.engines import vllm
from tailpod.engines.base import STARTUP_PHASES, empty_phases, engine_start_s
from tailpod.engines.llamacpp import parse_llamacpp_log
from tailpod.engines.sglang import parse_sglang_log
from tests import paths

LOGS = paths.FIXTURES / "engine-logs"


def stated(parse: object, name: str) -> dict[str, object]:
    phases = parse((LOGS / name).read_text(encoding="utf-8")).facts["startup_phases"]  # type: ignore[operator]
    assert set(phases) == set(empty_phases())  # one vocabulary for every engine
    return {k: v for k, v in phases.items() if v is not None}


def test_every_engine_fills_the_same_phase_keys() -> None:
    assert [name for name, _ in vllm._PHASES] == list(STARTUP_PHASES)
    for parse in (vllm.parse_vllm_log, parse_sglang_log, parse_llamacpp_log):
        assert set(parse("").facts["startup_phases"]) == set(STARTUP_PHASES) | {
            "compile_cache_hit", "compile_cache_load_error", "compile_cache_source"}


def test_sglang_one_gpu_load_weights_and_cuda_graphs() -> None:
    # "Loading weights took 1.21 seconds", "Load weight end. elapsed=1.25 s",
    # "Capture cuda graph end. Time elapsed: 1.24 s"
    assert stated(parse_sglang_log, "sglang_granite4h_bench_one_batch_2026-02.txt") == {
        "weights_load_s": 1.21, "model_load_s": 1.25, "cuda_graph_capture_s": 1.24}


def test_sglang_tensor_parallel_keeps_the_slowest_rank() -> None:
    # TP1 elapsed=5.46 s, TP0 elapsed=5.54 s; graphs TP1 4.78 s, TP0 4.86 s
    assert stated(parse_sglang_log, "sglang_qwen35_9b_tp2_mamba_2026-04.txt") == {
        "model_load_s": 5.54, "cuda_graph_capture_s": 4.86}
    # four ranks' graphs: 7.23, 7.22, 7.24, 7.25 s
    assert stated(parse_sglang_log, "sglang_qwq32b_tp4_2025-03.txt") == {
        "cuda_graph_capture_s": 7.25}
    # TP1 236.31, TP2 237.02, TP0 778.18, TP7 887.93 s; the start failed before graphs
    assert stated(parse_sglang_log, "sglang_glm5_fp8_rocm_tp8_mla_failed_2026-02.txt") == {
        "model_load_s": 887.93}


@pytest.mark.parametrize(("name", "capture_s"), [
    ("sglang_mistral7b_old_format_2024-12.txt", 2.19),  # the 2024 wording, no mem usage after
    ("sglang_deepseek_v3_tp16_k8s_docs_2025-02.txt", 84.89),
    ("sglang_lfm2_bench_one_batch_2025-12.txt", 1.01),
])
def test_sglang_graph_capture_in_every_release(name: str, capture_s: float) -> None:
    assert stated(parse_sglang_log, name) == {"cuda_graph_capture_s": capture_s}


def test_sglang_says_nothing_of_a_compile_cache() -> None:
    phases = parse_sglang_log((LOGS / "sglang_granite4h_bench_one_batch_2026-02.txt")
                              .read_text()).facts["startup_phases"]
    assert phases["compile_cache_hit"] is None and phases["compile_s"] is None
    # a load-weight line without elapsed= (2025) states no duration
    assert stated(parse_sglang_log, "sglang_eagle_llama2_docsci_2025-04.txt") == {}


def test_llamacpp_phases_from_the_lines_own_times() -> None:
    # 0.00.317.559 loading model '...8b.gguf' -> 0.03.539.773 model loaded: 3.222214 s
    # 0.01.263.773 loading model tensors -> 0.03.449.240 constructing llama_context: 2.185467 s
    # 0.03.469.139 warming up -> 0.03.533.297 (the next line): 0.064158 s
    assert stated(parse_llamacpp_log, "llamacpp_h200_8b_plain_lv4_2026-12.txt") == {
        "model_load_s": 3.222214, "weights_load_s": 2.185467, "profile_warmup_s": 0.064158}


def test_llamacpp_target_and_draft_weights_add_up() -> None:
    # target 0.01.678.502 -> 0.03.969.049 (2.290547 s), draft 0.04.500.154 -> 0.04.720.674
    # (0.220520 s): 2.511067 s; load 0.00.222.538 -> 0.04.756.426: 4.533888 s;
    # warm-up 0.03.988.020 -> 0.04.035.547 (loading draft model): 0.047527 s
    assert stated(parse_llamacpp_log, "llamacpp_h200_8b_draft_k4_lv4_2026-12.txt") == {
        "model_load_s": 4.533888, "weights_load_s": 2.511067, "profile_warmup_s": 0.047527}


def test_llamacpp_at_the_default_verbosity_only_the_whole_load() -> None:
    # 0.00.108.884 -> 0.01.303.567 and 0.00.110.743 -> 0.02.300.267
    assert stated(parse_llamacpp_log, "llamacpp_h200_tiny_plain_lv3_2026-12.txt") == {
        "model_load_s": 1.194683}
    assert stated(parse_llamacpp_log, "llamacpp_h200_tiny_draft_lv3_2026-12.txt") == {
        "model_load_s": 2.189524}


def test_engine_start_adds_the_phases_that_do_not_nest() -> None:
    # vLLM 0.26 cold (the fixture's figures): model load 2.297665 s + init engine 119.81 s
    cold = vllm.parse_vllm_log((LOGS / "vllm_v0260_plain_gpu_target_h200_cold_2026-12.txt")
                               .read_text()).facts["startup_phases"]
    assert engine_start_s(cold) == pytest.approx(122.107665)
    # SGLang: the load 5.54 s + graphs 4.86 s; the weights (inside the load) are not added again
    qwen = parse_sglang_log((LOGS / "sglang_qwen35_9b_tp2_mamba_2026-04.txt")
                            .read_text()).facts["startup_phases"]
    assert engine_start_s(qwen) == pytest.approx(10.4)
    granite = parse_sglang_log((LOGS / "sglang_granite4h_bench_one_batch_2026-02.txt")
                               .read_text()).facts["startup_phases"]
    assert engine_start_s(granite) == pytest.approx(1.25 + 1.24)
    # only the weights stated: they are the load
    assert engine_start_s({**empty_phases(), "weights_load_s": 0.5,
                           "torch_compile_total_s": 3.0, "compile_s": 2.0}) == 3.5
    assert engine_start_s(empty_phases()) is None
