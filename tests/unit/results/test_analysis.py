"""Analysis on constructed runs whose answers are known exactly."""

from __future__ import annotations

import math

import pytest

from tailpod.results.analysis import (
    AnalysisSettings,
    analyze,
    best_k,
    bytes_model,
    cache_facts,
    capacity_drop,
    capacity_of,
    cost_per_tokens,
    find_crossover,
    find_knee,
    ratio_spread,
    spread,
)
from tailpod.results.io import STAMP
from tailpod.results.schema import FirstMismatch
from tests.unit.results.conftest import build_run

# --- statistics ----------------------------------------------------------------------------------


def test_spread_median_quartiles_and_iqr_are_exact() -> None:
    sp = spread([4.0, 1.0, 3.0, 2.0, None])
    assert sp is not None
    assert (sp["n"], sp["median"], sp["min"], sp["max"]) == (4, 2.5, 1.0, 4.0)
    assert (sp["q1"], sp["q3"], sp["iqr"]) == (1.75, 3.25, 1.5)
    one = spread([7.0])
    assert one is not None and (one["q1"], one["q3"], one["iqr"]) == (7.0, 7.0, 0.0)
    assert spread([None]) is None


def test_ratio_spread_is_conservative_and_flags_overlap() -> None:
    r = ratio_spread(spread([110, 120, 130]), spread([90, 100, 105]))
    assert r is not None
    assert r["speedup"] == pytest.approx(1.2)
    assert r["lo"] == pytest.approx(110 / 105)
    assert r["hi"] == pytest.approx(130 / 90)
    assert r["overlap"] is False
    assert ratio_spread(spread([100, 110]), spread([105, 120]))["overlap"] is True  # type: ignore[index]


# --- crossover -----------------------------------------------------------------------------------


def _pts(pairs: dict[int, float], overlap: set[int] | None = None) -> list[dict[str, object]]:
    return [
        {"concurrency": c, "speedup": s, "overlap": c in (overlap or set())}
        for c, s in pairs.items()
    ]


def test_crossover_between_2_and_4_interpolated_in_log2_and_linear() -> None:
    pts = _pts({1: 1.3, 2: 1.1, 4: 0.9, 8: 0.7})
    log2 = find_crossover(pts, "log2")
    assert log2["status"] == "crossover"
    assert log2["bracket"] == [2, 4]
    assert log2["concurrency"] == pytest.approx(2**1.5)  # halfway in log2 space: 2.828
    assert find_crossover(pts, "linear")["concurrency"] == pytest.approx(3.0)


def test_crossover_none_in_range_and_below_range() -> None:
    none = find_crossover(_pts({1: 1.5, 4: 1.2, 64: 1.01}))
    assert none["status"] == "none_in_range" and none["concurrency"] is None
    assert "c=64" in none["detail"]
    below = find_crossover(_pts({1: 0.95, 2: 0.9}))
    assert below["status"] == "below_range" and below["concurrency"] is None


def test_crossover_tie_at_a_measured_point_lands_exactly_there() -> None:
    tie = find_crossover(_pts({1: 1.2, 2: 1.1, 4: 1.0, 8: 0.8}))
    assert tie["status"] == "crossover"
    assert tie["concurrency"] == pytest.approx(4.0)
    assert find_crossover(_pts({1: 1.0, 2: 0.9}))["status"] == "below_range"


def test_crossover_with_overlapping_spreads_is_uncertain_but_still_estimated() -> None:
    res = find_crossover(_pts({1: 1.3, 2: 1.02, 4: 0.98}, overlap={2, 4}))
    assert res["status"] == "uncertain"
    assert res["concurrency"] == pytest.approx(2**1.5)
    assert "noise" in res["detail"]


def test_crossover_reports_a_later_recrossing() -> None:
    res = find_crossover(_pts({1: 1.2, 2: 0.9, 4: 1.05}))
    assert res["bracket"] == [1, 2] and res["recrossings"] == [4]


def test_run_level_crossover_from_reps_and_the_64_slot_example() -> None:

    run = build_run(
        {
            "plain": {
                1: [100, 101, 99],
                2: [190, 191, 189],
                4: [380, 381, 379],
                64: [5694, 5700, 5690],
            },
            "mtp-k3": {
                1: [160, 161, 159],
                2: [209, 210, 208],
                4: [342, 343, 341],
                64: [4242, 4250, 4240],
            },
        }
    )
    an = analyze(run)
    cx = next(c for c in an["crossover"] if c["arm"] == "mtp-k3")
    assert cx["status"] == "crossover" and cx["bracket"] == [2, 4]
    s2, s4 = 209 / 190, 342 / 380
    t = (s2 - 1) / (s2 - s4)
    assert cx["concurrency"] == pytest.approx(2 ** (1 + t))
    at64 = next(s for s in an["speedup"] if s["arm"] == "mtp-k3" and s["concurrency"] == 64)
    assert at64["throughput"]["speedup"] == pytest.approx(4242 / 5694)
    assert at64["throughput"]["lo"] == pytest.approx(4240 / 5700)
    assert at64["throughput"]["hi"] == pytest.approx(4250 / 5690)


def test_run_level_noisy_overlap_is_uncertain() -> None:

    run = build_run(
        {
            "plain": {1: [100, 110, 90], 2: [200, 230, 170]},
            "mtp-k2": {1: [130, 131, 129], 2: [195, 240, 150]},
        }
    )
    cx = analyze(run)["crossover"][0]
    assert cx["status"] == "uncertain"


# --- knee ----------------------------------------------------------------------------------------


def test_knee_at_c8_when_throughput_flattens_and_latency_doubles() -> None:
    pts = [
        {"concurrency": 1, "throughput": 60.0, "latency": 1.0},
        {"concurrency": 2, "throughput": 118.0, "latency": 1.02},
        {"concurrency": 4, "throughput": 230.0, "latency": 1.05},
        {"concurrency": 8, "throughput": 420.6, "latency": 1.2},
        {"concurrency": 16, "throughput": 425.0, "latency": 2.4},
        {"concurrency": 32, "throughput": 427.0, "latency": 4.8},
    ]
    knee = find_knee(pts)
    assert knee["status"] == "knee"
    assert knee["concurrency"] == 8 and knee["throughput"] == 420.6
    assert knee["sustained"] is True
    assert knee["steps"][3]["throughput_gain"] == pytest.approx(425 / 420.6 - 1)
    assert knee["steps"][3]["latency_growth"] == pytest.approx(1.0)


def test_knee_thresholds_are_settable_and_none_when_still_scaling() -> None:
    scaling = [
        {"concurrency": c, "throughput": 50.0 * c, "latency": 1.0 + 0.01 * c} for c in (1, 2, 4, 8)
    ]
    assert find_knee(scaling)["status"] == "none_in_range"
    gentle = [
        {"concurrency": 1, "throughput": 100.0, "latency": 1.0},
        {"concurrency": 2, "throughput": 115.0, "latency": 1.5},
    ]
    assert find_knee(gentle)["status"] == "none_in_range"  # +15% ≥ 10% default
    assert find_knee(gentle, throughput_gain=0.2)["concurrency"] == 1
    assert find_knee(gentle, throughput_gain=0.2, latency_growth=0.6)["status"] == "none_in_range"


def test_knee_not_sustained_is_reported() -> None:
    pts = [
        {"concurrency": 1, "throughput": 100.0, "latency": 1.0},
        {"concurrency": 2, "throughput": 102.0, "latency": 2.0},
        {"concurrency": 4, "throughput": 200.0, "latency": 2.1},
    ]
    knee = find_knee(pts)
    assert knee["concurrency"] == 1 and knee["sustained"] is False


def test_run_level_knee_uses_settings() -> None:

    run = build_run(
        {"plain": {4: [230.0], 8: [420.6], 16: [425.0]}},
        latency={"plain": {4: [1.0], 8: [1.1], 16: [2.2]}},
    )
    assert analyze(run)["knee"][0]["concurrency"] == 8
    strict = analyze(run, AnalysisSettings(knee_throughput_gain=0.005))
    assert strict["knee"][0]["status"] == "none_in_range"


# --- best K --------------------------------------------------------------------------------------


def _sp(v: float, lo: float | None = None, hi: float | None = None) -> dict[str, float]:
    return {"median": v, "min": v if lo is None else lo, "max": v if hi is None else hi}


def test_best_k_stops_when_the_next_k_is_worse() -> None:
    res = best_k({0: _sp(100), 1: _sp(140), 2: _sp(150), 3: _sp(145)})
    assert res["best_k"] == 2 and res["stops"] is True and res["next_k"] == 3
    assert res["within_noise"] is False
    assert "K=3 145.0 < K=2 150.0" in res["evidence"]


def test_best_k_largest_measured_is_not_shown_to_stop() -> None:
    res = best_k({0: _sp(100), 1: _sp(140), 2: _sp(150)})
    assert res["best_k"] == 2 and res["stops"] is False
    assert res["evidence"].startswith("not shown to stop")


def test_best_k_tie_goes_to_smaller_k_and_does_not_claim_a_stop() -> None:
    res = best_k({1: _sp(150), 2: _sp(150)})
    assert res["best_k"] == 1 and res["stops"] is False and "ties" in res["evidence"]


def test_best_k_stop_within_noise_is_labelled() -> None:
    res = best_k({2: _sp(150, 140, 160), 3: _sp(148, 139, 155)})
    assert res["stops"] is True and res["within_noise"] is True


def test_run_level_best_k_excludes_void_arms() -> None:

    run = build_run(
        {
            "plain": {1: [100.0]},
            "mtp-k1": {1: [140.0]},
            "mtp-k2": {1: [150.0]},
            "mtp-k3": {1: [170.0]},
        },
        void={"mtp-k3": "token mismatch"},
    )
    an = analyze(run)
    per = an["best_k"]["per_concurrency"][0]
    assert per["best_k"] == 2 and per["stops"] is False  # K=3 is void, so K=2 is the largest usable
    assert an["best_k"]["excluded_void"] == ["mtp-k3"]


def test_an_arm_that_delivered_nothing_somewhere_is_last_overall_not_a_crash() -> None:
    """An arm whose median was 0 tok/s at one concurrency (every request failed) crashed the
    overall best K with `math domain error` (log of 0). Its geometric mean is 0: it is last."""
    run = build_run({
        "plain": {1: [100.0], 2: [180.0]},
        "mtp-k1": {1: [150.0], 2: [0.0]},
        "mtp-k2": {1: [160.0], 2: [200.0]},
    })
    overall = analyze(run)["best_k"]["overall"][0]
    assert overall["over_concurrency"] == [1, 2]
    # geometric means: K=0 sqrt(100*180)=134.2, K=1 0, K=2 sqrt(160*200)=178.9
    assert overall["best_k"] == 2


# --- void arms -----------------------------------------------------------------------------------


def test_void_arm_never_produces_a_speedup_or_cost() -> None:

    run = build_run(
        {"plain": {1: [100.0], 2: [190.0]}, "mtp-k2": {1: [300.0], 2: [400.0]}},
        void={"mtp-k2": "gate failed at prompt 1"},
    )
    an = analyze(run)
    for s in an["speedup"]:
        assert s["void"] and s["throughput"] is None and s["decode"] is None
        assert s["reason"] == "VOID: gate failed at prompt 1"
    assert an["crossover"] == [
        {
            "arm": "mtp-k2",
            "status": "void",
            "concurrency": None,
            "detail": "VOID: gate failed at prompt 1",
        }
    ]
    assert all(c["status"] == "void" for c in an["cost"] if c["arm"] == "mtp-k2")


def test_gate_failure_without_a_reason_voids_the_arm_with_the_mismatch() -> None:

    run = build_run({"plain": {1: [100.0]}, "mtp-k2": {1: [150.0]}})
    arm = run.meta.arm("mtp-k2")
    assert arm is not None and arm.gate is not None
    arm.gate.status = "fail"
    arm.gate.first_mismatch = FirstMismatch(prompt=3, position=41)
    an = analyze(run)
    row = next(a for a in an["arms"] if a["label"] == "mtp-k2")
    assert (
        row["void"] and row["void_reason"] == "token-identity gate failed (prompt 3, position 41)"
    )


# --- capacity, cost, bytes -----------------------------------------------------------------------


def test_capacity_drop_from_sglang_startup_facts() -> None:
    plain = capacity_of(
        "sglang",
        {"kv_tokens": 700000, "max_total_num_tokens": 700000, "max_running_requests": 175},
        {},
    )
    spec = capacity_of("sglang", {"kv_tokens": 420000, "max_running_requests": 48}, {})
    drop = capacity_drop(plain, spec)
    assert drop["max_running_requests"] == {
        "from": 175,
        "to": 48,
        "change_pct": pytest.approx(-72.5714, abs=1e-3),
    }
    assert drop["kv_tokens"]["change_pct"] == pytest.approx(-40.0)
    assert "slots 175 → 48" in drop["detail"]


def test_capacity_vllm_facts_and_requested_cap() -> None:
    cap = capacity_of(
        "vllm", {"kv_tokens": "1,234,567", "max_concurrency": 2.37}, {"max_running_requests": 64}
    )
    assert cap["kv_tokens"] == 1234567 and cap["max_concurrency"] == 2.37
    assert cap["max_running_requests"] == 64 and cap["slots_source"].startswith("engine_config")


def test_cost_per_tokens_exact_and_unknown_price_is_never_zero() -> None:
    c = cost_per_tokens(2.0, 420.6)
    assert c["status"] == "ok"
    assert c["usd_per_1k"] == pytest.approx(2.0 / 3600 / 420.6 * 1000)
    assert c["usd_per_1m"] == pytest.approx(1.3209e-3 * 1000, rel=1e-3)
    unknown = cost_per_tokens(None, 420.6)
    assert unknown["status"] == "unknown" and unknown["usd_per_1k"] is None


def test_run_cost_with_unknown_price() -> None:

    an = analyze(build_run({"plain": {1: [100.0]}}, price=None))
    assert an["cost"][0]["status"] == "unknown" and an["cost"][0]["usd_per_1m"] is None
    assert any("price unknown" in w for w in an["warnings"])


def test_bytes_model_predicts_2_25x_and_attributes_the_residual() -> None:
    res = bytes_model(51.05, 22.67, 40.0, 76.0, {"b.kv_memory_gib": 6.0})
    assert res["predicted"] == pytest.approx(51.05 / 22.67)
    assert round(res["predicted"], 2) == 2.25
    assert res["measured"] == pytest.approx(1.9)
    assert res["residual"] == pytest.approx(1.9 / (51.05 / 22.67))
    # (Wa + U) / (Wb + U) = 1.9  =>  U = (51.05 - 1.9 * 22.67) / 0.9
    assert res["implied_untouched_gb"] == pytest.approx((51.05 - 1.9 * 22.67) / 0.9)
    assert "KV/state caches" in res["detail"] and "kv_memory_gib=6" in res["detail"]
    bare = bytes_model(51.05, 22.67, 40.0, 76.0, {})
    assert "unattributed" in bare["detail"]
    assert bytes_model(None, 22.67, 1.0, 2.0)["status"] == "unknown"


def test_cache_facts_picks_kv_and_state_sizes_only() -> None:
    facts = {
        "kv_memory_gib": 2.04,
        "weights_gib": 9.4,
        "mamba_ssm_state_gb": 1.5,
        "available_gpu_mem_gb": 3.0,
        "kv_tokens": 1000,
    }
    assert cache_facts(facts) == {"kv_memory_gib": 2.04, "mamba_ssm_state_gb": 1.5}


def test_run_bytes_model_between_two_plain_checkpoints() -> None:

    run = build_run(
        {"plain": {1: [40.0]}, "plain-nvfp4": {1: [80.0]}},
        decode={"plain": {1: [40.0]}, "plain-nvfp4": {1: [80.0]}},
        checkpoints={"plain": "org/m-bf16", "plain-nvfp4": "org/m-nvfp4"},
        facts={"plain": {"weights_gb": 51.05}, "plain-nvfp4": {"weights_gb": 22.67}},
    )
    bm = analyze(run)["bytes_model"]
    assert len(bm) == 1
    assert bm[0]["arm_a"] == "plain" and bm[0]["measured"] == pytest.approx(2.0)
    assert bm[0]["predicted"] == pytest.approx(2.2519, abs=1e-4)


# --- pooling, acceptance, stamps -----------------------------------------------------------------


def test_prompt_classes_pool_by_time_and_acceptance_by_counts() -> None:

    from tailpod.results.schema import Acceptance

    run = build_run(
        {"plain": {1: [100.0]}, "mtp-k2": {1: [150.0]}}, acceptance={"mtp-k2": (100, 200, 120)}
    )
    extra = run.cells[-1].model_copy(
        update={
            "prompt_class": "code",
            "cell": "mtp-k2|c1|r0|code",
            "wall_s": 50.0,
            "output_tokens": 12500,
            "output_tok_s": 250.0,
            "acceptance": Acceptance(
                drafts=50,
                draft_tokens=100,
                accepted=90,
                acceptance_length=2.8,
                acceptance_rate=0.9,
                per_position=[1.0, 0.8],
            ),
        }
    )
    run.cells.append(extra)
    an = analyze(run)
    cell = next(c for c in an["cells"] if c["arm"] == "mtp-k2")
    assert cell["output_tok_s"]["median"] == pytest.approx((15000 + 12500) / 150.0)
    assert cell["acceptance_length"]["median"] == pytest.approx(1 + 210 / 150)
    assert cell["acceptance_rate"]["median"] == pytest.approx(210 / 300)
    acc = next(a for a in an["acceptance"] if a["arm"] == "mtp-k2")
    assert acc["per_position"] == pytest.approx(
        [(0.8 * 100 + 1.0 * 50) / 150, (0.5 * 100 + 0.8 * 50) / 150]
    )
    only_code = analyze(run, AnalysisSettings(prompt_class="code"))
    assert (
        next(c for c in only_code["cells"] if c["arm"] == "mtp-k2")["output_tok_s"]["median"]
        == 250.0
    )


def test_broken_head_acceptance_is_warned() -> None:

    an = analyze(
        build_run(
            {"plain": {1: [100.0]}, "mtp-k2": {1: [99.0]}}, acceptance={"mtp-k2": (100, 200, 1)}
        )
    )
    assert any("acceptance length 1.01" in w for w in an["warnings"])


def test_off_pod_run_is_stamped_everywhere() -> None:

    an = analyze(
        build_run(
            {"plain": {1: [100.0], 2: [150.0]}, "mtp-k2": {1: [130.0], 2: [140.0]}},
            measured_from="off-pod",
        )
    )
    assert an["stamp"] == STAMP
    checked = 0
    for key, value in an.items():
        if isinstance(value, list) and value and isinstance(value[0], dict):
            for entry in value:
                assert entry["stamp"] == STAMP, key
                checked += 1
    assert checked > 10
    assert all(p["stamp"] == STAMP for p in an["best_k"]["per_concurrency"])


def test_on_pod_run_has_no_stamp() -> None:

    an = analyze(build_run({"plain": {1: [100.0]}}))
    assert an["stamp"] is None and "stamp" not in an["cells"][0]
    assert math.isclose(an["cells"][0]["output_tok_s"]["median"], 100.0)


def test_warm_cache_cells_are_kept_out_of_the_throughput_tables() -> None:
    run = build_run({"plain": {1: [100.0]}})
    run.cells.append(
        run.cells[0].model_copy(
            update={
                "cache": "warm",
                "cell": "plain|c1|r0|prose|warm",
                "output_tok_s": 500.0,
                "output_tokens": 50000,
            }
        )
    )
    an = analyze(run)
    assert an["cells"][0]["output_tok_s"]["median"] == 100.0
    assert "throughput tables use cold-cache cells only" in an["warnings"]
    pooled = analyze(run, AnalysisSettings(cache=None))
    assert pooled["cells"][0]["output_tok_s"]["median"] == pytest.approx(600 * 100 / 200)
    only_warm = build_run({"plain": {1: [100.0]}})
    only_warm.cells = [c.model_copy(update={"cache": "warm"}) for c in only_warm.cells]
    assert analyze(only_warm)["cells"][0]["output_tok_s"]["median"] == 100.0
