"""`benchmark` whose results disk fills while it writes a cell's rows (adversary-2026-12 #34: a
48 KB tmpfs; at e816682 a raw `OSError: [Errno 28]` traceback from `append_rows` after 21.6 s):
one line naming the rows file, exit 1, and the hint to free space and resume with `--run-id`."""

from __future__ import annotations

import errno
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from tailpod.cli.main import app
from tailpod.config import load_settings
from tailpod.engines.base import EngineConfig
from tailpod.ledger import Ledger, PodRecord
from tailpod.measure.sweep import RunDirectory
from tests.unit.cli.test_benchmark_of_a_lanes_pod import WholeRows

TAG = "tp-full-disk"


def test_a_full_results_disk_is_one_line_naming_the_rows_file(
        tailpod_home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TAILPOD_RESULTS_DIR", str(tmp_path / "results"))
    settings = load_settings()
    Ledger(settings.state_dir).put(PodRecord(
        run_tag=TAG, provider="local", status="running", pod_id=f"local:{TAG}",
        engine=EngineConfig(engine="vllm", model="/m").to_json()))
    monkeypatch.setattr("tailpod.measure.hosts.sweep_host", lambda *_a, **_k: WholeRows({0: 10.0}))
    written: list[Path] = []

    def disk_full(self: RunDirectory, rows: list[dict[str, Any]]) -> None:
        written.append(self.path / "rows.jsonl")
        raise OSError(errno.ENOSPC, "No space left on device", str(self.path / "rows.jsonl"))

    monkeypatch.setattr(RunDirectory, "append_rows", disk_full)
    result = CliRunner().invoke(app, ["benchmark", TAG, "--concurrency", "1", "--reps", "1",
                                      "--run-id", "full-run"])
    assert written, result.output  # the sweep reached its writer
    said = " ".join(result.output.split())
    assert result.exit_code == 1, result.output
    assert "Traceback" not in result.output
    assert f"error: No space left on device: {written[0]}" in said, said
    assert "hint: free space there (a resumed `--run-id` drops unfinished rows)" in said, said
