"""`tailpod export --format llmd-report`: llm-d's benchmark report v0.2.1, validated against its
published JSON Schema (tests/fixtures/llmd-benchmark-report/, with its source and commit), and
its numbers checked against values worked out by hand from constructed runs."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import typer
from typer.testing import CliRunner

from tailpod.results.io import STAMP, load_run, write_run
from tailpod.results.llmd_report import llmd_reports
from tests import paths
from tests.helpers.run_builder import build_run

SCHEMA = json.loads((paths.FIXTURES / "llmd-benchmark-report/br_v0_2_1_json_schema.json")
                    .read_text())
VALIDATOR = jsonschema.Draft202012Validator(SCHEMA, format_checker=jsonschema.FormatChecker())
COMMITTED = sorted(p for p in (paths.REPO / "benchmarks/runs").iterdir()
                   if (p / "run.json").is_file())


def _valid(report: dict[str, Any]) -> None:
    errors = [f"{'/'.join(map(str, e.path))}: {e.message}" for e in VALIDATOR.iter_errors(report)]
    assert errors == []


@pytest.mark.parametrize("run", COMMITTED, ids=lambda p: p.name)
def test_every_committed_run_exports_reports_the_schema_accepts(
    app: typer.Typer, run: Path, tmp_path: Path
) -> None:
    copy = Path(shutil.copytree(run, tmp_path / run.name))
    got = CliRunner().invoke(app, ["export", str(copy), "--format", "llmd-report"])
    assert got.exit_code == 0, got.output
    files = sorted((copy / "llmd-report").glob("*.json"))
    # one report per (arm, load point): the cells the rows hold
    points = {(c.arm, c.concurrency, str((c.arrival or {}).get("rate")), c.cache)
              for c in load_run(copy).cells}
    assert len(files) == len(points)
    for f in files:
        _valid(json.loads(f.read_text()))


def test_the_numbers_are_the_runs_own() -> None:
    run = build_run({"plain": {4: [100.0, 104.0]}},
                    ttft={"plain": {"cold": [0.1, 0.2, 0.3]}})
    (report,) = llmd_reports(run).values()
    _valid(report)
    agg = report["results"]["request_performance"]["aggregate"]
    tput = agg["throughput"]["output_token_rate"]
    # over the two reps: 100 and 104 tok/s; a p90 of 2 values is thin, so left out
    assert (tput["units"], tput["mean"], tput["min"], tput["max"], tput["p50"]) == (
        "tokens/s", pytest.approx(102.0), 100.0, 104.0, pytest.approx(102.0))
    assert "p90" not in tput and "p99" not in tput
    # each rep: max(4, c) = 4 requests over 100 s
    assert agg["throughput"]["request_rate"]["mean"] == pytest.approx(0.04)
    assert agg["requests"] == {"total": 8, "failures": 0, "output_length": agg["requests"]
                               ["output_length"]}
    # TTFT pooled over both reps' requests: 0.1, 0.2, 0.3 twice
    ttft = agg["latency"]["time_to_first_token"]
    assert (ttft["mean"], ttft["min"], ttft["max"]) == (pytest.approx(0.2), 0.1, 0.3)
    assert ttft["p50"] == pytest.approx(0.2) and "p90" not in ttft  # 6 requests: no p90
    assert agg["latency"]["request_latency"]["mean"] == pytest.approx(1.2)
    assert report["scenario"]["stack"][0]["standardized"]["tool_version"] == "0.32.0"
    # the builder's requests record no prompt length: no load section rather than an invented one
    assert "load" not in report["scenario"]


def test_a_void_arm_and_the_stamps_travel_with_the_report() -> None:
    run = build_run({"plain": {1: [100.0, 104.0]}, "mtp-k2": {1: [150.0, 149.0]}},
                    void={"mtp-k2": "gate failed at token 17"}, measured_from="off-pod")
    run.meta.pod.gpu, run.meta.pod.gpu_count = "NVIDIA H100 80GB HBM3", 1
    run.meta.pod.machine = {"gpus": [{"name": "NVIDIA A10G", "memory": "23028 MiB"}]}
    reports = llmd_reports(run)
    spec = next(r for r in reports.values() if "/mtp-k2/" in r["run"]["uid"])
    _valid(spec)
    assert {"VOID", "off-pod", "mismatch"} <= set(spec["run"]["keywords"])
    assert "VOID: gate failed at token 17" in spec["run"]["description"]
    assert STAMP in spec["run"]["description"]
    facts = spec["scenario"]["stack"][0]["native"]["config"]["tailpod"]
    assert facts["void"] == "gate failed at token 17" and facts["gate"]["status"] == "fail"
    assert facts["stamps"][1].startswith("GPU MISMATCH")


def test_no_secret_reaches_the_files(app: typer.Typer, tmp_path: Path) -> None:
    secret = "hf_" + "Z9y8X7w6V5u4T3s2R1q0P9o8N7m6L5k4J3"
    run = build_run({"plain": {1: [1.0, 2.0]}}, argv={"plain": ["vllm", "serve", "--hf-token",
                                                                secret]})
    run_dir = write_run(run, tmp_path / "r")
    got = CliRunner().invoke(app, ["export", str(run_dir), "--format", "llmd-report", "--out",
                                   str(tmp_path / "out")])
    assert got.exit_code == 0, got.output
    (f,) = (tmp_path / "out").glob("*.json")
    assert secret not in f.read_text()
