"""SGLang 0.5.17's startup lines, as its source formats them, read into the startup facts.

No log of 0.5.17 exists yet (issue 42 item 4 runs it on the device); each line below is the
f-string of the sglang 0.5.17 wheel (sglang-0.5.17-cp312-cp312-manylinux_2_34_x86_64.whl) filled
with made-up numbers, its file and line beside it. The earlier releases' wording is pinned on real
logs in test_startup_phases.py and test_engine_logs.py; 0.5.17 reworded two of the lines tailpod
reads: the default attention backend and the CUDA graph capture."""

from __future__ import annotations

from tailpod.engines.sglang import parse_sglang_log

LOG = """\
[2026-12-06 10:00:00] Attention backend not specified. Use fa3 backend by default.
[2026-12-06 10:00:10 TP0] Load weight end. elapsed=3.10 s, type=MiMoForCausalLM, avail mem=65.00 GB, mem usage=13.42 GB.
[2026-12-06 10:00:11 TP0] KV Cache is allocated. dtype: torch.bfloat16, #tokens: 411648, K size: 29.05 GB, V size: 29.05 GB
[2026-12-06 10:00:12 TP0] Capture target verify CUDA graph begin. backend=full, num_tokens_per_req=4, bs=[1, 2, 4], avail mem=6.00 GB
[2026-12-06 10:00:17 TP0] Capture target verify CUDA graph end. elapsed=4.86 s, mem usage=0.50 GB, avail mem=5.50 GB.
[2026-12-06 10:00:19 TP0] Capture draft decode CUDA graph end. elapsed=2.00 s, mem usage=0.20 GB, avail mem=5.30 GB.
[2026-12-06 10:00:21 TP0] Capture draft extend CUDA graph end. elapsed=1.50 s, mem usage=0.10 GB, avail mem=5.20 GB.
[2026-12-06 10:00:22 TP0] max_total_num_tokens=411648, chunked_prefill_size=8192, max_prefill_tokens=16384, max_running_requests=64, context_len=2048, available_gpu_mem=5.20 GB
[2026-12-06 10:00:30] The server is fired up and ready to roll!
"""  # noqa: E501
# sources, in order: srt/arg_groups/overrides.py:2024, srt/model_executor/model_runner.py:1100,
# srt/mem_cache/memory_pool.py:1670, srt/model_executor/model_runner_components/
# cuda_graph_setup.py:435 and :453 (target), srt/speculative/eagle_worker_v2.py:384 and :479
# (draft), srt/managers/scheduler.py:1069


def test_the_default_attention_backend_is_read_from_the_new_wording() -> None:
    assert parse_sglang_log(LOG).facts["attention_backend"] == "fa3"


def test_every_graph_capture_of_a_rank_adds_up() -> None:
    phases = parse_sglang_log(LOG).facts["startup_phases"]
    assert phases["cuda_graph_capture_s"] == 8.36  # 4.86 target verify + 2.00 + 1.50 draft
    assert phases["model_load_s"] == 3.10


def test_the_pool_and_the_slots_as_before() -> None:
    facts = parse_sglang_log(LOG).facts
    assert (facts["kv_tokens"], facts["max_total_num_tokens"]) == (411648, 411648)
    assert facts["max_running_requests"] == 64
    assert facts["ready"] is True
