"""The traffic advice in `tailpod cost` (results/cost.py traffic_advice): the concurrency a request
log really ran at against the card's knee, and what pushing the client to the knee saves at the
same hourly rate. Every expected figure is worked out by hand in the comments."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from tailpod.results.cost import LoggedRequest, duty_cycle, traffic_advice, with_traffic_advice
from tailpod.results.io import write_run
from tests.helpers.run_builder import build_run

# Four requests: [0,4], [2,6], [10,12], [11,11.5]; 100 output tokens each.
# Request-seconds 4 + 4 + 2 + 0.5 = 10.5 over a 12 s span -> 0.875 in flight on average;
# busy time [0,6] + [10,12] = 8 s -> 10.5 / 8 = 1.3125 while busy; 400 tokens / 12 s = 33.33 tok/s.
LOG = [(0.0, 4.0), (2.0, 6.0), (10.0, 12.0), (11.0, 11.5)]
KNEE = {"arm": "plain", "status": "knee", "concurrency": 4, "throughput": 200.0}


def _reqs(spans: list[tuple[float, float]], tokens: int | None = 100) -> list[LoggedRequest]:
    return [LoggedRequest(a, b, completion_tokens=tokens) for a, b in spans]


def test_the_log_ran_at_its_mean_in_flight_and_the_knee_saves_the_rest() -> None:
    adv = traffic_advice(duty_cycle(_reqs(LOG)), KNEE, {1: 60.0, 4: 200.0}, 3.6, "plain")
    assert adv["status"] == "ok"
    assert adv["mean_in_flight"] == pytest.approx(0.875)
    assert adv["mean_in_flight_busy"] == pytest.approx(1.3125)
    assert adv["tok_s_wall"] == pytest.approx(400 / 12)
    assert adv["knee_concurrency"] == 4 and adv["headroom"] == pytest.approx(4 / 0.875)
    # now: 3.6 $/h over 12 s = $0.012; at the knee 400 tokens / 200 tok/s = 2 s = $0.002.
    assert adv["current_pod_cost_usd"] == pytest.approx(0.012)
    assert adv["knee_busy_s"] == pytest.approx(2.0)
    assert adv["knee_pod_cost_usd"] == pytest.approx(0.002)
    assert adv["saving_usd"] == pytest.approx(0.010)
    assert adv["saving_fraction"] == pytest.approx(10 / 12)
    assert adv["lower_bound"] is False
    assert "0.88 requests in flight" in adv["summary"] and "c=4" in adv["summary"]
    assert "saving $0.0100 (83%)" in adv["summary"]


def test_a_log_already_at_the_knee_is_told_so() -> None:
    # four requests over the same [0,10]: 40 request-seconds / 10 s = 4.0 in flight = the knee
    adv = traffic_advice(duty_cycle(_reqs([(0.0, 10.0)] * 4)), KNEE, {4: 200.0}, 3.6, "plain")
    assert adv["mean_in_flight"] == pytest.approx(4.0)
    assert adv["status"] == "at_knee" and "buys latency, not tokens" in adv["summary"]


def test_no_knee_in_range_takes_the_highest_c_as_a_lower_bound() -> None:
    none = {"arm": "plain", "status": "none_in_range", "concurrency": None}
    adv = traffic_advice(duty_cycle(_reqs(LOG)), none, {1: 60.0, 8: 400.0}, 3.6, "plain")
    # 400 tokens / 400 tok/s = 1 s = $0.001; $0.012 - $0.001 = $0.011, at least.
    assert adv["knee_concurrency"] == 8 and adv["lower_bound"] is True
    assert adv["saving_usd"] == pytest.approx(0.011)
    assert "saving at least $0.0110" in adv["summary"]


def test_without_tokens_or_curve_the_saving_is_not_guessed() -> None:
    no_tok = traffic_advice(duty_cycle(_reqs(LOG, tokens=None)), KNEE, {4: 200.0}, 3.6, "plain")
    assert no_tok["status"] == "no_tokens" and "saving_usd" not in no_tok
    assert no_tok["mean_in_flight"] == pytest.approx(0.875)
    assert traffic_advice(duty_cycle(_reqs(LOG)), None, {}, 3.6)["status"] == "unknown"
    res = with_traffic_advice({"reason": "pod wins"}, {"summary": "x"})
    assert res["reason"] == "pod wins. Traffic: x" and res["traffic"] == {"summary": "x"}


def test_cost_cli_puts_the_advice_in_its_verdict(app: typer.Typer, tmp_path: Path) -> None:
    # plain: 100, 190, 360, 380 tok/s at c=1,2,4,8, e2e p50 = c s (the builder's default).
    # 4 -> 8: throughput +5.6% (< 10%) while latency +100% (> 25%): the knee is c=4, 360 tok/s.
    run_dir = write_run(build_run({"plain": {1: [100.0], 2: [190.0], 4: [360.0], 8: [380.0]}},
                                  run_id="knee", price=3.6), tmp_path / "knee")
    log = tmp_path / "log.jsonl"
    log.write_text("".join(json.dumps({"t_start": a, "t_end": b, "completion_tokens": 100}) + "\n"
                           for a, b in LOG))
    base = ["cost", "--trace", str(log), "--pod-usd-hr", "3.6", "--serverless-usd-hr", "7.2",
            "--cold-start-s", "30", "--run", str(run_dir)]
    res = CliRunner().invoke(app, [*base, "--json"])
    assert res.exit_code == 0, res.output
    out = json.loads(res.stdout)
    adv = out["traffic"]
    assert adv["knee_concurrency"] == 4 and adv["knee_tok_s"] == pytest.approx(360.0)
    assert adv["mean_in_flight"] == pytest.approx(0.875)
    # 400 tokens / 360 tok/s = 1.111 s = $0.001111; $0.012 - that = $0.010889
    assert adv["saving_usd"] == pytest.approx(0.012 - 3.6 * (400 / 360) / 3600)
    assert "Traffic: the log ran at 0.88 requests in flight" in out["reason"]
    text = CliRunner().invoke(app, base)
    assert text.exit_code == 0 and "Traffic:" in text.output and "knee (plain) is c=4" in text.output
