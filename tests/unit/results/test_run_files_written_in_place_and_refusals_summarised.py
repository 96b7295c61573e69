"""Writing and reading a run directory (results/io.py): run.json and rows.jsonl are written to a
temporary file beside the target and renamed into place, and a failed write leaves neither a
temporary file nor a changed file behind; a file that does not fit the format is refused in one
line naming the first problem (an undeclared key before any other) and how many more there are."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from pydantic import ValidationError

from tailpod.errors import ConfigError
from tailpod.results.io import load_run, parse_rows, validation_summary, write_run
from tailpod.results.schema import SCHEMA_VERSION, RequestRow
from tests.helpers.run_builder import build_run


def test_each_file_is_written_beside_itself_and_renamed_into_place(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen: list[tuple[Path, Path]] = []
    real = os.replace

    def spy(src: str, dst: str | Path) -> None:
        seen.append((Path(src), Path(dst)))
        real(src, dst)

    monkeypatch.setattr(os, "replace", spy)
    out = write_run(build_run({"plain": {1: [1.0]}}), tmp_path / "run")
    assert [dst.name for _, dst in seen] == ["run.json", "rows.jsonl"]
    for src, dst in seen:
        assert src.parent == dst.parent == out and src.name.startswith(f".{dst.name}.")
    assert sorted(p.name for p in out.iterdir()) == ["rows.jsonl", "run.json"]


@pytest.mark.parametrize("moved", [False, True], ids=["before-rename", "after-rename"])
def test_a_failed_write_leaves_no_temporary_file_and_raises_its_own_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, moved: bool
) -> None:
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "run.json").write_text("old\n")
    real = os.replace

    def failing(src: str, dst: str | Path) -> None:
        if moved:  # the rename happened and then the call failed: the temporary file is gone
            real(src, dst)
        raise OSError("disk full")

    monkeypatch.setattr(os, "replace", failing)
    with pytest.raises(OSError, match="^disk full$"):
        write_run(build_run({"plain": {1: [1.0]}}), run_dir)
    assert [p.name for p in run_dir.iterdir()] == ["run.json"]
    assert ((run_dir / "run.json").read_text() == "old\n") is not moved


def test_an_undeclared_key_is_named_first_with_the_count_of_the_rest() -> None:
    row = {"kind": "request", "run_id": "r", "concurrency": 1, "rep": 0, "prompt_class": "prose",
           "cell": "c", "index": 0, "ok": True, "ttft_z": 1.0}
    # three problems: arm and t_start missing (reported first by pydantic), ttft_z undeclared
    with pytest.raises(ValidationError) as err:
        RequestRow.model_validate(row)
    assert err.value.error_count() == 3
    assert validation_summary(err.value) == (
        f"unknown key 'ttft_z' (results format v{SCHEMA_VERSION} has no such field; misspelt?)"
        " (+2 more)")
    assert validation_summary(err.value, "decision.json") == (
        "unknown key 'ttft_z' (decision.json has no such field; misspelt?) (+2 more)")


def test_without_an_undeclared_key_the_first_problem_is_named() -> None:
    row = {"kind": "request", "run_id": "r", "arm": "plain", "concurrency": 1, "rep": 0,
           "prompt_class": "prose", "cell": "c", "index": 0, "ok": True, "t_start": "soon",
           "ttft_s": "fast"}
    with pytest.raises(ValidationError) as err:
        RequestRow.model_validate(row)
    assert validation_summary(err.value).startswith("ttft_s: Input should be a valid number")
    assert validation_summary(err.value).endswith(" (+1 more)")
    with pytest.raises(ValidationError) as one:
        RequestRow.model_validate(row | {"t_start": 0.0})
    assert validation_summary(one.value) == (
        "ttft_s: Input should be a valid number, unable to parse string as a number")


# --- write_run and load_run ------------------------------------------------------------------------

def test_a_run_is_written_into_a_new_nested_directory_with_run_json_indented(
    tmp_path: Path
) -> None:
    out = write_run(build_run({"plain": {1: [1.0]}}), tmp_path / "a" / "b" / "run")
    text = (out / "run.json").read_text()
    assert text.startswith('{\n  "schema_version": ') and text.endswith("\n}\n")


def _v0_dir(tmp_path: Path, run: dict[str, object], rows: list[str] | None) -> Path:
    out = tmp_path / "v0"
    out.mkdir()
    (out / "run.json").write_text(json.dumps(run))
    if rows is not None:
        (out / "rows.jsonl").write_text("".join(line + "\n" for line in rows))
    return out


RUN_V0 = {"run_id": "old", "created_at": "2026-10-01T12:00:00", "provider": "runpod",
          "model": "org/m", "engine": "vllm", "arms": [{"label": "plain", "k": 0}]}
REQUEST_V0 = {"type": "request", "run_id": "old", "arm": "plain", "concurrency": 1, "index": 0,
              "ok": True, "t_start": 5.0}


def test_a_run_json_path_loads_its_directory_and_a_missing_rows_file_is_a_warning(
    tmp_path: Path
) -> None:
    run_dir = _v0_dir(tmp_path, RUN_V0, None)
    run = load_run(run_dir / "run.json")
    assert run.path == run_dir and run.migrated_from == 0
    assert run.cells == [] and run.requests == []
    assert run.load_warnings == [f"no rows.jsonl in {run_dir}"]


def test_a_torn_last_row_is_warned_with_the_files_own_path(tmp_path: Path) -> None:
    run_dir = _v0_dir(tmp_path, RUN_V0, [json.dumps(REQUEST_V0), '{"type": "req'])
    run = load_run(run_dir)
    assert len(run.requests) == 1
    assert run.load_warnings == [f"{run_dir / 'rows.jsonl'}:2: torn last line skipped"]


def test_a_directory_without_run_json_says_what_to_pass(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as err:
        load_run(tmp_path)
    assert str(err.value) == f"no run.json in {tmp_path} (pass a run directory)"


@pytest.mark.parametrize(("text", "said"), [
    ('{"run_id": ', "not valid JSON (Expecting value, line 1)"),
    ("[1, 2]", "not a JSON object"),
    (json.dumps({k: v for k, v in RUN_V0.items() if k != "run_id"}), "missing field 'run_id'"),
], ids=["json", "array", "v0-without-run_id"])
def test_a_run_json_that_cannot_be_read_is_refused_naming_the_file(
    tmp_path: Path, text: str, said: str
) -> None:
    (tmp_path / "run.json").write_text(text)
    with pytest.raises(ConfigError) as err:
        load_run(tmp_path)
    assert str(err.value) == f"{tmp_path / 'run.json'}: {said}"


def test_a_v0_row_without_a_field_its_migration_needs_is_refused_by_line() -> None:
    row = {k: v for k, v in REQUEST_V0.items() if k != "arm"}
    with pytest.raises(ConfigError) as err:
        parse_rows(["", json.dumps(REQUEST_V0), json.dumps(row)], "r.jsonl")
    assert str(err.value) == "r.jsonl:3: missing field 'arm'"


def test_soak_cells_and_their_requests_are_kept_apart(tmp_path: Path) -> None:
    run = build_run({"plain": {1: [100.0, 101.0]}}, ttft={"plain": {"cold": [0.1]}})
    soak = run.cells[1].model_copy(update={"soak_s": 600.0})
    run.cells[1] = soak
    kept = [r for r in run.requests if r.cell != soak.cell]
    soaked = [r for r in run.requests if r.cell == soak.cell]
    assert kept and soaked
    back = load_run(write_run(run, tmp_path / "run"))
    assert back.cells == [run.cells[0]] and back.soak_cells == [soak]
    assert back.requests == kept and back.soak_requests == soaked
    assert back.load_warnings == []
