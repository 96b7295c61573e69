"""`benchmark --run-id RUN` resumes RUN, skipping its finished cells; a cell's id names its arm,
concurrency, rep and class, not the model or the request shape, so a resume with another model,
engine, --max-tokens, --requests-per-cell, trace or --unique-schema would keep the old cells
beside new ones measured otherwise, under run.json's old settings. It is refused with exit 2,
naming what differs, before any SSH wait or write; the same flags resume it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tailpod.cli.main import app
from tailpod.config import load_settings
from tailpod.engines.base import EngineConfig
from tailpod.ledger import Ledger, PodRecord
from tests.unit.cli.test_benchmark_of_a_lanes_pod import WholeRows

TAG = "tp-plain-pod"
FLAGS = ["--concurrency", "1", "--reps", "1", "--run-id", "shared-run"]


def _pod(model: str) -> None:
    Ledger(load_settings().state_dir).put(PodRecord(
        run_tag=TAG, provider="local", status="running", pod_id=f"local:{TAG}",
        engine=EngineConfig(engine="vllm", model=model).to_json()))


@pytest.fixture()
def first_run(tailpod_home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("TAILPOD_RESULTS_DIR", str(tmp_path / "results"))
    _pod("/m")
    host = WholeRows({0: 10.0})
    monkeypatch.setattr("tailpod.measure.hosts.sweep_host", lambda *_a, **_k: host)
    result = CliRunner().invoke(app, ["benchmark", TAG, "--concurrency", "1,2", "--reps", "1",
                                      "--run-id", "shared-run"])
    assert result.exit_code == 0, result.output
    run_dir = tmp_path / "results" / "shared-run"
    rows = (run_dir / "rows.jsonl").read_text().splitlines()
    (run_dir / "rows.jsonl").write_text(rows[0] + "\n")  # one of two cells finished
    return run_dir


@pytest.mark.parametrize(("model", "flags", "named"), [
    ("/m", ["--max-tokens", "64"], "max_tokens 256 -> 64"),
    ("/m", ["--requests-per-cell", "3"], "requests_per_cell None -> 3"),
    ("/other", [], "model /m -> /other"),
])
def test_a_resume_with_other_settings_is_refused_before_anything(
        first_run: Path, monkeypatch: pytest.MonkeyPatch, model: str, flags: list[str],
        named: str) -> None:
    _pod(model)
    before = (first_run / "run.json").read_text(), (first_run / "rows.jsonl").read_text()
    touched: list[str] = []
    monkeypatch.setattr("tailpod.measure.hosts.sweep_host",
                        lambda *_a, **_k: touched.append("host"))
    result = CliRunner().invoke(app, ["benchmark", TAG, "--concurrency", "1,2", "--reps", "1",
                                      "--run-id", "shared-run", *flags])
    said = " ".join(result.output.split())
    assert result.exit_code == 2, result.output
    assert named in said, said
    assert "Traceback" not in result.output
    assert touched == []
    assert ((first_run / "run.json").read_text(), (first_run / "rows.jsonl").read_text()) \
        == before


def test_the_same_flags_resume_it(first_run: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    host = WholeRows({0: 10.0})
    monkeypatch.setattr("tailpod.measure.hosts.sweep_host", lambda *_a, **_k: host)
    result = CliRunner().invoke(app, ["benchmark", TAG, "--concurrency", "1,2", "--reps", "1",
                                      "--run-id", "shared-run"])
    assert result.exit_code == 0, result.output
    rows = [json.loads(x) for x in (first_run / "rows.jsonl").read_text().splitlines()]
    assert sorted(r["concurrency"] for r in rows if r["kind"] == "cell") == [1, 2]


def test_another_soak_length_is_refused_a_soak_added_later_is_not(tmp_path: Path) -> None:
    """A soak cell's id does not carry its length: arms soaked 1 and 5 minutes in one run."""
    from dataclasses import replace

    from tailpod.errors import ConfigError
    from tailpod.measure.plan import SweepPlan, spec_arms
    from tailpod.measure.sweep import RunContext, RunDirectory, check_resumable, new_run

    base = EngineConfig(engine="vllm", model="/m")
    plan = SweepPlan(arms=spec_arms(base, [0], "ngram", None), concurrency=[1], reps=1,
                     soak_s=60.0)
    run_dir = RunDirectory(tmp_path / "soaked")
    run_dir.save(new_run(RunContext(run_id="soaked", provider="local", model="/m",
                                    engine="vllm"), plan, "pod"))
    check_resumable(run_dir, "/m", "vllm", plan)
    with pytest.raises(ConfigError, match=r"soak_s 60\.0 -> 300\.0"):
        check_resumable(run_dir, "/m", "vllm", replace(plan, soak_s=300.0))
    unsoaked = RunDirectory(tmp_path / "plain")
    unsoaked.save(new_run(RunContext(run_id="plain", provider="local", model="/m",
                                     engine="vllm"), replace(plan, soak_s=None), "pod"))
    check_resumable(unsoaked, "/m", "vllm", plan)
