"""The HTML pages of a run and of a comparison: `tailpod report --html`, `tailpod compare --html`
(docs/results.md, "The HTML pages"). page.py renders, this module loads, analyses and writes."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from tailpod.errors import TailpodError
from tailpod.results import decide
from tailpod.results.analysis import AnalysisSettings, analyze_for_report
from tailpod.results.compare import compare_analyses
from tailpod.results.html.page import render_compare_html, render_run_html
from tailpod.results.io import Run, load_run
from tailpod.results.markdown import STAMP_LINE
from tailpod.results.report import (
    check_settings_for_run,
    compare_file_name,
    render_compare_markdown,
    render_kl_markdown,
    render_run_markdown,
)

HTML_FILE = "report.html"

__all__ = ["HTML_FILE", "render_compare_html", "render_run_html", "write_compare_html",
           "write_run_html"]


def _write_atomic(path: Path, text: str) -> Path:
    """Written beside its target and renamed over it: a reader never sees half a page."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".report-", suffix=".html")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        os.chmod(tmp, 0o644)  # mkstemp's 0600 would keep the page from a team's web server
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def write_run_html(run_dirs: Sequence[str | os.PathLike[str]],
                   settings: AnalysisSettings | None = None,
                   out_dir: str | os.PathLike[str] | None = None) -> Path:
    """report.html into each run directory; with several runs also the comparison's page (ratios
    to the first run) into out_dir or the first run's directory, whose path is returned; with one
    run, that run's page. Every run is loaded and analysed before anything is written."""
    if not run_dirs:
        raise ValueError("no run directories")
    runs = [load_run(d) for d in run_dirs]
    for run in runs:
        check_settings_for_run(run, settings)
    values = [analyze_for_report(run, settings) for run in runs]
    pages = []
    for run, v in zip(runs, values, strict=True):
        assert run.path is not None
        kl = v.report_only.get("kl")
        md = (render_kl_markdown(kl) if kl is not None and not run.cells
              else render_run_markdown(v.analysis, v.report_only))
        pages.append(_write_atomic(run.path / HTML_FILE, render_run_html(v.analysis, md)))
    if len(runs) == 1:
        return pages[0]
    target = Path(out_dir) if out_dir else Path(runs[0].path or ".")
    return write_compare_html(runs, [v.analysis for v in values], target)[0]


def _decision_markdown(runs: Sequence[Run], analyses: Sequence[dict[str, Any]]) -> str:
    """`decide` over the compared runs (bands and deployment), or why it could not be taken."""
    try:
        dec = decide.compute(runs, analyses=analyses)
    except (TailpodError, ValueError) as e:
        return f"## Decision\n\nNo decision over these runs: {e}\n"
    return "\n".join(decide.render(dec, STAMP_LINE))


def write_compare_html(runs: Sequence[Run], analyses: Sequence[dict[str, Any]],
                       target: Path) -> tuple[Path, dict[str, Any]]:
    """compare-<ids>.html into `target` (the first run is the baseline); its path, and the
    comparison it shows."""
    target.mkdir(parents=True, exist_ok=True)
    cmp = compare_analyses(analyses)
    page = render_compare_html(analyses, cmp, render_compare_markdown(cmp),
                               _decision_markdown(runs, analyses))
    name = compare_file_name([a["run_id"] for a in analyses], ".html")
    return _write_atomic(target / name, page), cmp


def load_and_compare(run_dirs: Sequence[Path], target: Path) -> tuple[Path, dict[str, Any]]:
    """`tailpod compare --html`: the runs as `compare` reads them (default settings), the page
    written, and the comparison (for the CLI's warnings and flags)."""
    runs = [load_run(d) for d in run_dirs]
    analyses = [analyze_for_report(r).analysis for r in runs]
    return write_compare_html(runs, analyses, target)
