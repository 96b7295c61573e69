"""Multi-GPU pods: --gpu-count reaches the engine as tensor parallelism, and the startup facts
record the TP size and one GPU's KV pool (the provider side: tests/integration/cloud/test_cloud_multi_gpu.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tailpod.config import load_settings
from tailpod.engines.adapters import get_adapter
from tailpod.engines.base import EngineConfig
from tailpod.engines.sglang import parse_sglang_log
from tailpod.engines.vllm import parse_vllm_log
from tailpod.errors import ConfigError
from tests import paths

LOGS = paths.FIXTURES / "engine-logs"
TP_FLAG = {"vllm": "--tensor-parallel-size", "sglang": "--tp-size"}


def _argv(engine: str, tp: int, version: str | None) -> list[str]:
    cfg = EngineConfig(engine=engine, model="/m", tensor_parallel=tp, version=version,
                       max_running_requests=8)
    return get_adapter(engine).launch_plan(cfg).argv


@pytest.mark.parametrize("engine", ["vllm", "sglang"])
@pytest.mark.parametrize("version", [None, "0.4.3", "0.11.0", "2024-12-01", "2026-08-01"])
def test_tp_flag_is_spelled_the_same_for_every_version(engine: str, version: str | None) -> None:
    argv = _argv(engine, 4, version)
    flag = TP_FLAG[engine]
    assert argv[argv.index(flag) + 1] == "4"
    assert [a for a in argv if a.startswith(("--tp", "--tensor"))] == [flag]


@pytest.mark.parametrize("engine", ["vllm", "sglang"])
def test_one_gpu_sends_no_tp_flag_and_zero_gpus_are_refused(engine: str) -> None:
    assert TP_FLAG[engine] not in _argv(engine, 1, None)
    with pytest.raises(ConfigError, match="at least 1"):
        _argv(engine, 0, None)


def test_gpu_count_becomes_the_tensor_parallel_size_of_a_cloud_pod(tmp_path: Path) -> None:
    settings = load_settings(env={"TAILPOD_HOME": str(tmp_path), "TAILPOD_GPU_COUNT": "4"},
                             dotenv_path=tmp_path / "absent.env")
    cfg = EngineConfig(engine="vllm", model="/m").on_gpus(settings.gpu_count)
    assert cfg.tensor_parallel == 4
    argv = get_adapter("vllm").launch_plan(cfg).argv
    assert argv[argv.index("--tensor-parallel-size") + 1] == "4"


# --- startup facts of real TP logs (tests/fixtures/engine-logs, sources in index.json) ---------


def _log(name: str) -> str:
    return (LOGS / name).read_text(encoding="utf-8")


def test_sglang_tp4_records_four_ranks_and_one_gpus_kv_pool() -> None:
    facts = parse_sglang_log(_log("sglang_qwq32b_tp4_2025-03.txt")).facts
    assert facts["tp_ranks_logged"] == 4
    assert facts["tp_size"] is None  # the excerpt has no server_args echo: not guessed
    # Each rank prints "K size: 1.42 GB, V size: 1.42 GB" for its own shard.
    assert facts["kv_gib_per_gpu"] == pytest.approx(2.84)
    assert facts["kv_tokens"] == 46611


def test_vllm_tp4_records_four_workers_and_one_gpus_kv_memory() -> None:
    facts = parse_vllm_log(_log("vllm_v011_qwen3vl30b_tp4_3090_2025-10.txt")).facts
    assert facts["tp_ranks_logged"] == 4
    assert facts["kv_gib_per_gpu"] == pytest.approx(2.31)  # "Available KV cache memory", per worker
    assert facts["kv_tokens"] == 100752  # the pool across the TP group, printed once per worker


def test_sglang_tp16_over_two_nodes_logs_only_this_nodes_ranks() -> None:
    facts = parse_sglang_log(_log("sglang_deepseek_v3_tp16_k8s_docs_2025-02.txt")).facts
    assert facts["tp_ranks_logged"] == 8  # TP0..TP7: the other node's 8 ranks log elsewhere
    assert facts["tp_size"] is None and facts["kv_gib_per_gpu"] is None  # not printed: void
    assert facts["max_total_num_tokens"] == 712400


def test_tp_size_is_read_from_the_engines_own_echo() -> None:
    vllm = parse_vllm_log(_log("vllm_v0230_mtp3_qwen36_27b_nvfp4_tp2_5060ti_2026-06.txt")).facts
    assert vllm["tp_size"] == 2 and vllm["tp_ranks_logged"] == 2
    sglang = parse_sglang_log(_log("sglang_eagle_llama2_docsci_2025-04.txt")).facts
    assert sglang["tp_size"] == 1
    # a draft's TP size in the speculative config is not the server's
    draft_only = parse_vllm_log("SpeculativeConfig(method='eagle', draft_tensor_parallel_size=1)")
    assert draft_only.facts["tp_size"] is None
