"""`matrix --bid` out of range names where the bid came from: the flag when it came from the flag,
TAILPOD_BID when it came from the environment. A `:spot` card made the check run on a copy of
the settings that had lost their origins, so a bad `--bid` was blamed on TAILPOD_BID."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from tailpod.cli.main import app

MATRIX = ["matrix", "--budget", "5", "--model", "m", "--dry-run"]


@pytest.mark.parametrize("cards", [["--card", "vastai:RTX 4090:spot"],
                                   ["--card", "vastai:RTX 4090", "--spot"]])
def test_a_bad_bid_flag_is_named_as_the_flag(tailpod_home: Path, cards: list[str]) -> None:
    result = CliRunner().invoke(app, [*MATRIX, *cards, "--bid", "-1"],
                                env={"COLUMNS": "300", "TAILPOD_BID": None})
    assert result.exit_code == 2, result.output
    flat = " ".join(result.output.split())
    assert "--bid must be a positive number" in flat
    assert "from the command line" in flat
    assert "TAILPOD_BID" not in flat
    assert "Traceback" not in result.output
    assert not list(tailpod_home.glob("**/*.json"))  # nothing written


@pytest.mark.parametrize("cards", [["--card", "vastai:RTX 4090:spot"],
                                   ["--card", "vastai:RTX 4090", "--spot"]])
def test_a_bad_bid_from_the_environment_names_the_variable(tailpod_home: Path,
                                                           cards: list[str]) -> None:
    result = CliRunner().invoke(app, [*MATRIX, *cards],
                                env={"COLUMNS": "300", "TAILPOD_BID": "-1"})
    assert result.exit_code == 2, result.output
    flat = " ".join(result.output.split())
    assert "from environment variable TAILPOD_BID" in flat
    assert not list(tailpod_home.glob("**/*.json"))
