"""A run id names one directory directly under the results dir (config.py `run_path`). A
`--run-id` (benchmark, matrix, eval kl) or a RUN that is not a directory (report, compare,
decide, export) that would reach elsewhere (`../x`, `/abs/x`, `a/b`), or is empty, or holds a
NUL, a space or a newline, exits 2 with one line naming it, before anything waits, rents or
writes. A RUN that is a directory is still read as the path it is."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from tailpod.cli.main import app
from tailpod.config import load_settings
from tailpod.engines.base import EngineConfig
from tailpod.ledger import Ledger, PodRecord
from tests.unit.results.test_cli import small_run

TAG = "tp-plain-pod"


def _bad_ids(tmp_path: Path) -> list[str]:
    return ["../x", str(tmp_path / "elsewhere" / "x"), "a/b", "", "a\x00b", "a b", "x\n", ".",
            "..", "-x"]


@pytest.fixture()
def places(tailpod_home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The results dir two levels down, and a working directory beside it: `../x` from the
    results dir is tmp/a/x, from the working directory tmp/c/x (absent)."""
    monkeypatch.setenv("TAILPOD_RESULTS_DIR", str(tmp_path / "a" / "results"))
    (tmp_path / "c" / "d").mkdir(parents=True)
    monkeypatch.chdir(tmp_path / "c" / "d")
    return tmp_path


def _files(root: Path) -> set[Path]:
    return {p for p in root.rglob("*") if p.is_file()}


def _refused(result: object, bad: str) -> None:
    output = result.output  # type: ignore[attr-defined]
    assert result.exit_code == 2, output  # type: ignore[attr-defined]
    flat = " ".join(output.split())
    assert f"{bad!r} is not a run id" in flat, output
    assert "Traceback" not in output


@pytest.mark.parametrize("which", range(10))
def test_benchmark_refuses_a_run_id_outside_the_results_dir_before_the_pod(
        places: Path, monkeypatch: pytest.MonkeyPatch, which: int) -> None:
    bad = _bad_ids(places)[which]
    Ledger(load_settings().state_dir).put(PodRecord(
        run_tag=TAG, provider="local", status="running", pod_id=f"local:{TAG}",
        engine=EngineConfig(engine="vllm", model="/m").to_json()))
    touched: list[str] = []
    monkeypatch.setattr("tailpod.measure.hosts.sweep_host",
                        lambda *_a, **_k: touched.append("host"))
    before = _files(places)
    result = CliRunner().invoke(app, ["benchmark", TAG, "--concurrency", "1", "--reps", "1",
                                      "--run-id", bad])
    _refused(result, bad)
    assert touched == []
    assert _files(places) == before


@pytest.mark.parametrize("which", range(10))
def test_matrix_refuses_a_run_id_outside_the_results_dir(places: Path, which: int) -> None:
    bad = _bad_ids(places)[which]
    before = _files(places)
    result = CliRunner().invoke(app, ["matrix", "--budget", "5", "--model", "m", "--dry-run",
                                      "--run-id", bad])
    _refused(result, bad)
    assert _files(places) == before


@pytest.mark.parametrize("which", range(10))
def test_eval_kl_refuses_a_run_id_outside_the_results_dir(places: Path, which: int) -> None:
    bad = _bad_ids(places)[which]
    before = _files(places)
    result = CliRunner().invoke(app, ["eval", "kl", "--reference-url", "http://127.0.0.1:9",
                                      "--candidate-url", "http://127.0.0.1:9", "--run-id", bad])
    _refused(result, bad)
    assert _files(places) == before


@pytest.mark.parametrize("verb", [["report"], ["report", "--json"], ["decide"],
                                  ["export"], ["compare", "r1"]])
@pytest.mark.parametrize("bad", ["../x", "a/b", "", "a\x00b", "x\n"])
def test_a_run_that_is_no_directory_is_read_only_as_a_run_id(
        places: Path, verb: list[str], bad: str) -> None:
    results = places / "a" / "results"
    small_run(results)  # r1, for compare's other run
    outside, nested = small_run(places / "a", "x"), small_run(results / "a", "b")
    before = _files(places)
    result = CliRunner().invoke(app, [*verb, bad])
    _refused(result, bad)
    assert _files(places) == before  # nothing written beside tmp/a/x or results/a/b
    assert outside.is_dir() and nested.is_dir()


def test_a_run_given_as_its_path_is_still_read(places: Path) -> None:
    run_dir = small_run(places / "elsewhere", "x")
    result = CliRunner().invoke(app, ["report", "--json", str(run_dir)])
    assert result.exit_code == 0, result.output
    result = CliRunner().invoke(app, ["report", "--json", "../../elsewhere/x"])
    assert result.exit_code == 0, result.output
