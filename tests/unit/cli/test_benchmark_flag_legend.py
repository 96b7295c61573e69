"""`benchmark`'s summary table says under it what each flag in its flags column means
(newcomer 2.13: `loop_lag` was explained nowhere in the output)."""

from __future__ import annotations

import io
from pathlib import Path

from rich.console import Console

from tailpod.cli.benchmark import summary_table
from tailpod.results.io import write_run
from tests.helpers.run_builder import build_run


def _printed(run_dir: Path) -> str:
    buf = io.StringIO()
    Console(file=buf, width=200, color_system=None).print(summary_table(run_dir, "benchmark r"))
    return buf.getvalue()


def test_the_flags_shown_are_explained_under_the_table(tmp_path: Path) -> None:
    run = build_run({"plain": {1: [100.0], 2: [180.0]}})
    run.cells[0].flags = ["loop_lag"]
    run.cells[1].flags = ["client_bound"]
    out = _printed(write_run(run, tmp_path / "r"))
    assert "loop_lag: the load generator's event loop stalled for more than 50 ms" in out
    assert "client_bound: the load generator's busiest process used 80% of a CPU" in out
    assert "failures:" not in out  # only the flags the table shows


def test_no_flag_no_legend(tmp_path: Path) -> None:
    out = _printed(write_run(build_run({"plain": {1: [100.0]}}), tmp_path / "r"))
    assert "loop_lag" not in out and ": the" not in out
