"""`report --html` and `compare --html` without a browser (the browser's tests are
tests/integration/browser/): the per-cell differences against the baseline and their noise, a
page that fetches nothing and quotes no secret or markup from a run, the flags checked first, and a
page for every committed run."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from tailpod.results.analysis import analyze
from tailpod.results.html import write_run_html
from tailpod.results.html.page import NOISE, cell_differences
from tailpod.results.io import write_run
from tests import paths
from tests.helpers.run_builder import build_run

RUNS = paths.REPO / "benchmarks/runs"
COMMITTED = sorted(p for p in RUNS.iterdir() if (p / "run.json").is_file())


def _diffs(base: list[float], other: list[float]) -> dict[str, object]:
    a = analyze(build_run({"plain": {1: base}}, run_id="base"))
    b = analyze(build_run({"plain": {1: other}}, run_id="other"))
    (d,) = cell_differences([a, b])
    return d


def test_a_difference_beyond_the_reps_spread_is_called_so_with_its_widest_range() -> None:
    d = _diffs([100.0, 110.0], [120.0, 130.0])
    # medians 105 and 125; widest range 120/110 .. 130/100
    assert d["difference"] == pytest.approx(125 / 105 - 1)
    assert d["range"] == pytest.approx([120 / 110 - 1, 130 / 100 - 1])
    assert d["verdict"] == "beyond the reps' spread"


def test_a_difference_inside_the_noise_reads_as_such() -> None:
    d = _diffs([100.0, 110.0], [105.0, 115.0])  # the rep ranges overlap on 105..110
    assert d["difference"] == pytest.approx(110 / 105 - 1)
    assert d["verdict"] == NOISE


def test_a_single_rep_has_no_spread_to_judge_a_difference_by() -> None:
    d = _diffs([100.0], [300.0])
    assert d["difference"] == pytest.approx(2.0)
    assert d["range"] is None and d["verdict"] == "no spread: 1 rep"


def test_the_page_fetches_nothing_and_quotes_no_markup_or_secret(tmp_path: Path) -> None:
    secret = "hf_" + "A1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q7"
    run = build_run({"plain": {1: [1.0, 2.0]}, "mtp-k2": {1: [2.0, 3.0]}},
                    model="<script>alert(1)</script>",
                    argv={"plain": ["vllm", "serve", "--hf-token", secret]})
    text = write_run_html([write_run(run, tmp_path / "r")]).read_text()
    assert "<script>alert(1)" not in text and "&lt;script&gt;alert(1)" in text
    assert secret not in text
    # no script, style, image or font from elsewhere: the page opens offline
    assert not re.search(r"""(src|href)\s*=\s*["']?(https?:)?//""", text, re.I)
    assert "<link" not in text and "@import" not in text
    data = json.loads(re.search(r'id="tailpod-data">(.*?)</script>', text, re.S)[1])  # type: ignore[index]
    assert [c["id"] for c in data["charts"]][:2] == ["throughput", "speedup"]


@pytest.mark.parametrize("args", [
    ["report", "--html", "--json", "RUN"],
    ["compare", "--html", "--json", "RUN", "RUN2"],
    ["compare", "--html", "RUN"],
    ["compare", "--html", "--baseline", "RUN", "RUN"],
])  # fmt: skip
def test_bad_html_flags_exit_2_and_write_nothing(app: typer.Typer, tmp_path: Path,
                                                 args: list[str]) -> None:
    run = write_run(build_run({"plain": {1: [1.0, 2.0]}}), tmp_path / "r")
    run2 = write_run(build_run({"plain": {1: [1.0, 2.0]}}, run_id="run-b"), tmp_path / "r2")
    before = sorted(p.name for p in run.iterdir())
    argv = [str(run) if a == "RUN" else str(run2) if a == "RUN2" else a for a in args]
    got = CliRunner().invoke(app, argv)
    assert got.exit_code == 2, got.output
    assert "Traceback" not in got.output
    assert sorted(p.name for p in run.iterdir()) == before


@pytest.mark.parametrize("run", COMMITTED, ids=lambda p: p.name)
def test_every_committed_run_gets_a_page(app: typer.Typer, run: Path, tmp_path: Path) -> None:
    copy = shutil.copytree(run, tmp_path / run.name)
    got = CliRunner().invoke(app, ["report", "--html", str(copy)])
    assert got.exit_code == 0, got.output
    page = (Path(copy) / "report.html").read_text()
    data = json.loads(re.search(r'id="tailpod-data">(.*?)</script>', page, re.S)[1])  # type: ignore[index]
    assert data["charts"] and all(c["series"] for c in data["charts"])


def test_every_pair_of_committed_runs_compares_as_a_page(app: typer.Typer,
                                                          tmp_path: Path) -> None:
    copies = [str(shutil.copytree(r, tmp_path / r.name)) for r in COMMITTED]
    for other in copies[1:]:
        got = CliRunner().invoke(app, ["compare", "--html", "--baseline", copies[0], other])
        assert got.exit_code == 0, got.output
        assert re.search(r"comparison: \S+\.html", got.output)


def test_a_non_finite_value_is_not_drawn_and_the_page_is_still_written() -> None:
    from tailpod.results.html.figures import _drawable

    series = [{"name": "a", "void": None, "group": 0, "points": [
        {"x": 1, "y": 2.0, "lo": 1.0, "hi": float("inf"), "n": 2},
        {"x": 2, "y": float("nan"), "lo": None, "hi": None, "n": 2}]},
        {"name": "b", "void": None, "group": 0, "points": [
            {"x": float("inf"), "y": 1.0, "lo": None, "hi": None, "n": 1}]}]
    assert _drawable(series) == [{"name": "a", "void": None, "group": 0, "points": [
        {"x": 1, "y": 2.0, "lo": None, "hi": None, "n": 2}]}]  # type: ignore[arg-type]


def test_a_void_arms_difference_is_marked_void() -> None:
    base = analyze(build_run({"plain": {1: [100.0, 110.0]}, "mtp-k2": {1: [150.0, 160.0]}},
                             run_id="base", void={"mtp-k2": "gate failed"}))
    other = analyze(build_run({"plain": {1: [100.0, 110.0]}, "mtp-k2": {1: [150.0, 160.0]}},
                              run_id="other"))
    marks = {d["arm"]: d["void"] for d in cell_differences([base, other])}
    assert marks == {"plain": None, "mtp-k2": "gate failed"}


def test_report_html_of_two_runs_writes_both_pages_and_their_comparison(
    app: typer.Typer, tmp_path: Path
) -> None:
    a = write_run(build_run({"plain": {1: [1.0, 2.0]}}, run_id="run-a"), tmp_path / "a")
    b = write_run(build_run({"plain": {1: [3.0, 4.0]}}, run_id="run-b"), tmp_path / "b")
    got = CliRunner().invoke(app, ["report", "--html", str(a), str(b)])
    assert got.exit_code == 0, got.output
    assert (a / "report.html").is_file() and (b / "report.html").is_file()
    page = a / "compare-run-a-vs-run-b.html"
    assert f"report: {page}" in got.output
    assert "baseline <b>run-a</b>" in page.read_text()


def test_an_unstamped_page_reassures_only_as_far_as_the_hardware_check_went(
    tmp_path: Path
) -> None:
    run = build_run({"plain": {1: [1.0, 2.0]}})  # the builder records no machine facts
    text = write_run_html([write_run(run, tmp_path / "r")]).read_text()
    assert "the pod reported the claimed hardware" not in text
    assert "hardware unverified: the pod&#x27;s own facts were not recorded" in text
