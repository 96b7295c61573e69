"""`cost --log RUN` without `--pod-usd-hr` prices the pod at the $/hr the run recorded (run.json
`pod.price_per_hr`) and says so; it still asks for what a run cannot know (the serverless price,
the cold start), naming only those (newcomer pass: it refused with all three flags named)."""

from __future__ import annotations

import json
from pathlib import Path

import typer
from typer.testing import CliRunner

from tailpod.results.io import write_run
from tests.unit.results.conftest import build_run

SERVERLESS = ["--serverless-usd-hr", "4", "--cold-start-s", "30"]


def _run(tmp_path: Path, price: float | None) -> Path:
    return write_run(build_run({"plain": {1: [100.0, 102.0], 2: [180.0, 182.0]}},
                               run_id="priced", price=price,
                               ttft={"plain": {"cold": [0.3, 0.2], "warm": [0.1]}}), tmp_path / "priced")


def test_the_pod_price_comes_from_the_run_when_the_flag_is_absent(
        app: typer.Typer, tmp_path: Path) -> None:
    run_dir = _run(tmp_path, 2.5)
    res = CliRunner().invoke(app, ["cost", "--log", str(run_dir), *SERVERLESS, "--json"])
    assert res.exit_code == 0, res.output
    out = json.loads(res.stdout)
    assert out["pod_usd_hr"] == 2.5
    assert out["pod_usd_hr_source"] == "run.json of priced"
    text = CliRunner().invoke(app, ["cost", "--log", str(run_dir), *SERVERLESS])
    assert text.exit_code == 0, text.output
    assert "pod $2.5/hr (from run.json of priced)" in " ".join(text.output.split())
    # a price given wins over the run's
    given = CliRunner().invoke(app, ["cost", "--log", str(run_dir), *SERVERLESS,
                                     "--pod-usd-hr", "3", "--json"])
    assert given.exit_code == 0, given.output
    assert json.loads(given.stdout)["pod_usd_hr"] == 3.0
    assert json.loads(given.stdout)["pod_usd_hr_source"] == "--pod-usd-hr"


def test_what_the_run_cannot_know_is_still_asked_for_by_name(
        app: typer.Typer, tmp_path: Path) -> None:
    run_dir = _run(tmp_path, 2.5)
    res = CliRunner().invoke(app, ["cost", "--log", str(run_dir)])
    assert res.exit_code == 2
    said = " ".join(res.output.split())
    assert "cost needs --serverless-usd-hr, --cold-start-s" in said
    assert "--pod-usd-hr" not in said


def test_a_run_with_no_recorded_price_still_needs_the_flag(
        app: typer.Typer, tmp_path: Path) -> None:
    run_dir = _run(tmp_path, None)
    res = CliRunner().invoke(app, ["cost", "--log", str(run_dir), *SERVERLESS])
    assert res.exit_code == 2
    said = " ".join(res.output.split())
    assert "cost needs --pod-usd-hr" in said and "priced records no pod price" in said
