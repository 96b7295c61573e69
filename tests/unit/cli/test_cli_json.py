"""--json everywhere a command reports: one document on stdout, even when the command fails;
every other line on stderr."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tailpod.cli.benchmark import benchmark_document
from tailpod.cli.main import app
from tailpod.sandbox import Sandbox
from tailpod.sandbox.model import default_runpod_catalog, default_vast_offers
from tests import paths
from tests.unit.cli.conftest import REGISTRY_IMAGE

REPO = paths.REPO


def _error_doc(stdout: str) -> dict:
    doc = json.loads(stdout)  # the whole of stdout is one JSON document
    assert doc["ok"] is False
    return doc["error"]


@pytest.mark.parametrize("args", [
    ["up", "--json", "--provider", "local", "--engine", "nope"],
    ["status", "--json", "tp-not-in-the-ledger"],
    ["down", "--json", "tp-not-in-the-ledger"],
    ["benchmark", "--json", "tp-not-in-the-ledger"],
    ["benchmark", "--json", "--spec-k", "one,two"],
    ["matrix", "--json", "--card", "runpod:A40"],
    ["demo", "--json", "--spec-k", "x"],
    ["eval", "kl", "--json"],
    ["gpus", "--json", "--max-price", "-1"],
])
def test_a_usage_error_under_json_is_a_json_error_object(tailpod_home: Path,
                                                          args: list[str]) -> None:
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 2, result.output
    error = _error_doc(result.stdout)
    assert error["exit_code"] == 2
    assert error["message"] and error["message"] in " ".join(result.stderr.split())
    assert "error:" in result.stderr


def test_up_json_refused_by_preflight_prints_no_bare_newline(tailpod_home: Path,
                                                             monkeypatch: pytest.MonkeyPatch
                                                             ) -> None:
    for key in ("RUNPOD_API_KEY", "VAST_API_KEY", "TAILSCALE_API_KEY", "TAILSCALE_AUTH_KEY"):
        monkeypatch.delenv(key, raising=False)
    result = CliRunner().invoke(app, ["up", "--json", "--provider", "runpod", "--model", "x/y"])
    assert result.exit_code != 0
    assert result.stdout.strip(), "stdout must hold the error document"
    assert not result.stdout.startswith("\n")
    error = _error_doc(result.stdout)
    assert error["kind"] == "PreflightRefused"
    assert "check-requirements" in result.stderr  # the refusal table went to stderr


def test_benchmark_document_holds_every_cell(tmp_path: Path) -> None:
    run = REPO / "tests" / "fixtures" / "results-v1-probe-py"
    doc = benchmark_document(run, "fixture", "pod", 1.0)
    rows = [json.loads(line) for line in (run / "rows.jsonl").read_text().splitlines() if line]
    cells = {(r["arm"], r["concurrency"]) for r in rows if r.get("arm") is not None
             and r.get("concurrency") is not None}
    assert {(c["arm"], c["concurrency"]) for c in doc["cells"]} == cells
    assert doc["ok"] is True and doc["results"] == str(run)
    json.dumps(doc)  # serialisable


def test_matrix_dry_run_json_prices_each_card(registry_sandbox: Sandbox, tmp_path: Path,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    env = {**registry_sandbox.env(), "TAILPOD_HOME": str(tmp_path / "home"),
           "TAILPOD_ENV_FILE": os.devnull}
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    result = CliRunner().invoke(app, [
        "matrix", "--dry-run", "--json", "--card", "runpod:A40", "--card", "vastai:RTX 3090",
        "--budget", "5", "--model", "Qwen/Qwen3-0.6B", "--image", REGISTRY_IMAGE])
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    a40 = next(g.secure_price for g in default_runpod_catalog() if g.name == "A40")
    r3090 = min(o.dph_base for o in default_vast_offers()
                if o.gpu_name == "RTX 3090" and o.num_gpus == 1)
    prices = {label: entry["price_per_hr"] for label, entry in doc["prices"].items()}
    assert prices["runpod:A40"] == pytest.approx(a40)
    assert r3090 <= prices["vastai:RTX 3090"] < r3090 + 0.05
    assert doc["dry_run"] is True and doc["budget_usd"] == 5
    assert "projected spend" in result.stderr  # the human lines went to stderr
