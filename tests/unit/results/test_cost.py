"""Pod vs serverless verdicts on constructed request logs, and buy vs rent."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tailpod.errors import ConfigError, TailpodError
from tailpod.results.cost import (
    LoggedRequest,
    busy_intervals,
    concurrency_projection,
    cost_verdict,
    duty_cycle,
    load_request_log,
    own_box_cost,
    parse_request_log,
    serverless_billing,
)


def sequential_log(n: int, duration: float, gap: float, t0: float = 1000.0) -> list[LoggedRequest]:
    out, t = [], t0
    for _ in range(n):
        out.append(LoggedRequest(t, t + duration, completion_tokens=100))
        t += duration + gap
    return out


def test_busy_intervals_merge_overlaps_and_duty_is_exact() -> None:
    reqs = [
        LoggedRequest(0, 4),
        LoggedRequest(2, 6),
        LoggedRequest(10, 12),
        LoggedRequest(11, 11.5),
    ]
    assert busy_intervals(reqs) == [(0, 6), (10, 12)]
    d = duty_cycle(reqs)
    assert d["span_s"] == 12 and d["busy_s"] == 8 and d["duty"] == pytest.approx(8 / 12)
    assert d["gaps"] == [4] and d["mean_in_flight"] == pytest.approx((4 + 4 + 2 + 0.5) / 8)


def test_short_gaps_make_naive_serverless_lose() -> None:
    # 976 requests, 34.9 % busy, 4.1 s gaps: the duty cycle alone says serverless.
    reqs = sequential_log(976, 2.198, 4.1)
    res = cost_verdict(
        reqs, pod_usd_hr=2.0, serverless_usd_hr=4.0, cold_start_s=30, idle_timeout_s=5
    )
    d = res["duty"]
    assert d["requests"] == 976
    assert d["duty"] == pytest.approx(976 * 2.198 / (976 * 2.198 + 975 * 4.1))
    assert round(d["duty"], 3) == 0.349
    assert d["gap_stats"]["mean"] == pytest.approx(4.1)
    assert res["break_even_duty"] == 0.5
    assert res["naive_verdict"] == "serverless"
    assert res["verdict"] == "pod"
    assert res["serverless_billing"]["gaps_scaled_to_zero"] == 0
    assert res["serverless_billing"]["billed_s"] == pytest.approx(d["span_s"] + 30 + 5)
    assert res["pod_cost_usd"] == pytest.approx(2.0 * d["span_s"] / 3600)
    assert "nothing scales to zero" in res["reason"]
    assert "975 of 975 gaps" in res["reason"]


def test_short_gaps_lose_even_with_the_best_case_policy() -> None:
    res = cost_verdict(sequential_log(976, 2.198, 4.1), 2.0, 4.0, cold_start_s=30)
    assert res["naive_verdict"] == "serverless" and res["verdict"] == "pod"
    assert res["serverless_billing"]["policy"].startswith("best case")


def test_scaling_down_faster_than_the_cold_start_does_not_rescue_serverless() -> None:
    # idle timeout 2 s < 4.1 s gaps < 30 s cold start: it scales down, then pays a cold start.
    res = cost_verdict(sequential_log(100, 2.198, 4.1), 2.0, 4.0, cold_start_s=30, idle_timeout_s=2)
    assert res["verdict"] == "pod"
    assert res["serverless_billing"]["cold_starts"] == 100
    assert (
        "99 of 99 gaps are shorter than the cold start (30 s) / idle timeout (2 s)" in res["reason"]
    )


def test_long_gaps_let_serverless_win() -> None:
    reqs = sequential_log(20, 10.0, 600.0)
    res = cost_verdict(
        reqs, pod_usd_hr=2.0, serverless_usd_hr=4.0, cold_start_s=30, idle_timeout_s=5
    )
    assert res["verdict"] == "serverless" and res["naive_verdict"] == "serverless"
    bill = res["serverless_billing"]
    assert bill["cold_starts"] == 20 and bill["gaps_scaled_to_zero"] == 19
    assert bill["billed_s"] == pytest.approx(200 + 30 + 19 * (5 + 30) + 5)
    assert res["serverless_cost_usd"] == pytest.approx(4.0 * bill["billed_s"] / 3600)
    assert res["cold_start_latency_added_s"] == 600


def test_busy_pod_wins_on_duty_alone() -> None:
    res = cost_verdict(sequential_log(50, 9.0, 1.0), 2.0, 4.0, cold_start_s=30)
    assert res["naive_verdict"] == "pod" and res["verdict"] == "pod"
    assert "at or above the 50.0% break-even" in res["reason"]


def test_serverless_billing_best_case_policy_is_exact() -> None:
    bill = serverless_billing(busy_s=10, gaps=[5, 50], cold_start_s=20, idle_timeout_s=None)
    assert bill["billed_s"] == 10 + 20 + 5 + 20 and bill["cold_starts"] == 2


def test_bad_rates_are_config_errors() -> None:
    with pytest.raises(ConfigError):
        cost_verdict(sequential_log(2, 1, 1), 0, 4.0, 1)


def test_request_log_format_and_rows_jsonl(tmp_path: Path) -> None:
    lines = [
        json.dumps({"t_start": 10.0, "t_end": 12.0, "completion_tokens": 50}),
        json.dumps({"ts": 20.0, "duration_s": 1.0}),
        json.dumps(
            {
                "kind": "request",
                "t_start": 30.0,
                "e2e_s": 2.0,
                "completion_tokens": 7,
                "prompt_tokens": 3,
            }
        ),
        json.dumps({"kind": "cell", "wall_s": 10}),
        json.dumps({"t_start": 40.0}),  # never finished: no busy interval
        "",
    ]
    reqs = parse_request_log(lines)
    assert [(r.t_start, r.t_end) for r in reqs] == [(10, 12), (20, 21), (30, 32)]
    assert reqs[2].prompt_tokens == 3
    (tmp_path / "rows.jsonl").write_text("\n".join(lines))
    assert len(load_request_log(tmp_path)) == 3
    with pytest.raises(TailpodError, match="no t_start"):
        parse_request_log([json.dumps({"t_end": 3})])
    with pytest.raises(TailpodError, match="not found"):
        load_request_log(tmp_path / "absent.jsonl")


def test_concurrency_projection_from_a_throughput_curve() -> None:
    d = duty_cycle(sequential_log(10, 2.0, 4.0))  # 1000 tokens over a 56 s span
    proj = concurrency_projection(d, {1: 50.0, 8: 400.0}, pod_usd_hr=3.6, serverless_usd_hr=7.2)
    assert proj["status"] == "ok"
    c8 = proj["rows"][1]
    assert c8["busy_s"] == pytest.approx(1000 / 400)
    assert c8["pod_cost_usd"] == pytest.approx(3.6 * 2.5 / 3600)
    assert c8["usd_per_1m"] == pytest.approx(3.6 / 3600 / 400 * 1e6)
    assert c8["saving_vs_current_usd"] == pytest.approx(3.6 * 56 / 3600 - 3.6 * 2.5 / 3600)
    assert concurrency_projection(d, {}, 3.6)["status"] == "unknown"


def test_own_box_cost_lists_assumptions_and_exact_numbers() -> None:
    res = own_box_cost(30000, 0.3, 3, 700, 0.15, 0.5, 1000, idle_power_w=100, rent_usd_hr=2.5)
    capex = 30000 * 0.7 / (3 * 8760)
    power = 0.5 * 0.105 + 0.5 * 0.015
    assert res["capex_usd_hr"] == pytest.approx(capex)
    assert res["power_usd_hr"] == pytest.approx(power)
    assert res["usd_per_mtok"] == pytest.approx((capex + power) / 1.8)
    assert res["usd_per_mtok_capex"] + res["usd_per_mtok_power"] == pytest.approx(
        res["usd_per_mtok"]
    )
    assert res["rent_usd_per_mtok"] == pytest.approx(2.5 / 3.6)
    assert res["break_even_utilization"] == pytest.approx((capex + 0.015) / (2.5 - 0.09))
    assert res["verdict"].startswith("buy")
    names = [a["name"] for a in res["assumptions"]]
    assert names[:3] == ["purchase price", "resale after the period", "period"]
    assert len(names) == 8
    low = own_box_cost(30000, 0.3, 3, 700, 0.15, 0.2, 1000, idle_power_w=100, rent_usd_hr=2.5)
    assert low["verdict"].startswith("rent")
    never = own_box_cost(30000, 0.0, 1, 700, 0.15, 0.5, 10, rent_usd_hr=0.05)
    assert never["break_even_utilization"] is None and "never" in never["verdict"]
    with pytest.raises(ConfigError, match="utilization"):
        own_box_cost(1, 0, 1, 1, 1, 0, 1)
