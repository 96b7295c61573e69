"""Provenance survives export: the stamp (emulated provider, claimed vs seen GPU, off-pod,
unverified gate) is a column of every exported row; a malformed --format or --table is a
usage error (2)."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tailpod.cli.main import app
from tailpod.results.io import write_run
from tailpod.results.schema import PodDescription
from tests.helpers.run_builder import build_run

TPUT = {"plain": {1: [100.0, 102.0]}, "mtp-k2": {1: [150.0, 151.0]}}


def _run(tmp_path: Path, **pod: object) -> Path:
    run = build_run(TPUT, run_id="exp")
    run.meta.pod = PodDescription(**pod)  # type: ignore[arg-type]
    # the speculative arm's gate compared text only: not verified
    arm = run.meta.arm("mtp-k2")
    assert arm is not None and arm.gate is not None
    arm.gate.method = "text"
    return write_run(run, tmp_path / "exp")


def _csv(path: Path) -> list[dict[str, str]]:
    with path.open() as fh:
        return list(csv.DictReader(fh))


def test_an_emulated_a100_keeps_its_stamp_in_every_row(tmp_path: Path) -> None:
    run_dir = _run(tmp_path, gpu="NVIDIA A100 80GB PCIe", gpu_count=1, price_per_hr=1.64,
                   emulated=True, machine={"cpu": "AMD EPYC", "gpus": []})
    res = CliRunner().invoke(app, ["export", str(run_dir)])
    assert res.exit_code == 0, res.output
    rows = _csv(run_dir / "cells.csv")
    assert len(rows) == 4  # 2 arms x 1 concurrency x 2 reps
    for row in rows:
        assert "emulated provider" in row["stamp"], row["stamp"]
        assert "AMD EPYC" in row["stamp"]  # what the engine really ran on
    cells = _csv(run_dir / "cells.csv")
    spec = [r for r in cells if r["arm"] == "mtp-k2"]
    plain = [r for r in cells if r["arm"] == "plain"]
    assert all("arm mtp-k2 unverified" in r["stamp"] for r in spec)
    assert not any("unverified" in r["stamp"] for r in plain)


def test_a_gpu_mismatch_is_stamped_on_every_row(tmp_path: Path) -> None:
    run_dir = _run(tmp_path, gpu="NVIDIA H100 80GB HBM3", gpu_count=1, price_per_hr=2.99,
                   machine={"cpu": "x", "gpus": [{"name": "NVIDIA A40"}]})
    res = CliRunner().invoke(app, ["export", str(run_dir), "--format", "jsonl"])
    assert res.exit_code == 0, res.output
    rows = [json.loads(x) for x in (run_dir / "cells.jsonl").read_text().splitlines()]
    assert all("GPU MISMATCH" in r["stamp"] and "NVIDIA A40" in r["stamp"] for r in rows)


def test_parquet_carries_the_stamp(tmp_path: Path) -> None:
    pq = pytest.importorskip("pyarrow.parquet")
    run_dir = _run(tmp_path, gpu="NVIDIA A100 80GB PCIe", gpu_count=1, emulated=True)
    res = CliRunner().invoke(app, ["export", str(run_dir), "--format", "parquet"])
    assert res.exit_code == 0, res.output
    stamps = pq.read_table(run_dir / "cells.parquet").column("stamp").to_pylist()
    assert stamps and all("emulated provider" in s for s in stamps)


@pytest.mark.parametrize("args", [["--format", "xml"], ["--table", "nope"]])
def test_a_malformed_export_flag_is_a_usage_error(tmp_path: Path, args: list[str]) -> None:
    run_dir = _run(tmp_path)
    res = CliRunner().invoke(app, ["export", str(run_dir), *args])
    assert res.exit_code == 2, res.output
