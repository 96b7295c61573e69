"""The demo ends with its run's HTML page (issue 41): written beside report.md, its path printed."""

from __future__ import annotations

from pathlib import Path

from tailpod.cli.demo import html_report
from tailpod.results.io import write_run
from tests.helpers.run_builder import build_run


def test_the_demos_run_gets_its_page(tmp_path: Path) -> None:
    run_dir = write_run(build_run({"plain": {1: [10.0]}, "ngram-k2": {1: [12.0]}}),
                        tmp_path / "demo-run")
    page = html_report(run_dir)
    assert page == run_dir / "report.html"
    assert "tailpod report — run-a" in page.read_text()


def test_no_page_without_a_run(tmp_path: Path) -> None:
    assert html_report(None) is None
    assert html_report(tmp_path) is None  # a folder with no run.json (nothing was measured)
