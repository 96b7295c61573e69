"""Open-loop schedules are bounded before anything waits on a pod (issue 38 item 1, adversary F3,
scenarios 2 and 3): a rate or a trace whose schedule outlasts a cell's time limit (the `probe
run` timeout, measure/plan.py CELL_LIMIT_S) is refused with its computed span named; malformed
rate lists and duplicate SLO keys are refused as `--concurrency` refuses them; `--max-rate-rounds
0`, `matrix --cell-minutes 0` and `--parallel 0` get one line, not a Typer box."""

from __future__ import annotations

import json
import os
import random
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from tailpod.cli import matrix as matrix_cli
from tailpod.cli.main import app
from tailpod.engines.base import EngineConfig
from tailpod.ledger import PodRecord
from tests.helpers.benchmark_stops import stop_at_the_pod

LIMIT_S = 3600  # the probe run's timeout: agent_client/driver.py PROBE_RUN_TIMEOUT_S


@pytest.fixture()
def reached(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The ledger, the SSH wait and the sweep, each recorded and stopped there. The ledger
    answers with a running pod whose engine has a 512-token context (for the trace checks
    that need the pod's engine)."""
    record = PodRecord(run_tag="tp-x", status="running", provider="runpod",
                       engine=EngineConfig(engine="vllm", model="org/m",
                                           context_length=512).to_json())
    return stop_at_the_pod(monkeypatch, tmp_path / "home", lambda: record)


def _said(output: str) -> str:
    return " ".join(output.split())


def _span(rate: float, requests: int, seed: int = 0) -> float:
    """The Poisson schedule's last offset, drawn here as the agent's arrival.schedule draws it
    (random.Random(seed).expovariate(rate) per gap)."""
    rng = random.Random(seed)
    return sum(rng.expovariate(rate) for _ in range(requests - 1))


@pytest.mark.parametrize(("flags", "says"), [
    (["--request-rate", "1e-9", "--requests-per-cell", "2"],
     f"--request-rate 1e-09: a cell's 2 requests are scheduled over {_span(1e-9, 2):.3g} s "
     f"(rep 0), past a cell's limit of {LIMIT_S} s"),
    (["--request-rate", "0.001", "--requests-per-cell", "10", "--reps", "1"],
     f"a cell's 10 requests are scheduled over {_span(0.001, 10):.3g} s"),
    (["--request-rate", "0.001"],  # the default 8 requests a cell at a low rate
     f"a cell's 8 requests are scheduled over {_span(0.001, 8):.3g} s"),
    (["--request-rate", "1,,2"], "--request-rate must be a comma list of rates with no empty"),
    (["--request-rate", ",1"], "no empty entry"),
    (["--request-rate", "2,1"], "--request-rate must ascend"),
    (["--request-rate", "1,1"], "--request-rate must ascend"),
    (["--request-rate", "inf,4"], "--request-rate must ascend"),
    (["--request-rate", "1", "--slo", "ttft_ms=5,ttft_ms=6"], "--slo names ttft_ms twice"),
    (["--find-max-rate", "--request-rate", "1,8", "--slo", "ttft_ms=500",
      "--max-rate-rounds", "0"], "--max-rate-rounds must be at least 1, got 0"),
    (["--max-rate-rounds", "-1"], "--max-rate-rounds must be at least 1, got -1"),
    (["--spec-k", "0,99"], "--spec-k values must be at most 16, got 99"),
    (["--max-k", "99"], "--max-k must be 1 to 16, got 99"),
])
def test_benchmark_refuses_an_unbounded_or_malformed_schedule_before_the_ledger(
        reached: list[str], flags: list[str], says: str) -> None:
    result = CliRunner().invoke(app, ["benchmark", "tp-x", *flags])
    assert result.exit_code == 2, result.output
    assert isinstance(result.exception, SystemExit), result.output
    assert says in _said(result.output)
    assert "╭" not in result.output  # one line, not a Typer box
    assert reached == []


@pytest.mark.parametrize("flags", [
    ["--request-rate", "1,2,inf"], ["--request-rate", "1,2,"],
    ["--request-rate", "0.01", "--requests-per-cell", "2"],  # one gap of about 100 s
    ["--request-rate", "1", "--slo", "ttft_ms=5,tpot_ms=6"],
    ["--find-max-rate", "--request-rate", "1,8", "--slo", "ttft_ms=500", "--max-rate-rounds",
     "1"],
])
def test_a_bounded_schedule_reaches_the_pod(reached: list[str], flags: list[str]) -> None:
    result = CliRunner().invoke(app, ["benchmark", "tp-x", *flags])
    assert reached == ["ledger", "ssh wait"], result.output


def _trace(path: Path, rows: list[dict[str, Any]] | str) -> Path:
    path.write_text(rows if isinstance(rows, str) else
                    "".join(json.dumps(r) + "\n" for r in rows))
    return path


def _req(t: float, prompt: int = 10) -> dict[str, Any]:
    return {"t_start": t, "prompt_tokens": prompt, "completion_tokens": 4}


@pytest.mark.parametrize(("rows", "speed", "says"), [
    ([_req(0), _req(1e9)], "1", "its requests span 1e+09 s (largest gap 1e+09 s) at "
                                "--trace-speed 1, past a cell's limit of 3600 s"),
    ([_req(0), _req(10), _req(10 + 4000)], "1", "span 4.01e+03 s (largest gap 4e+03 s)"),
    ('{"t_start": -1e308, "prompt_tokens": 10, "completion_tokens": 4}\n'
     '{"t_start": 1e308, "prompt_tokens": 10, "completion_tokens": 4}\n', "1", "span inf s"),
    ([_req(0), _req(7200)], "1.5", "span 4.8e+03 s"),
])
def test_benchmark_refuses_a_trace_longer_than_a_cell(
        reached: list[str], tmp_path: Path, rows: Any, speed: str, says: str) -> None:
    path = _trace(tmp_path / "t.jsonl", rows)
    result = CliRunner().invoke(app, ["benchmark", "tp-x", "--trace", str(path),
                                      "--trace-speed", speed])
    assert result.exit_code == 2, result.output
    assert says in _said(result.output)
    assert reached == []


def test_a_trace_that_fits_a_cell_reaches_the_pod(reached: list[str], tmp_path: Path) -> None:
    # 7200 s of log replayed at speed 4 spans 1800 s: within the cell's limit
    path = _trace(tmp_path / "t.jsonl", [_req(0), _req(7200, prompt=512)])
    result = CliRunner().invoke(app, ["benchmark", "tp-x", "--trace", str(path),
                                      "--trace-speed", "4"])
    assert reached == ["ledger", "ssh wait"], result.output


def test_a_trace_prompt_past_the_pods_context_length_is_refused_before_the_ssh_wait(
        reached: list[str], tmp_path: Path) -> None:
    path = _trace(tmp_path / "t.jsonl", [_req(0), _req(1, prompt=2_000_000)])
    result = CliRunner().invoke(app, ["benchmark", "tp-x", "--trace", str(path)])
    assert result.exit_code == 2, result.output
    assert "a prompt of 2000000 tokens is longer than the pod's context length (512" \
        in _said(result.output)
    assert reached == ["ledger"]  # the pod's engine read, nothing waited on


@pytest.mark.parametrize(("flags", "says"), [
    (["--cell-minutes", "0"], "--cell-minutes must be more than 0, got 0.0"),
    (["--parallel", "0"], "--parallel must be at least 1 pod at a time, got 0"),
    (["--spec-k", "0,99"], "--spec-k values must be at most 16, got 99"),
])
def test_matrix_refuses_a_zero_cell_or_parallel_in_one_line(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, flags: list[str], says: str) -> None:
    monkeypatch.setenv("TAILPOD_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("TAILPOD_ENV_FILE", os.devnull)
    priced: list[object] = []
    monkeypatch.setattr(matrix_cli, "run_matrix", lambda *a, **k: priced.append(k))
    base = ["matrix", "--card", "runpod:NVIDIA A40", "--model", "org/m", "--engine", "vllm",
            "--image", "vllm/vllm-openai:v0.11.0", "--budget", "5", "--dry-run"]
    result = CliRunner().invoke(app, [*base, *flags])
    assert result.exit_code == 2, result.output
    assert says in _said(result.output)
    assert "╭" not in result.output
    assert priced == []
