"""Acceptance: run-scoped counter deltas, one normalised convention, the native figure kept."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from tailpod.agent.probes import metrics
from tailpod.sandbox.synthetic_server import SyntheticServer

from .conftest import probe_run, sweep_cells


def _vllm(drafts: float, draft_tokens: float, accepted: float, per_pos: dict[str, float],
          gen: float = 0.0) -> dict:
    return {"drafts": drafts, "draft_tokens": draft_tokens, "accepted": accepted,
            "per_pos": per_pos, "generation_tokens": gen}


def test_vllm_deltas_normalise_exactly() -> None:
    before = _vllm(100, 300, 150, {"0": 80, "1": 50, "2": 20})
    after = _vllm(600, 1800, 1536, {"0": 561, "1": 511, "2": 464})
    acc, flags = metrics.acceptance_from_vllm(before, after)
    assert flags == [] and acc is not None
    assert acc["drafts"] == 500 and acc["draft_tokens"] == 1500 and acc["accepted"] == 1386
    assert acc["acceptance_length"] == pytest.approx(1 + 1386 / 500)
    assert acc["acceptance_rate"] == pytest.approx(1386 / 1500)
    assert acc["per_position"] == pytest.approx([481 / 500, 461 / 500, 444 / 500])
    assert acc["source"] == "vllm_metrics"
    assert acc["native"]["num_accepted_tokens"] == 1386  # the engine's own figures kept


def test_zero_drafts_is_not_a_measurement() -> None:
    same = _vllm(10, 30, 5, {"0": 5})
    acc, flags = metrics.acceptance_from_vllm(same, same)
    assert acc is not None and acc["acceptance_length"] is None and acc["acceptance_rate"] is None
    assert flags == ["no_drafts"]


def test_missing_counters_mean_no_acceptance() -> None:
    assert metrics.acceptance_from_vllm({}, {}) == (None, [])
    empty: dict = {"drafts": None, "draft_tokens": None, "accepted": None, "per_pos": {}}
    assert metrics.acceptance_from_vllm(empty, empty) == (None, [])


def test_counter_reset_is_flagged_not_reported() -> None:
    acc, flags = metrics.acceptance_from_vllm(_vllm(100, 300, 90, {}), _vllm(5, 15, 3, {}))
    assert acc is None and flags == ["counter_reset"]


def test_floors_hold() -> None:
    acc = metrics.normalise_acceptance(10, 30, -4, [-1.0], "x", {})
    assert acc["acceptance_length"] == 1.0 and acc["acceptance_rate"] == 0.0
    assert acc["per_position"] == [0.0]


def test_sglang_metrics_remove_the_prefill_token() -> None:
    before = {"verify_calls": 0, "generation_tokens": 0, "requests": 0, "num_draft_tokens": 4}
    # 4 requests x 64 tokens = 256; 1 token each from prefill; 84 verifies
    after = {"verify_calls": 84, "generation_tokens": 256, "requests": 4, "num_draft_tokens": 4}
    acc, _ = metrics.acceptance_from_sglang_metrics(before, after, finished_requests=4)
    assert acc is not None
    assert acc["accepted"] == 256 - 4 - 84
    assert acc["acceptance_length"] == pytest.approx((256 - 4) / 84)
    assert acc["draft_tokens"] == 84 * 3
    assert acc["native"]["accept_length"] == pytest.approx(256 / 84)


def test_sglang_meta_is_token_weighted() -> None:
    metas = [{"completion_tokens": 64, "spec_verify_ct": 21},
             {"completion_tokens": 32, "spec_verify_ct": 31},
             {"completion_tokens": 8}]  # no spec fields: not counted
    acc = metrics.acceptance_from_sglang_meta(metas)
    assert acc is not None and acc["source"] == "sglang_meta"
    assert acc["drafts"] == 52
    assert acc["acceptance_length"] == pytest.approx(1 + (96 - 2 - 52) / 52)
    assert acc["native"]["accept_length"] == pytest.approx(96 / 52)
    assert metrics.acceptance_from_sglang_meta([{"completion_tokens": 5}]) is None


def _run(server: SyntheticServer, **options: object) -> list[dict]:
    return probe_run({"base_url": server.base_url, "requests_per_cell": 6, "max_tokens": 40,
                      **options}, sweep_cells("spec", [3], ["prose"]))


def _expected(pattern: tuple[int, ...], n: int, k: int) -> tuple[int, int, list[int]]:
    """Drafts, accepted and per-position hits the synthetic server emits for one request."""
    sizes, done, j = [], 1, 0
    while done < n:
        m = min(n - done, pattern[j % len(pattern)])
        sizes.append(m)
        done, j = done + m, j + 1
    per_pos = [sum(1 for m in sizes if m - 1 > p) for p in range(k)]
    return len(sizes), sum(min(m - 1, k) for m in sizes), per_pos


def test_cell_acceptance_is_scoped_to_the_measured_requests(
    synthetic: Callable[..., SyntheticServer], tmp_path: Path
) -> None:
    pattern, k = (1, 4, 2, 3), 3
    server = synthetic(tokens_per_chunk=pattern, spec_k=k, engines=2)
    # traffic before the run (and the probe's own warm-up) must not enter the window
    probe_run({"base_url": server.base_url, "requests_per_cell": 3, "max_tokens": 17},
              sweep_cells("default", [1], ["code"]))
    rows = _run(server, warmup=2)
    cell = rows[-1]
    drafts, accepted, per_pos = _expected(pattern, 40, k)
    acc = cell["acceptance"]
    assert acc["drafts"] == 6 * drafts and acc["accepted"] == 6 * accepted
    assert acc["draft_tokens"] == 6 * drafts * k
    assert acc["acceptance_length"] == pytest.approx(1 + accepted / drafts)
    assert acc["acceptance_rate"] == pytest.approx(accepted / (drafts * k))
    assert acc["per_position"] == pytest.approx([p / drafts for p in per_pos])
    assert "acceptance_window_mismatch" not in cell["flags"]
    # several tokens per chunk, yet tokens come from usage: exactly max_tokens each
    reqs = [r for r in rows if r["kind"] == "request"]
    assert all(r["completion_tokens"] == 40 and r["chunks"] < 40 for r in reqs)
    assert cell["output_tokens"] == 240


def test_no_spec_counters_means_acceptance_null(
    synthetic: Callable[..., SyntheticServer], tmp_path: Path
) -> None:
    server = synthetic(spec_k=0)
    cell = _run(server)[-1]
    assert cell["acceptance"] is None
    none_server = synthetic(metrics="none")
    cell = _run(none_server)[-1]
    assert cell["acceptance"] is None


def test_sglang_metrics_path_end_to_end(
    synthetic: Callable[..., SyntheticServer], tmp_path: Path
) -> None:
    server = synthetic(metrics="sglang", spec_k=2, tokens_per_chunk=(3,))
    cell = _run(server, engine="sglang")[-1]
    drafts, accepted, _ = _expected((3,), 40, 2)
    acc = cell["acceptance"]
    assert acc["source"] == "sglang_metrics"
    assert acc["drafts"] == 6 * drafts and acc["accepted"] == 6 * accepted
    assert acc["acceptance_length"] == pytest.approx(1 + accepted / drafts)


def test_sglang_generate_path_reads_meta_info(
    synthetic: Callable[..., SyntheticServer], tmp_path: Path
) -> None:
    server = synthetic(metrics="sglang", spec_k=2, tokens_per_chunk=(3, 1))
    rows = _run(server, engine="sglang", api="generate")
    cell = rows[-1]
    drafts, accepted, _ = _expected((3, 1), 40, 2)
    acc = cell["acceptance"]
    assert acc["source"] == "sglang_meta"
    assert acc["drafts"] == 6 * drafts
    assert acc["acceptance_length"] == pytest.approx(1 + accepted / drafts)
    assert all(r["completion_tokens"] == 40 for r in rows if r["kind"] == "request")
    assert all(s and s.startswith("tailpod-") for s in server.stats.salts)  # extra_key
