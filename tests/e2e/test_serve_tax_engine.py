"""`benchmark --serve-tax` on the real CPU vLLM engine: each arm's bare offline decode beside its
served cells, and the report's bare-vs-served table. c=1, one rep, few tokens."""

from __future__ import annotations

import json
import socket
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from tailpod.cli.main import app

pytestmark = pytest.mark.engine
runner = CliRunner()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_serve_tax_is_measured_per_arm_and_reported(
    engine_env: dict[str, str], tiny_models: dict[str, Path], leftover_engines: Any
) -> None:
    up = runner.invoke(app, ["up", "--provider", "local", "--model", str(tiny_models["target"]),
                             "--port", str(free_port()), "--json"])  # fmt: skip
    assert up.exit_code == 0, up.output
    tag = json.loads(up.output)["run_tag"]
    try:
        bench = runner.invoke(app, [
            "benchmark", "--serve-tax", "--spec-k", "0,2", "--spec-method", "ngram",
            "--concurrency", "1", "--reps", "1", "--max-tokens", "24", "--no-extend-k",
            "--run-id", "tax",
        ])  # fmt: skip
        assert bench.exit_code == 0, bench.output
        assert "one more engine start per arm" in bench.output  # the plan says so first
        run_dir = Path(engine_env["TAILPOD_RESULTS_DIR"]) / "tax"
        run = json.loads((run_dir / "run.json").read_text())
        assert run["plan"]["serve_tax"] is True
        for arm in run["arms"]:
            tax = arm["serve_tax"]
            assert tax["status"] == "measured", tax
            (row,) = tax["rows"]
            assert row["concurrency"] == 1 and row["output_tokens"] == 4 * 24
            assert row["output_tok_s"] > 0 and row["tool"] == "vllm offline LLM.chat"
        report = runner.invoke(app, ["report", str(run_dir)])
        assert report.exit_code == 0, report.output
        text = (run_dir / "report.md").read_text()
        assert "## Serve tax (bare engine vs served endpoint)" in text
        table = text[text.index("## Serve tax") :].split("\n## ")[0]
        assert "| plain | 1 |" in table and "| ngram-k2 | 1 |" in table
        assert "best K served K=" in table and ", bare K=" in table
        print(table)  # the measured figures, for the record (-s)
    finally:
        down = runner.invoke(app, ["down", tag])
    assert down.exit_code == 0, down.output
    assert leftover_engines(str(tiny_models["target"].parent)) == set()
