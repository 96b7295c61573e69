"""`tailpod cost --log RUN` on a short sandbox run printed "… $0.0000 instead of $0.0000 at
$0.19/h, saving at least $-0.0000 (-0%) if the pod is released when done" and a projection row
"saves $-0.0000 vs the current pod": a saving below zero sold as one. Where the knee's pod time is
no less than the log's span, the advice says there is nothing to save, and a projection row that
costs more says so."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from tailpod.results.cost import LoggedRequest, duty_cycle, traffic_advice
from tailpod.results.io import write_run
from tests.helpers.run_builder import build_run

KNEE = {"arm": "plain", "status": "knee", "concurrency": 4, "throughput": 200.0}


def test_a_log_faster_than_the_knee_is_told_nothing_is_saved() -> None:
    # one request over [0, 1] with 400 tokens: 1.0 in flight (below c=4), 400 tok/s over the wall;
    # at the knee the same 400 tokens take 400 / 200 = 2 s of pod, more than the log's 1 s
    adv = traffic_advice(duty_cycle([LoggedRequest(0.0, 1.0, completion_tokens=400)]), KNEE,
                         {4: 200.0}, 3.6, "plain")
    assert adv["mean_in_flight"] == pytest.approx(1.0)
    assert adv["saving_usd"] == pytest.approx(3.6 * (1 - 2) / 3600)
    assert adv["status"] == "no_saving"
    assert "saving" not in adv["summary"].replace("no saving", "")
    assert "$-" not in adv["summary"] and "no saving" in adv["summary"]


def test_a_projection_row_that_costs_more_says_so(app: typer.Typer, tmp_path: Path) -> None:
    # plain at 100 tok/s (c=1) and 400 tok/s (c=2); the log's one request made 400 tokens in 1 s
    # (400 tok/s): at c=1 they take 4 s of pod, $0.0036 at $3.6/h against the log's $0.001
    run_dir = write_run(build_run({"plain": {1: [100.0], 2: [400.0]}}, run_id="r", price=3.6),
                        tmp_path / "r")
    log = tmp_path / "log.jsonl"
    log.write_text(json.dumps({"t_start": 0.0, "t_end": 1.0, "completion_tokens": 400}) + "\n")
    res = CliRunner().invoke(app, ["cost", "--trace", str(log), "--pod-usd-hr", "3.6",
                                   "--serverless-usd-hr", "7.2", "--cold-start-s", "30",
                                   "--run", str(run_dir)])
    assert res.exit_code == 0, res.output
    (row,) = [x for x in res.output.splitlines() if x.strip().startswith("c=1 ")]
    assert "costs $0.0030 more than the current pod" in row and "saves $-" not in res.output
