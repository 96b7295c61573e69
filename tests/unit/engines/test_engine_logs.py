"""Startup-log parsers against every fixture in tests/fixtures/engine-logs, plus formats they do not cover."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tailpod.engines.adapters import get_adapter
from tailpod.engines.llamacpp import parse_llamacpp_log
from tailpod.engines.sglang import parse_sglang_log
from tailpod.engines.vllm import parse_vllm_log


def _matches(expected: Any, got: Any) -> bool:
    if isinstance(expected, list):
        # a list of dicts (metrics lines): same length, every expected key equal
        return (
            isinstance(got, list)
            and len(got) == len(expected)
            and all(
                isinstance(g, dict) and all(g.get(k) == v for k, v in e.items())
                for g, e in zip(got, expected, strict=True)
            )
        )
    return bool(got == expected) and type(got) is type(expected)


def test_every_fixture_gives_every_expected_fact(engine_logs_dir: Path) -> None:
    folder = engine_logs_dir
    entries = json.loads((folder / "index.json").read_text())
    assert len(entries) >= 30
    mismatches = []
    for entry in entries:
        text = (folder / entry["file"]).read_text(encoding="utf-8")
        parsed = get_adapter(entry["engine"]).parse_startup(text)
        facts = parsed.facts
        assert "parse_error" not in facts, entry["file"]
        assert parsed.lines, f"{entry['file']}: no raw lines kept"
        assert all(line in text for line in parsed.lines), entry["file"]
        for key, expected in entry["expected"].items():
            got = facts.get(key, "<missing key>")
            if key == "spec" and expected is None:
                # The index marks logs whose excerpt cannot tell; the parser must not claim
                # speculation and must say it could not decide.
                if got is not False or facts["spec_decided"] is not False:
                    mismatches.append((entry["file"], key, expected, got))
            elif not _matches(expected, got):
                mismatches.append((entry["file"], key, expected, got))
    assert mismatches == []


def _load(engine_logs_dir: Path, name: str) -> str:
    return (engine_logs_dir / name).read_text(encoding="utf-8")


def test_sglang_target_and_draft_pools_are_told_apart_per_rank(engine_logs_dir: Path) -> None:
    facts = parse_sglang_log(
        _load(engine_logs_dir, "sglang_mtp_hybrid_qwen_nvfp4_2x5090_draftpool_2026-09.txt")
    ).facts
    assert facts["kv_size_gb"] == pytest.approx(6.92)  # TP0 target pool, K+V
    assert facts["kv_size_gb_draft"] == pytest.approx(2.16)
    assert facts["kv_dtype"] == "torch.float8_e4m3fn"
    assert facts["draft_attention_backend"] == "flashinfer"


def test_sglang_mimo_records_draft_class_and_accept_lengths(engine_logs_dir: Path) -> None:
    facts = parse_sglang_log(_load(engine_logs_dir, "sglang_mtp_mimo7b_docsci_2025-06.txt")).facts
    assert facts["draft_model_class"] == "MiMoMTP"
    assert facts["accept_len"] == [1.79, 1.73]
    assert facts["overlap_disabled_for_spec"] is True
    assert facts["available_gpu_mem_gb"] == pytest.approx(56.97)


def test_sglang_current_format_lines() -> None:
    log = "\n".join(
        [
            "[2026-07-01 10:00:00 TP0] Max running requests is reset to 48 for speculative "
            "decoding. You can override this by explicitly setting --max-running-requests.",
            "[2026-07-01 10:00:01 TP0] Load weight end. elapsed=3.1 s, type=Qwen3NextForCausalLM, "
            "quant=fp8, avail mem=60.00 GB, mem usage=40.50 GB.",
            "[2026-07-01 10:00:02 TP0] Load weight end. elapsed=0.4 s, "
            "type=Qwen3NextForCausalLMMTP, avail mem=58.00 GB, mem usage=2.00 GB.",
            "[2026-07-01 10:00:03 TP0] Mamba Cache is allocated. max_mamba_cache_size: 96, "
            "conv_state size: 0.20GB, ssm_state size: 3.10GB intermediate_ssm_state_cache size: "
            "1.50GB intermediate_conv_window_cache size: 0.10GB ",
            "[2026-07-01 10:00:03 TP0] KV Cache is allocated. dtype: torch.bfloat16, #tokens: "
            "100000, K size: 1.00 GB, V size: 1.00 GB",
            "[2026-07-01 10:00:04 TP0] max_running_requests was reduced from the requested 48 to "
            "40 (per dp worker) due to the available KV cache capacity.",
            "[2026-07-01 10:00:05 TP0] max_total_num_tokens=100000, chunked_prefill_size=8192, "
            "max_prefill_tokens=16384, max_running_requests=40, context_len=262144, "
            "available_cpu_mem=120.5 GB",
            "[2026-07-01 10:01:00 TP0] Decode batch, #running-req: 1, #token: 90, token usage: "
            "0.00, accept len: 3.10, accept rate: 0.70, cuda graph: True, gen throughput "
            "(token/s): 99.0, #queue-req: 0",
        ]
    )
    facts = parse_sglang_log(log).facts
    assert facts["max_running_requests_reset_to_48"] is True
    assert (facts["max_running_requests_requested"], facts["max_running_requests_reduced_to"]) == (
        48,
        40,
    )
    assert facts["max_running_requests"] == 40
    assert facts["available_cpu_mem_gb"] == pytest.approx(120.5)
    assert facts["available_gpu_mem_gb"] is None
    assert facts["mamba_cache_size"] == 96
    assert facts["mamba_intermediate_ssm_state_gb"] == pytest.approx(1.5)
    assert facts["weights_gb"] == pytest.approx(40.5)
    assert facts["weights_gb_draft"] == pytest.approx(2.0)
    assert facts["weights_quant"] == "fp8"
    assert facts["accept_rate"] == [0.7]
    assert facts["spec"] is True and facts["spec_decided"] is True
    assert facts["spec_algorithm"] == "EAGLE (MTP draft Qwen3NextForCausalLMMTP)"
    assert facts["ready"] is False


def test_vllm_cpu_and_gpu_kv_spellings() -> None:
    cpu = parse_vllm_log(
        "(EngineCore pid=9) INFO 10-01 10:00:00 [kv_cache_utils.py:2327] CPU KV cache size: "
        "524,288 tokens, Maximum concurrency for 1,024 tokens per request: 512.00x"
    ).facts
    assert (cpu["kv_tokens"], cpu["max_concurrency"], cpu["max_model_len_for_concurrency"]) == (
        524288,
        512.0,
        1024,
    )
    gpu = parse_vllm_log("INFO [kv_cache_utils.py:1] GPU KV cache size: 1,234,567 tokens").facts
    assert gpu["kv_tokens"] == 1234567
    assert gpu["max_concurrency"] is None


def test_vllm_spec_config_echo_and_decided_flags() -> None:
    spec = parse_vllm_log(
        "INFO [core.py:1] Initializing a V1 LLM engine (v0.32.0) with config: model='m', "
        "speculative_config=SpeculativeConfig(method='ngram', model=None, num_spec_tokens=3), x=1"
    ).facts
    assert (spec["spec"], spec["spec_method"], spec["num_spec_tokens"]) == (True, "ngram", 3)
    assert spec["engine_version"] == "0.32.0"
    plain = parse_vllm_log(
        "INFO [core.py:1] Initializing a V1 LLM engine (v0.32.0) with config: model='m', "
        "speculative_config=None, tokenizer='m'"
    ).facts
    assert (plain["spec"], plain["spec_decided"]) == (False, True)
    unknown = parse_vllm_log("INFO [kv_cache_utils.py:1] GPU KV cache size: 10 tokens").facts
    assert (unknown["spec"], unknown["spec_decided"]) == (False, False)


def test_vllm_metrics_totals_sum_every_window(engine_logs_dir: Path) -> None:
    facts = parse_vllm_log(
        _load(engine_logs_dir, "vllm_v0230_mtp3_qwen36_27b_nvfp4_tp2_5060ti_2026-06.txt")
    ).facts
    assert (facts["accepted_total"], facts["drafted_total"]) == (493, 1365)
    assert facts["spec_decoding_metrics"][1]["per_position_acceptance_rate"] == [
        0.541,
        0.333,
        0.153,
    ]
    assert facts["engine_version"] == "0.23.0"
    assert facts["architecture"] == "Qwen3_5ForConditionalGeneration"
    assert facts["draft_architecture"] == "Qwen3_5MTP"


def test_vllm_block_override_is_not_capacity(engine_logs_dir: Path) -> None:
    facts = parse_vllm_log(
        _load(engine_logs_dir, "vllm_v018_qwen35_gguf_blocks_override_2026-04.txt")
    ).facts
    assert facts["num_gpu_blocks_override"] == 512
    assert facts["kv_blocks"] is None


def test_llamacpp_log_facts() -> None:
    log = "\n".join(
        [
            "llama_kv_cache:      CUDA0 KV buffer size =  1024.00 MiB",
            "llama_kv_cache: size = 1024.00 MiB ( 8192 cells,  32 layers,  4/4 seqs), K (f16): "
            "512.00 MiB, V (f16): 512.00 MiB",
            "srv    load_model: loading draft model 'draft.gguf'",
            "slot   load_model: id  0 | task -1 | initializing, n_slots = 4, n_ctx_slot = 2048",
            "main: model loaded",
            "slot print_timing: draft acceptance = 0.62500 (   10 accepted /    16 generated), "
            "mean len =  2.25",
        ]
    )
    facts = parse_llamacpp_log(log).facts
    assert (facts["kv_tokens"], facts["kv_layers"], facts["kv_size_mib"]) == (8192, 32, 1024.0)
    assert (facts["n_slots"], facts["n_ctx_slot"]) == (4, 2048)
    assert facts["spec"] is True and facts["ready"] is True
    assert (facts["accepted"], facts["drafted"]) == (10, 16)
    assert facts["draft_acceptance"][0]["mean_len"] == 2.25


_LOG_ALPHABET = st.sampled_from(
    [
        "KV Cache is allocated. #tokens: ",
        "dtype: ",
        "K size: ",
        "max_total_num_tokens=",
        "max_running_requests=",
        "Load weight end. ",
        "mem usage=",
        " GB",
        "Mamba Cache is allocated. max_mamba_cache_size: ",
        "SpecDecoding metrics: ",
        "Accepted: ",
        "Mean acceptance length: ",
        "SpeculativeConfig(",
        "'speculative_config': {",
        "GPU KV cache size: ",
        "Maximum concurrency for ",
        "draft acceptance = ",
        "[2026-01-01 00:00:00 TP0] ",
        "server_args=ServerArgs(",
        "speculative_algorithm='",
        "1.5.",
        "99999999999999999999999",
        ",",
        "\n",
        "\r\n",
        "(",
        ")",
        "x",
        "\x00",
        "é",
    ]
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.one_of(st.text(max_size=400), st.lists(_LOG_ALPHABET, max_size=60).map("".join)))
def test_parsers_never_raise(text: str) -> None:
    for parse in (parse_sglang_log, parse_vllm_log, parse_llamacpp_log):
        result = parse(text)
        assert "parse_error" not in result.facts, (parse.__name__, result.facts["parse_error"])
        json.dumps(result.to_json())  # always serialisable
