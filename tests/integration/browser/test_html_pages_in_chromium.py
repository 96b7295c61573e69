"""The HTML pages of `report --html` and `compare --html` opened in a real browser (issue 41): no
console message, every chart drawn with the series and points the run's rows hold (read back from
what the page says it drew), every stamp on the first screen, a screenshot kept. The expected
series come from the rows as loaded, never from the analysis the page is built from."""

from __future__ import annotations

import re
import shutil
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

import typer
from typer.testing import CliRunner

from tailpod.cli import results as results_cli
from tailpod.results.html import write_run_html
from tailpod.results.io import STAMP, Run, load_run, write_run
from tailpod.results.schema import CellRow
from tests import paths
from tests.helpers.run_builder import build_run
from tests.integration.browser.conftest import Page

RUNS = paths.REPO / "benchmarks/runs"
DRAFT = RUNS / "h200_vllm_0.26.0_draft_2026-12-02"
MTP = RUNS / "h200_vllm_0.26.0_mtp_2026-12-02"
OPEN_LOOP = RUNS / "h200_vllm_0.26.0_openloop_2026-12-02"

OpenPage = Callable[[Path], Page]


def _copy(src: Path, tmp_path: Path) -> Path:
    """A committed run copied out, so the page is written beside it and not into the repo."""
    return Path(shutil.copytree(src, tmp_path / src.name))


def _arrival(c: CellRow) -> dict[str, Any] | None:
    return c.arrival  # an open-loop cell's (a declared field of the strict row model)


def _closed_loop(run: Run) -> dict[str, dict[int, int]]:
    """{arm: {concurrency: reps}} of the cells the rows hold with a throughput."""
    reps: dict[str, dict[int, int]] = defaultdict(lambda: defaultdict(int))
    for c in run.cells:
        if c.output_tok_s is not None and _arrival(c) is None:
            reps[c.arm][c.concurrency] += 1
    return reps


def _clean(page: Page) -> None:
    assert page.console == [], page.console
    assert page.screenshot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_a_gpu_runs_page_draws_every_arm_at_every_concurrency_with_its_spread(
    open_page: OpenPage, tmp_path: Path
) -> None:
    run_dir = _copy(DRAFT, tmp_path)
    expected = _closed_loop(load_run(run_dir))
    page = open_page(write_run_html([run_dir]))
    _clean(page)
    tput = page.chart("throughput")
    assert {s["name"]: s["xs"] for s in tput["series"]} == {
        arm: sorted(per) for arm, per in expected.items()}
    for s in tput["series"]:  # a bar (min–max over reps) on every point of 2 reps or more
        assert s["bars"] == sum(1 for n in expected[s["name"]].values() if n > 1)
    assert tput["xlog"] is True
    by_arm = {arm: sorted(per) for arm, per in expected.items()}
    for chart_id in ("latency", "ttft"):  # every cell has them here
        assert {s["name"]: s["xs"] for s in page.chart(chart_id)["series"]} == by_arm
    spec = {arm: sorted(set(per) & set(expected["plain"]))
            for arm, per in expected.items() if arm != "plain"}
    assert {s["name"]: s["xs"] for s in page.chart("speedup")["series"]} == spec
    assert {s["name"]: s["xs"] for s in page.chart("acceptance")["series"]} == {
        arm: sorted(expected[arm]) for arm in spec}
    assert page.drawn["stamps"] == []
    assert "<h2>Decision</h2>" in page.dom  # decide's bands and deployment, from decision.json


def test_the_comparison_of_two_gpu_runs_against_a_baseline(
    open_page: OpenPage, tmp_path: Path, tailpod_home: Path
) -> None:
    draft, mtp = _copy(DRAFT, tmp_path), _copy(MTP, tmp_path)
    app = typer.Typer()
    app.callback()(lambda: None)
    results_cli.register(app)
    got = CliRunner().invoke(app, ["compare", "--html", "--baseline", str(mtp), str(draft)])
    assert got.exit_code == 0, got.output
    path = Path(re.search(r"comparison: (\S+\.html)", got.output)[1])  # type: ignore[index]
    page = open_page(path)
    _clean(page)
    base, other = load_run(mtp), load_run(draft)
    want = {f"{r.meta.run_id}: {arm}": sorted(per)
            for r in (base, other) for arm, per in _closed_loop(r).items()}
    assert {s["name"]: s["xs"] for s in page.chart("compare_throughput")["series"]} == want
    # one differences row per (arm, c) both runs measured: here plain at each concurrency
    shared = sorted(set(_closed_loop(base)["plain"]) & set(_closed_loop(other)["plain"]))
    table = page.dom.split('<table class="differences">', 1)[1].split("</table>", 1)[0]
    rows = re.findall(r"<tr class=\"[a-z ]*\"><td>([^<]*)</td><td>([^<]*)</td><td>(\d+)</td>",
                      table)
    assert rows == [(other.meta.run_id, "plain", str(c)) for c in shared]
    assert f"baseline <b>{base.meta.run_id}</b>" in page.dom
    shutil.copy(page.screenshot, tmp_path / "compare-page.png")  # kept with the test's tmp dir


def _stamped_run_with_a_void_arm() -> Run:
    run = build_run({"plain": {1: [100.0, 104.0], 4: [300.0, 310.0]},
                     "mtp-k2": {1: [150.0, 149.0], 4: [280.0, 290.0]}},
                    void={"mtp-k2": "gate failed: token 17 of prompt 1 differs"},
                    measured_from="off-pod")
    run.meta.pod.gpu, run.meta.pod.gpu_count = "NVIDIA H100 80GB HBM3", 1
    run.meta.pod.machine = {"gpus": [{"name": "NVIDIA A10G", "memory": "23028 MiB"}]}
    return run


def test_a_void_arm_and_every_stamp_cannot_be_missed(open_page: OpenPage, tmp_path: Path) -> None:
    run_dir = write_run(_stamped_run_with_a_void_arm(), tmp_path / "stamped")
    page = open_page(write_run_html([run_dir]))
    _clean(page)
    stamps = page.drawn["stamps"]
    assert len(stamps) == 2 and all(s["visible"] for s in stamps), stamps
    assert STAMP in stamps[0]["text"]
    assert stamps[1]["text"].startswith("GPU MISMATCH: the provider claims 1× NVIDIA H100")
    tput = page.chart("throughput")
    assert tput["watermark"] == STAMP  # across every chart, as the PNGs have it
    assert {s["name"]: s["void"] for s in tput["series"]} == {"plain": False, "mtp-k2": True}
    assert page.drawn["void_cells"] > 0  # the tables' VOID cells marked


def test_a_single_rep_run_draws_points_without_spread_bars(
    open_page: OpenPage, tmp_path: Path
) -> None:
    run = build_run({"plain": {1: [100.0], 2: [180.0], 4: [300.0]},
                     "mtp-k2": {1: [150.0], 2: [200.0], 4: [290.0]}})
    page = open_page(write_run_html([write_run(run, tmp_path / "one-rep")]))
    _clean(page)
    for chart in page.drawn["charts"]:
        for s in chart["series"]:
            assert s["bars"] == 0, (chart["id"], s)
    assert {s["name"]: s["points"] for s in page.chart("throughput")["series"]} == {
        "plain": 3, "mtp-k2": 3}


def test_an_open_loop_run_draws_its_rate_ladder(open_page: OpenPage, tmp_path: Path) -> None:
    run_dir = _copy(OPEN_LOOP, tmp_path)
    run = load_run(run_dir)
    rates: dict[str, set[float]] = defaultdict(set)
    for c in run.cells:
        if (arrival := _arrival(c)) and arrival.get("rate") is not None:
            rates[c.arm].add(float(arrival["rate"]))
    page = open_page(write_run_html([run_dir]))
    _clean(page)
    assert {s["name"]: s["xs"] for s in page.chart("rate_slo")["series"]} == {
        arm: sorted(r) for arm, r in rates.items()}
    assert {s["name"]: s["xs"] for s in page.chart("load_tok_s")["series"]} == {
        arm: [f"{r:g}" for r in sorted(rs)] for arm, rs in rates.items()}
    assert "throughput" not in {c["id"] for c in page.drawn["charts"]}  # no closed-loop cell


def _trace_cell(arm: str, tok_s: float) -> CellRow:
    return CellRow(
        run_id="run-a", arm=arm, concurrency=0, rep=0, prompt_class="prose",
        cell=f"{arm}|trace|r0|prose", requests=20, wall_s=10.0, output_tokens=int(tok_s * 10),
        output_tok_s=tok_s, arrival={"process": "trace", "trace": {"format": "tailpod",
                                                                   "speed": 1.0}},
        achieved_rate_rps=1.8, offered_rate_rps=1.7, slo={"ttft_ms": 200.0}, slo_percentile=90.0,
        slo_attainment=0.9, goodput_rps=1.6, goodput_tok_s=0.9 * tok_s, ttft_sched_p90_s=0.2,
        schedule_lag_max_s=0.001,
    )  # fmt: skip


def test_a_trace_run_draws_each_arm_at_the_replayed_trace(
    open_page: OpenPage, tmp_path: Path
) -> None:
    run = build_run({"plain": {1: [1.0]}, "ngram-k2": {1: [1.0]}})
    run.cells[:] = [_trace_cell("plain", 100.0), _trace_cell("ngram-k2", 120.0)]
    page = open_page(write_run_html([write_run(run, tmp_path / "trace")]))
    _clean(page)
    for chart_id in ("load_tok_s", "load_goodput"):
        assert {s["name"]: s["xs"] for s in page.chart(chart_id)["series"]} == {
            "plain": ["trace"], "ngram-k2": ["trace"]}


def test_the_harness_hears_a_console_error(open_page: OpenPage, tmp_path: Path) -> None:
    """What the tests above assert empty can be non-empty: a page that logs an error and throws
    is heard, so `console == []` means the report's pages said nothing."""
    bad = tmp_path / "bad.html"
    bad.write_text('<body data-drawn="{}" data-ready="1"><script>console.error("drawn wrong");'
                   "missing();</script></body>")
    console = open_page(bad).console
    assert any("drawn wrong" in m for m in console)
    assert any("missing is not defined" in m for m in console)
