"""`vllm bench serve`'s `--num-prompts N` (the requests sent at one load point) is tailpod's
`--requests-per-cell N` (a cell is one arm at one load point, one rep), and its
`--max-concurrency N` is `--concurrency N`. At e816682 click answered `No such option:
--num-prompts (Possible options: --prompt-classes)`, the wrong flag (newcomer 4.7), and `No such
option: --max-concurrency` (4.5)."""

from __future__ import annotations

import os
import random
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tailpod.cli.main import app


@pytest.fixture()
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TAILPOD_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("TAILPOD_ENV_FILE", os.devnull)


def _span(rate: float, requests: int) -> float:
    """The Poisson schedule's last offset as the agent draws it (arrival.schedule, seed 0)."""
    rng = random.Random(0)
    return sum(rng.expovariate(rate) for _ in range(requests - 1))


@pytest.mark.parametrize("requests", [2, 10])
def test_num_prompts_is_the_requests_of_a_cell(home: None, requests: int) -> None:
    # a schedule too slow for a cell is refused before any wait, naming the cell's request
    # count: the count it names is the one --num-prompts gave
    result = CliRunner().invoke(app, ["benchmark", "tp-x", "--request-rate", "1e-9",
                                      "--num-prompts", str(requests)])
    said = " ".join(result.output.split())
    assert result.exit_code == 2, result.output
    assert "No such option" not in said
    assert (f"a cell's {requests} requests are scheduled over {_span(1e-9, requests):.3g} s"
            in said), said


def test_max_concurrency_is_a_concurrency_level(home: None) -> None:
    # --concurrency's own check answers for it: the value reached --concurrency
    result = CliRunner().invoke(app, ["benchmark", "tp-x", "--max-concurrency", "0"])
    said = " ".join(result.output.split())
    assert result.exit_code == 2, result.output
    assert "No such option" not in said
    assert "--concurrency values must be at least 1, got 0" in said, said


def test_the_help_names_both_spellings(home: None) -> None:
    result = CliRunner().invoke(app, ["benchmark", "--help"], env={"COLUMNS": "200"})
    assert result.exit_code == 0
    for flag in ("--requests-per-cell", "--num-prompts", "--concurrency", "--max-concurrency"):
        assert flag in result.output, flag
