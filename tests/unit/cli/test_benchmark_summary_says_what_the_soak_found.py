"""`benchmark --soak` printed its summary table and the results path, and nothing about the soak
it had just paid minutes for (sandbox: two arms soaked, the terminal silent on both; the verdict
was in report.md alone). Under the table, one line per soak cell says what the soak section
found: a collapse, no collapse, or that it could not be judged."""

from __future__ import annotations

import io
from pathlib import Path

from rich.console import Console

from tailpod.cli.benchmark import summary_table
from tailpod.results.io import write_run
from tests.helpers.run_builder import build_run
from tests.unit.results.test_soak_without_per_request_acceptance_is_not_judged import _soak


def _printed(tmp_path: Path, soak: bool, spec: dict[str, int] | None) -> str:
    run = build_run({"plain": {1: [100.0]}, "ngram-k2": {1: [150.0]}})
    if soak:
        cell, reqs = _soak(3, spec)
        run.soak_cells, run.soak_requests = [cell], reqs
    buf = io.StringIO()
    d = write_run(run, tmp_path / "r")
    Console(file=buf, width=200, color_system=None).print(summary_table(d, "benchmark r"))
    return " ".join(buf.getvalue().split())


def test_a_soak_without_evidence_says_not_judged_under_the_table(tmp_path: Path) -> None:
    out = _printed(tmp_path, True, None)
    assert "soak ngram-k2 (prose, c=1, 3 min): not judged" in out


def test_a_judged_soak_says_no_collapse(tmp_path: Path) -> None:
    out = _printed(tmp_path, True, {"steps": 10, "accepted": 8})
    assert "soak ngram-k2 (prose, c=1, 3 min): no collapse" in out


def test_no_soak_no_line(tmp_path: Path) -> None:
    assert "soak" not in _printed(tmp_path, False, None)


def test_the_plain_arms_soak_has_no_line(tmp_path: Path) -> None:
    run = build_run({"plain": {1: [100.0]}, "ngram-k2": {1: [150.0]}})
    cell, reqs = _soak(3, None)
    head = {"arm": "plain", "cell": "plain|soak|c1|r0|prose"}
    run.soak_cells = [cell.model_copy(update=head)]
    run.soak_requests = [r.model_copy(update=head) for r in reqs]
    buf = io.StringIO()
    Console(file=buf, width=200, color_system=None).print(
        summary_table(write_run(run, tmp_path / "r"), "benchmark r"))
    assert "soak plain" not in buf.getvalue()
