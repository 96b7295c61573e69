"""The matrix projection's setup and restart from an earlier run of the same card and engine
(measure/matrix_run.py measured_start, CostModel.for_card), and the defaults when none measured
them. Earlier runs are written by the results writer (results/io.py write_run); their phases are
parsed from the real vLLM 0.26 H200 logs in tests/fixtures/engine-logs, and the expected minutes
are worked by hand in the comments."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tailpod.engines.vllm import parse_vllm_log
from tailpod.measure.matrix_run import CostModel, measured_start, start_line
from tailpod.provision.volumes import cold_start
from tailpod.results.io import write_run
from tailpod.results.matrix import Card
from tests import paths
from tests.helpers.run_builder import build_run

LOGS = paths.FIXTURES / "engine-logs"
H200 = Card("runpod", "NVIDIA H200")
WARM_LOG = "vllm_v0260_plain_gpu_target_h200_cache_hit_2026-12.txt"
COLD_LOG = "vllm_v0260_plain_gpu_target_h200_cold_2026-12.txt"


def _facts(log: str) -> dict[str, Any]:
    return parse_vllm_log((LOGS / log).read_text()).facts


def _earlier(results: Path, run_id: str, *, created: str = "2026-12-01T10:00:00+00:00",
             gpu: str = "NVIDIA H200", count: int = 1, cold: dict[str, Any] | None = None,
             restarts: dict[str, float] | None = None, facts: dict[str, Any] | None = None,
             engine: str = "vllm") -> None:
    run = build_run({"plain": {1: [10.0]}, "mtp-k2": {1: [12.0]}}, run_id=run_id,
                    facts={"plain": facts or {}})
    run.meta.provider, run.meta.created_at = "runpod", created
    run.meta.pod.gpu, run.meta.pod.gpu_count = gpu, count
    run.meta.engine.name = engine
    run.meta.cold_start = cold
    for arm in run.meta.arms:
        arm.restart_s = (restarts or {}).get(arm.label)
    write_run(run, results / run_id)


def test_a_measured_start_replaces_the_defaults(tmp_path: Path) -> None:
    # created at 1000, serving at 1180: 180 s billed to serving = 3 min; the mtp arm's restart
    # took 95 s = 1.5833 min
    cold = cold_start([{"t": 1000.0, "event": "creating"}], 3.6, 1180.0, _facts(COLD_LOG), None)
    _earlier(tmp_path, "h200-cold", cold=cold, restarts={"mtp-k2": 95.0})
    start = measured_start(tmp_path, H200, "vllm")
    assert start is not None and start.run_id == "h200-cold"
    assert start.setup_s == 180.0 and start.restart_s == 95.0
    assert start.restart_from == "arm restarts" and start.compile_cache_hit is False
    cost, used = CostModel().for_card(start)
    assert (cost.setup_min, cost.restart_min) == (3.0, 1.5833)
    assert used["setup_from"] == "measured: billed to serving"
    assert used["restart_from"] == "measured: arm restarts"
    # 3 + 1.5833 (one further arm) + 10 cells x 1 min + 2 min teardown
    assert cost.card_hours(2, 10) == pytest.approx((3 + 1.5833 + 10 + 2) / 60)
    assert start_line(used) == ("setup 3 min (measured: billed to serving), restart 1.58 min "
                                "(measured: arm restarts) from run h200-cold, compiled")


def test_without_a_timed_restart_the_phases_give_the_restart(tmp_path: Path) -> None:
    # a local run: no cold_start, its plain arm's phases from the cache-hit log, no arm restarted:
    # the model load 2.429280 s + init engine 13.96 s = 16.38928 s = 0.2732 min
    _earlier(tmp_path, "h200-warm", facts=_facts(WARM_LOG))
    cost, used = CostModel().for_card(measured_start(tmp_path, H200, "vllm"))
    assert cost.restart_min == 0.2732 and used["restart_from"] == "measured: startup phases"
    assert cost.setup_min == 20.0 and used["setup_from"] == "default"  # nothing billed
    assert used["compile_cache_hit"] is True


def test_only_the_same_card_and_engine_count_and_the_latest_wins(tmp_path: Path) -> None:
    cold = cold_start([{"t": 0.0, "event": "creating"}], 3.6, 600.0, {}, None)  # 10 min
    _earlier(tmp_path, "other-gpu", gpu="NVIDIA H100 80GB HBM3", cold=cold)
    _earlier(tmp_path, "two-gpus", count=2, cold=cold)
    _earlier(tmp_path, "sglang", engine="sglang", cold=cold)
    assert measured_start(tmp_path, H200, "vllm") is None
    later = cold_start([{"t": 0.0, "event": "creating"}], 3.6, 300.0, {}, None)  # 5 min
    _earlier(tmp_path / "mx-1", "runpod-nvidia-h200", created="2026-12-02T10:00:00+00:00",
             cold=later)  # a matrix card's run directory, one level down
    _earlier(tmp_path, "older", created="2026-11-30T10:00:00+00:00", cold=cold)
    start = measured_start(tmp_path, Card("runpod", "nvidia  h200"), "vllm")
    assert start is not None and start.run_id == "runpod-nvidia-h200" and start.setup_s == 300.0
    (tmp_path / "broken").mkdir()
    (tmp_path / "broken" / "run.json").write_text("{not json")
    assert measured_start(tmp_path, H200, "vllm") == start


def test_no_earlier_run_and_pinned_flags_keep_their_figures(tmp_path: Path) -> None:
    cost, used = CostModel().for_card(None)
    assert (cost.setup_min, cost.restart_min) == (20.0, 3.0)
    assert start_line(used) == "setup 20 min (default), restart 3 min (default)"
    cold = cold_start([{"t": 0.0, "event": "creating"}], 3.6, 120.0, {}, None)
    _earlier(tmp_path, "measured", cold=cold, restarts={"mtp-k2": 60.0})
    pinned = CostModel(setup_min=7.0, pin_setup=True)
    cost, used = pinned.for_card(measured_start(tmp_path, H200, "vllm"))
    assert (cost.setup_min, cost.restart_min) == (7.0, 1.0)  # the flag's 7; 60 s measured
    assert used["setup_from"] == "--setup-minutes" and used["run_id"] == "measured"
