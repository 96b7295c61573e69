"""`status` names the matrix that rented a pod, and says when that matrix was killed (issue 38
item 2): a live matrix's pod reads `running (matrix mx-…)`; a killed one's `interrupted matrix
mx-…` with the resume and the `down` that settle it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from rich.console import Console

from tailpod.cli.pods import pod_status, pods_table
from tailpod.config import Settings
from tailpod.ledger import PodRecord, operation_stamp

MX = "mx-20261206-150000-abcd"


def _record(owner: dict[str, object]) -> PodRecord:
    record = PodRecord(run_tag="tp-20261206-150000-aaaaaa", provider="runpod", status="running",
                       pod_id="pod1", price_per_hr=0.4)
    record.extra.matrix = {"id": MX, "card": "runpod:NVIDIA A40", "owner": owner}
    return record


def _text(row: dict[str, object]) -> str:
    out = Console(width=400, record=True)
    out.print(pods_table([row], out))
    return " ".join(out.export_text().split())


def test_a_live_matrix_pod_names_its_matrix(tmp_path: Path) -> None:
    row = pod_status(Settings(home=tmp_path), _record(operation_stamp("matrix")))
    assert row["matrix"] == {"id": MX, "card": "runpod:NVIDIA A40", "interrupted": False}
    assert row["status"] == "running" and row["settle"] is None
    assert f"running (matrix {MX})" in _text(row)


def test_a_killed_matrix_pod_reads_interrupted_with_its_settle(tmp_path: Path) -> None:
    child = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                           capture_output=True, text=True, check=True)
    dead = {**operation_stamp("matrix"), "pid": int(child.stdout), "proc_start": None}
    row = pod_status(Settings(home=tmp_path), _record(dead))
    assert row["matrix"]["interrupted"] is True  # type: ignore[index]
    assert row["status"] == f"interrupted matrix {MX} (running)"
    assert f"tailpod matrix --run-id {MX}" in str(row["settle"])
    assert "tailpod down tp-20261206-150000-aaaaaa" in str(row["settle"])
