"""The exit codes of docs/exit-codes.md: usage errors exit 2, and every command is in the table."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from tailpod.cli.main import app
from tailpod.ledger import Ledger, PodRecord
from tests import paths

DOC = paths.REPO / "docs" / "exit-codes.md"
runner = CliRunner()


@pytest.mark.parametrize(
    "argv",
    [["down"], ["down", "tp-nosuch"], ["status", "tp-nosuch", "--no-beat"], ["ssh", "--print"]],
)
def test_nothing_to_act_on_is_a_usage_error(argv: list[str], tailpod_home: Path) -> None:
    result = runner.invoke(app, argv)
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output


def test_several_active_pods_and_none_named_is_a_usage_error(tailpod_home: Path) -> None:
    ledger = Ledger(tailpod_home)
    for tag in ("tp-a", "tp-b"):
        ledger.put(PodRecord(run_tag=tag, provider="local", status="running"))
    result = runner.invoke(app, ["down"])
    assert result.exit_code == 2, result.output
    assert "several pods are active" in result.output


def test_every_command_is_in_the_exit_code_table() -> None:
    text = DOC.read_text(encoding="utf-8")
    table = text.split("Which codes each command can return:")[1].split("## Programs")[0]
    documented = set(re.findall(r"`([a-z-]+)(?: [a-z]+)?`", table))
    commands = set(typer.main.get_command(app).commands)  # type: ignore[attr-defined]
    assert "down" in commands and commands - documented == set()
