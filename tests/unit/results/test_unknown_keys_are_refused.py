"""run.json and rows.jsonl of the current format refuse a key the format does not declare (a
misspelling reads as one), naming the key and the file; the sweep writes through the same models,
so what it writes is what the reader reads; every committed run still loads (issue 37, item 4)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from tailpod.engines.base import EngineConfig
from tailpod.errors import ConfigError, TailpodError
from tailpod.measure.plan import Arm, SweepPlan
from tailpod.measure.sweep import RunContext, RunDirectory, new_run
from tailpod.results.io import load_run
from tests import paths
from tests.helpers.probe_rows import cell_row

REPO = paths.REPO
COMMITTED = sorted({p.parent for p in [*REPO.glob("benchmarks/runs/**/run.json"),
                                       *REPO.glob("tests/fixtures/**/run.json")]})
MTP = REPO / "benchmarks" / "runs" / "h200_vllm_0.26.0_mtp_2026-12-02"


def _copy_with(tmp_path: Path, name: str, run_edit: dict[str, object] | None = None,
               row_edit: dict[str, object] | None = None) -> Path:
    """A copy of the committed MTP run with one key planted in run.json or its first cell row."""
    out = tmp_path / name
    shutil.copytree(MTP, out)
    if run_edit:
        run = json.loads((out / "run.json").read_text())
        (out / "run.json").write_text(json.dumps(run | run_edit))
    if row_edit:
        lines = (out / "rows.jsonl").read_text().splitlines()
        first = next(i for i, line in enumerate(lines) if json.loads(line)["kind"] == "cell")
        lines[first] = json.dumps(json.loads(lines[first]) | row_edit)
        (out / "rows.jsonl").write_text("\n".join(lines) + "\n")
    return out


@pytest.mark.parametrize("run_dir", COMMITTED, ids=lambda p: p.name)
def test_every_committed_run_loads(run_dir: Path) -> None:
    run = load_run(run_dir)
    assert run.meta.run_id and run.cells


def test_the_committed_runs_are_found() -> None:
    assert len(COMMITTED) >= 4 and MTP in COMMITTED


def test_a_misspelt_key_in_run_json_is_refused_naming_the_key_and_the_file(tmp_path: Path) -> None:
    bad = _copy_with(tmp_path, "bad", run_edit={"finshed_at": "2026-12-02T10:00:00Z"})
    with pytest.raises(ConfigError) as err:
        load_run(bad)
    assert "'finshed_at'" in str(err.value) and str(bad / "run.json") in str(err.value)


def test_a_misspelt_nested_key_names_its_path(tmp_path: Path) -> None:
    run = json.loads((MTP / "run.json").read_text())
    run["pod"]["price_per_hour"] = 3.5
    bad = _copy_with(tmp_path, "bad", run_edit={"pod": run["pod"]})
    with pytest.raises(ConfigError, match=r"'pod\.price_per_hour'"):
        load_run(bad)


def test_a_misspelt_key_in_a_row_names_the_file_line_and_key(tmp_path: Path) -> None:
    bad = _copy_with(tmp_path, "bad", row_edit={"output_toks": 1.0})
    lines = (bad / "rows.jsonl").read_text().splitlines()
    lineno = next(i for i, line in enumerate(lines, 1) if "output_toks" in line)
    with pytest.raises(ConfigError, match=rf"rows.jsonl:{lineno}: unknown key 'cell\.output_toks'"):
        load_run(bad)


def test_report_and_compare_exit_2_on_a_misspelt_key(app: typer.Typer, tmp_path: Path) -> None:
    bad = _copy_with(tmp_path, "bad", run_edit={"finshed_at": None})
    res = CliRunner().invoke(app, ["report", str(bad), "--json"])
    assert res.exit_code == 2, res.output
    assert "finshed_at" in res.output and "run.json" in res.output
    assert "Traceback" not in res.output
    res = CliRunner().invoke(app, ["compare", str(MTP), str(bad), "--json"])
    assert res.exit_code == 2, res.output
    assert "finshed_at" in res.output


def _new_run() -> dict[str, object]:
    plan = SweepPlan(arms=[Arm("plain", EngineConfig(engine="vllm", model="m"))],
                     concurrency=[1], reps=1)
    ctx = RunContext(run_id="r1", provider="local", model="m", engine="vllm")
    return new_run(ctx, plan, "pod")


def test_the_sweep_refuses_to_write_a_key_the_reader_would_refuse(tmp_path: Path) -> None:
    run_dir = RunDirectory(tmp_path / "r1")
    with pytest.raises(TailpodError, match="'finshed_at'"):
        run_dir.save(_new_run() | {"finshed_at": None})
    assert not run_dir.run_json.exists()
    with pytest.raises(TailpodError, match="'cell.output_toks'"):
        run_dir.append_rows([cell_row(run_id="r1", output_toks=1.0)])
    assert not run_dir.rows.exists()


def test_what_the_sweep_writes_is_what_the_reader_reads(tmp_path: Path) -> None:
    run_dir = RunDirectory(tmp_path / "r1")
    run = _new_run()
    run_dir.save(run)
    row = cell_row(run_id="r1", output_tok_s=12.5, output_tokens=25, wall_s=2.0)
    run_dir.append_rows([row])
    loaded = load_run(run_dir.path)
    assert loaded.meta.model_dump(mode="json") == json.loads(run_dir.run_json.read_text())
    assert loaded.meta.run_id == "r1" and loaded.meta.plan.arms == ["plain"]
    assert [c.output_tok_s for c in loaded.cells] == [12.5]


def test_the_analysis_document_refuses_a_key_no_section_declares() -> None:
    from tailpod.results.analysis import analysis_model, analyze, check_analysis

    an = analyze(load_run(MTP))
    declared = set(analysis_model().model_fields)
    assert set(an) <= declared and {"run_id", "crossover"} <= set(an)
    assert "by_load" in declared  # omitted from this closed-loop run's analysis, still declared
    with pytest.raises(TailpodError, match="unknown key 'crosover'"):
        check_analysis(an | {"crosover": an["crossover"]})
