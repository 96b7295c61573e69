"""`benchmark --request-rate/--arrival/--burstiness/--slo`: checked up front, and carried by the
plan's cells into the agent's `arrival` and options (measure/plan.py, measure/hosts.py)."""

from __future__ import annotations

import math
import os
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tailpod.cli.benchmark import open_loop_options, rate_list, slo_spec
from tailpod.cli.main import app
from tailpod.engines.base import EngineConfig
from tailpod.errors import ConfigError
from tailpod.measure.hosts import probe_cells, probe_options
from tailpod.measure.plan import Cell, SweepPlan, schedule, spec_arms


def test_rates_and_slo_parse() -> None:
    assert rate_list("1, 2.5,inf") == [1.0, 2.5, math.inf]
    assert slo_spec("ttft_ms=500,tpot_ms=50") == {"ttft_ms": 500.0, "tpot_ms": 50.0}


@pytest.mark.parametrize("args", [
    ("0,1", "poisson", 1.0, None, 90.0),
    ("x", "poisson", 1.0, None, 90.0),
    ("1", "uniform", 1.0, None, 90.0),
    ("1", "poisson", 0.5, None, 90.0),  # burstiness shapes gamma only
    ("1", "gamma", 0.0, None, 90.0),
    ("1", "poisson", 1.0, "ttft=5", 90.0),
    ("1", "poisson", 1.0, "ttft_ms=-5", 90.0),
    ("1", "poisson", 1.0, None, 0.0),
    (None, "gamma", 0.5, None, 90.0),  # arrival flags without a rate
])
def test_bad_open_loop_flags_are_config_errors(args: tuple) -> None:  # type: ignore[type-arg]
    with pytest.raises(ConfigError):
        open_loop_options(*args)


def test_rate_cells_carry_the_arrival_and_the_options_the_slo() -> None:
    arms = spec_arms(EngineConfig(engine="vllm", model="m"), [0], "mtp", None)
    plan = SweepPlan(arms=arms, reps=2, request_rates=[1.0, math.inf], arrival="gamma",
                     burstiness=0.5, arrival_seed=3, slo={"ttft_ms": 500.0},
                     slo_percentile=95.0)
    cells = [s for s in schedule(plan) if isinstance(s, Cell)]
    assert [c.cell_id for c in cells] == ["plain|rate1|r0|prose", "plain|rateinf|r0|prose",
                                          "plain|rateinf|r1|prose", "plain|rate1|r1|prose"]
    sent = probe_cells(arms[0], cells[:2], "cold", plan)
    assert sent[0]["concurrency"] is None  # no in-flight cap
    assert sent[0]["arrival"] == {"process": "gamma", "rate": 1.0, "burstiness": 0.5,
                                  "seed": 3, "requests": 10}
    assert sent[1]["arrival"]["rate"] == "inf" and sent[1]["arrival"]["requests"] == 16
    assert probe_cells(arms[0], cells[2:3], "cold", plan)[0]["arrival"]["seed"] == 4
    opts = probe_options("http://127.0.0.1:8000", arms[0], plan, "rid", 0)
    assert opts["slo"] == {"ttft_ms": 500.0} and opts["slo_percentile"] == 95.0
    assert plan.to_json()["request_rates"] == ["1", "inf"]


def test_closed_loop_cells_are_unchanged() -> None:
    arms = spec_arms(EngineConfig(engine="vllm", model="m"), [0], "mtp", None)
    plan = SweepPlan(arms=arms, concurrency=[2], reps=1)
    cells = [s for s in schedule(plan) if isinstance(s, Cell)]
    assert probe_cells(arms[0], cells, "cold", plan) == [
        {"arm": "plain", "rep": 0, "prompt_class": "prose", "cache": "cold",
         "cell": "plain|c2|r0|prose", "concurrency": 2}]
    assert "slo" not in probe_options("u", arms[0], plan, "rid", 2)


def test_load_workers_reach_the_agent_options() -> None:
    arms = spec_arms(EngineConfig(engine="vllm", model="m"), [0], "mtp", None)
    plan = SweepPlan(arms=arms, reps=1, request_rates=[4.0], load_workers=4)
    assert probe_options("http://127.0.0.1:8000", arms[0], plan, "rid", 0)["workers"] == 4
    assert plan.to_json()["load_workers"] == 4
    one = SweepPlan(arms=arms, reps=1, request_rates=[4.0])
    assert "workers" not in probe_options("http://127.0.0.1:8000", arms[0], one, "rid", 0)
    assert "load_workers" not in one.to_json()  # a plan of one process reads as before


def test_bad_load_workers_exit_2_before_the_ledger(tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    home = tmp_path / "home"
    monkeypatch.setenv("TAILPOD_HOME", str(home))
    monkeypatch.setenv("TAILPOD_ENV_FILE", os.devnull)
    result = CliRunner().invoke(app, ["benchmark", "--request-rate", "2", "--load-workers", "0"])
    assert result.exit_code == 2 and "--load-workers must be >= 1" in result.output
    assert not (home / "ledger.json").exists()
