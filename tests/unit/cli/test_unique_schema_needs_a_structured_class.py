"""`benchmark --unique-schema` changes the schemas of the structured and tools classes only: asked
for with neither in --prompt-classes it is one line, exit 2, before the ledger is read."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tailpod.cli import benchmark as benchmark_cli
from tailpod.cli.main import app


def test_unique_schema_without_a_structured_class_is_refused_first(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TAILPOD_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("TAILPOD_ENV_FILE", os.devnull)
    seen: list[str] = []
    monkeypatch.setattr(benchmark_cli, "ledger_for", lambda settings: seen.append("ledger"))
    result = CliRunner().invoke(app, ["benchmark", "tp-x", "--unique-schema",
                                      "--prompt-classes", "prose,code"])
    assert result.exit_code == 2, result.output
    said = " ".join(result.output.split())
    assert "--unique-schema changes the schemas of the structured and tools classes; " \
           "--prompt-classes has neither" in said
    assert "╭" not in result.output and seen == []
