"""The arm's stamp on exported request rows (issue 37 item 10; docs/results.md, export): every
request row of an arm whose gate compared text only says "arm … unverified", every row of a void
arm says "arm … VOID" with its reason, and a plain arm's rows carry only the run's own stamp,
in csv and jsonl alike."""

from __future__ import annotations

import csv
import json
from pathlib import Path

from typer.testing import CliRunner

from tailpod.cli.main import app
from tailpod.results.io import write_run
from tailpod.results.schema import PodDescription
from tests.helpers.run_builder import build_run

TPUT = {"plain": {1: [100.0, 102.0]}, "mtp-k2": {1: [150.0, 151.0]},
        "mtp-k4": {1: [160.0, 161.0]}}
WHY = "token mismatch at prompt 1, position 17"


def _run_dir(tmp_path: Path) -> Path:
    # two cold requests per arm and cell (the builder writes request rows for given TTFTs)
    ttft = {arm: {"cold": [0.1, 0.2]} for arm in TPUT}
    run = build_run(TPUT, run_id="exp", void={"mtp-k4": WHY}, ttft=ttft)
    run.meta.pod = PodDescription(gpu="NVIDIA A100 80GB PCIe", gpu_count=1, emulated=True)
    arm = run.meta.arm("mtp-k2")
    assert arm is not None and arm.gate is not None
    arm.gate.method = "text"  # compared text only: not verified
    assert {r.arm for r in run.requests} == set(TPUT)
    return write_run(run, tmp_path / "exp")


def _check(rows: list[dict]) -> None:
    by_arm: dict[str, list[str]] = {}
    for row in rows:
        by_arm.setdefault(row["arm"], []).append(row["stamp"])
    assert set(by_arm) == set(TPUT)
    for stamp in by_arm["mtp-k2"]:
        assert "emulated provider" in stamp and "arm mtp-k2 unverified" in stamp, stamp
    for stamp in by_arm["mtp-k4"]:
        assert "arm mtp-k4 VOID" in stamp and "position 17" in stamp, stamp
    for stamp in by_arm["plain"]:
        assert "emulated provider" in stamp and "arm " not in stamp, stamp


def test_request_rows_in_csv_carry_their_arms_stamp(tmp_path: Path) -> None:
    run_dir = _run_dir(tmp_path)
    res = CliRunner().invoke(app, ["export", str(run_dir), "--table", "requests"])
    assert res.exit_code == 0, res.output
    with (run_dir / "requests.csv").open() as fh:
        _check(list(csv.DictReader(fh)))


def test_request_rows_in_jsonl_carry_their_arms_stamp(tmp_path: Path) -> None:
    run_dir = _run_dir(tmp_path)
    res = CliRunner().invoke(app, ["export", str(run_dir), "--table", "requests",
                                   "--format", "jsonl"])
    assert res.exit_code == 0, res.output
    _check([json.loads(x) for x in (run_dir / "requests.jsonl").read_text().splitlines()])
