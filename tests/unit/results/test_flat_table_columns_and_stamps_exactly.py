"""The flat table (`tailpod export`, results/io.py flat_rows): each column of a cell row and a
request row written out by hand for a constructed run: the arm's context, the acceptance
columns, flags and void figures as text, and the stamp that joins the run's provenance and the
arm's void or unverified note. docs/results.md, "Export"."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from tailpod.agent import OFF_POD_FLAG
from tailpod.errors import ConfigError, TailpodError
from tailpod.results.io import export_table, flat_rows, run_provenance, table_columns
from tailpod.results.schema import PodDescription, RequestRow
from tests.helpers.run_builder import build_run

EMULATED = ("emulated provider (it claimed 1× NVIDIA A100 80GB PCIe); the engine ran on an "
            "unrecorded CPU; the cost figures are illustrative")
WHY = "token mismatch at prompt 1, position 17"


def _run(measured_from: str = "pod"):  # type: ignore[no-untyped-def]
    run = build_run({"plain": {1: [100.0]}, "mtp-k2": {1: [150.0]}, "mtp-k4": {1: [160.0]}},
                    run_id="exp", void={"mtp-k4": WHY},
                    acceptance={"mtp-k2": (10, 20, 15)}, measured_from=measured_from)
    run.meta.pod = PodDescription(gpu="NVIDIA A100 80GB PCIe", gpu_count=1, emulated=True,
                                  price_per_hr=2.5)
    arm = run.meta.arm("mtp-k2")
    assert arm is not None and arm.gate is not None
    arm.gate.method = "text"  # compared text only: its numbers stand, unverified
    return run


def test_a_cell_rows_arm_acceptance_flags_and_void_columns() -> None:
    run = _run()
    c = next(c for c in run.cells if c.arm == "mtp-k2")
    c.flags = ["client_bound", "thin"]
    c.void_fields = {"ttft_p99_s": "needs 100 requests", "e2e_p99_s": "needs 100 requests"}
    rows = {r["arm"]: r for r in flat_rows(run)}  # cells is the default table
    row = rows["mtp-k2"]
    assert (row["k"], row["method"], row["checkpoint"]) == (2, "mtp", "tiny/model")
    assert (row["arm_void"], row["void_reason"]) == (False, None)
    assert (row["acc_drafts"], row["acc_draft_tokens"], row["acc_accepted"]) == (10, 20, 15)
    assert row["acceptance_length"] == 1 + 15 / 10 and row["acceptance_rate"] == 15 / 20
    assert row["acceptance_source"] == "vllm_metrics"
    assert row["flags"] == "client_bound;thin"
    assert row["void_fields"] == ("e2e_p99_s: needs 100 requests | "
                                  "ttft_p99_s: needs 100 requests")
    assert (row["output_tok_s"], row["wall_s"], row["output_tokens"]) == (150.0, 100.0, 15000)
    assert (row["run_id"], row["engine"], row["price_per_hr"], row["gpu_count"]) == (
        "exp", "vllm", 2.5, 1)
    assert row["stamp"] == f"{EMULATED}; arm mtp-k2 unverified: {arm_unverified(run)}"
    plain = rows["plain"]
    assert (plain["k"], plain["method"], plain["arm_void"], plain["void_reason"]) == (
        0, None, False, None)
    assert plain["acc_drafts"] is None and plain["acceptance_source"] is None
    assert plain["flags"] == "" and plain["void_fields"] is None
    assert plain["stamp"] == EMULATED
    void = rows["mtp-k4"]
    assert (void["arm_void"], void["void_reason"]) == (True, WHY)
    assert void["stamp"] == f"{EMULATED}; arm mtp-k4 VOID: {WHY}"


def arm_unverified(run) -> str:  # type: ignore[no-untyped-def]
    arm = run.meta.arm("mtp-k2")
    assert arm is not None and arm.unverified_text
    return arm.unverified_text


def test_a_request_rows_columns_and_an_arm_run_json_does_not_record() -> None:
    run = _run()
    run.requests = [
        RequestRow(run_id="exp", arm="mtp-k4", concurrency=1, rep=0, prompt_class="prose",
                   cell="mtp-k4|c1|r0|prose", index=3, ok=True, t_start=7.0, ttft_s=0.25,
                   void_fields={"decode_tok_s": "two chunks"}),
        RequestRow(run_id="exp", arm="ghost", concurrency=1, rep=0, prompt_class="prose",
                   cell="ghost|c1|r0|prose", index=0, ok=False, error="reset", t_start=8.0),
    ]
    void, ghost = flat_rows(run, "requests")
    assert (void["index"], void["ttft_s"], void["t_start"]) == (3, 0.25, 7.0)
    assert void["void_fields"] == "decode_tok_s: two chunks"
    assert (void["arm_void"], void["void_reason"]) == (True, WHY)
    assert void["stamp"] == f"{EMULATED}; arm mtp-k4 VOID: {WHY}"
    assert {k: ghost[k] for k in ("arm", "k", "method", "checkpoint", "arm_void",
                                  "void_reason", "ok", "error", "void_fields", "stamp")} == {
        "arm": "ghost", "k": None, "method": None, "checkpoint": None, "arm_void": None,
        "void_reason": None, "ok": False, "error": "reset", "void_fields": None,
        "stamp": EMULATED}


def test_an_off_pod_run_says_so_before_the_hardware_stamp() -> None:
    run = _run(measured_from="off-pod")
    assert run_provenance(run) == f"{OFF_POD_FLAG}; {EMULATED}"
    plain = next(r for r in flat_rows(run) if r["arm"] == "plain")
    assert plain["stamp"] == f"{OFF_POD_FLAG}; {EMULATED}"
    assert run_provenance(_run_on_pod_without_stamp()) == ""


def _run_on_pod_without_stamp():  # type: ignore[no-untyped-def]
    run = build_run({"plain": {1: [100.0]}})
    run.meta.pod = PodDescription(gpu=None, gpu_count=None)
    return run


def test_an_unknown_table_is_refused_by_name() -> None:
    with pytest.raises(ConfigError, match=r"^unknown table 'cell' \(use cells or requests\)$"):
        flat_rows(_run(), "cell")


# --- export_table: the file -----------------------------------------------------------------------

def test_csv_lines_end_in_lf_and_a_null_is_an_empty_cell(tmp_path: Path) -> None:
    run = _run_on_pod_without_stamp()
    out = export_table(run, "csv", tmp_path / "cells.csv")
    text = out.read_bytes().decode()
    header, line, end = text.split("\n")
    assert end == "" and "\r" not in text
    assert header.split(",") == table_columns("cells")
    cells = dict(zip(header.split(","), line.split(","), strict=True))
    # no acceptance, no void figures, no stamp: empty, never "None"
    assert (cells["acc_drafts"], cells["void_fields"], cells["stamp"], cells["k"]) == (
        "", "", "", "0")


def test_an_unknown_format_is_refused_by_name(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as err:
        export_table(_run(), "xlsx", tmp_path / "t.xlsx")
    assert str(err.value) == "unknown format 'xlsx' (use csv, jsonl or parquet)"
    assert not (tmp_path / "t.xlsx").exists()


def test_parquet_without_pyarrow_says_what_to_do(tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pyarrow", None)  # import pyarrow raises ImportError
    with pytest.raises(TailpodError) as err:
        export_table(_run(), "parquet", tmp_path / "t.parquet")
    assert str(err.value) == ("parquet export needs pyarrow, which is not installed (use "
                              "--format csv or jsonl, or install pyarrow yourself)")


def test_parquet_is_written_beside_the_target_and_renamed(tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    pq = pytest.importorskip("pyarrow.parquet")
    written: list[Path] = []
    real = pq.write_table

    def spy(table, where):  # type: ignore[no-untyped-def]
        written.append(Path(where))
        real(table, where)

    monkeypatch.setattr(pq, "write_table", spy)
    out = export_table(_run(), "parquet", tmp_path / "t.parquet")
    (tmp,) = written
    assert tmp.parent == tmp_path and tmp.name.startswith(".t.parquet.")
    assert out.is_file() and not tmp.exists()


@pytest.mark.parametrize("moved", [False, True], ids=["before-rename", "after-rename"])
def test_a_failed_parquet_write_leaves_no_temporary_file_and_raises_its_own_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, moved: bool
) -> None:
    pytest.importorskip("pyarrow.parquet")
    real = os.replace

    def failing(src: str, dst: str | Path) -> None:
        if moved:  # renamed, then the call failed: the temporary file is already gone
            real(src, dst)
        raise OSError("disk full")

    monkeypatch.setattr(os, "replace", failing)
    with pytest.raises(OSError, match="^disk full$"):
        export_table(_run(), "parquet", tmp_path / "t.parquet")
    assert [p.name for p in tmp_path.iterdir()] == (["t.parquet"] if moved else [])
