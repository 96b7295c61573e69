"""The terminal never gets raw Markdown (newcomer 2.11, 2.17, 2.19): `benchmark`'s open-loop
summary, `decide` and `compare` print through cli/markdown_out.py, rendered by rich on a terminal
and as plain Markdown in a pipe, with every image link a `plot: PATH` line either way; `compare`
writes the comparison and the plot it links, and keeps its inputs' stamps."""

from __future__ import annotations

import io
import json
import re
from pathlib import Path
from typing import Any

import pytest
import typer
from rich.console import Console
from typer.testing import CliRunner

from tailpod.cli import decide as decide_cli
from tailpod.cli import results as results_cli
from tailpod.cli.markdown_out import print_markdown
from tailpod.results.io import write_run
from tailpod.results.schema import CellRow, PodDescription
from tailpod.results.slo import render as render_slo
from tests.helpers.run_builder import build_run

WIDTH = 100


@pytest.fixture()
def app(tailpod_home: Path) -> typer.Typer:
    app = typer.Typer()

    @app.callback()
    def _root() -> None:
        """test root"""

    results_cli.register(app)
    decide_cli.register(app)
    return app


def _terminal() -> tuple[Console, io.StringIO]:
    buf = io.StringIO()
    return Console(file=buf, force_terminal=True, width=WIDTH, color_system=None), buf


def _open_loop_section() -> Any:
    from tailpod.results.analysis import analyze

    run = build_run({"plain": {1: [1.0]}}, price=3.6)
    run.cells[:] = [CellRow(
        run_id="run-a", arm="plain", concurrency=0, rep=0, prompt_class="prose",
        cell=f"plain|rate{rate}|r0|prose", requests=20, wall_s=10.0, output_tokens=600,
        output_tok_s=60.0, achieved_rate_rps=1.8, slo={"ttft_ms": 200.0}, slo_percentile=90.0,
        arrival={"process": "poisson", "rate": rate, "burstiness": 1.0, "seed": 0, "requests": 20},
        slo_attainment=0.95, goodput_rps=1.9, goodput_tok_s=57.0, ttft_sched_p90_s=0.2,
        schedule_lag_max_s=0.001,
    ) for rate in (2, 8)]  # fmt: skip
    return analyze(run)["slo"]


def _assert_rendered(out: str) -> None:
    assert out.strip()
    assert not re.search(r"^\s*#", out, re.M), out  # headings rendered, not `##`
    assert "![" not in out and "|---" not in out and "**" not in out, out
    assert "…" not in out, out  # a cell folds, it is never cut short
    assert max(len(line) for line in out.splitlines()) <= WIDTH


def test_the_open_loop_summary_is_rendered_on_a_terminal(tmp_path: Path) -> None:
    console, buf = _terminal()
    print_markdown("\n".join(render_slo(_open_loop_section())), console, tmp_path)
    out = buf.getvalue()
    _assert_rendered(out)
    # the table's rows survive whole: arm, rate and figures on one line
    assert re.search(r"plain\s+8\s+1\s+1\.80\s+95\.0%\s+1\.90\s+57\.0\s+200", out), out
    # rate.png is not drawn by benchmark: the line says where and by what it will be
    words = " ".join(out.split())  # a long path may wrap on the terminal
    assert f"plot: {tmp_path / 'rate.png'} (not drawn yet: tailpod report {tmp_path} draws it)" \
        in words


def test_a_pipe_gets_markdown_text_whole_and_no_image_link(tmp_path: Path) -> None:
    (tmp_path / "rate.png").write_bytes(b"png")
    buf = io.StringIO()
    console = Console(file=buf, force_terminal=False, width=40)
    text = "\n".join(render_slo(_open_loop_section()))
    print_markdown(text, console, tmp_path)
    out = buf.getvalue()
    assert "![" not in out and f"plot: {tmp_path / 'rate.png'}\n" in out
    # never re-wrapped at the console's width: each table row is one line
    row = next(line for line in text.splitlines() if line.startswith("| plain | 8 |"))
    assert row in out.splitlines()


def _run_dir(tmp_path: Path, run_id: str, emulated: bool = False) -> Path:
    run = build_run({"plain": {1: [100.0, 102.0], 2: [180.0, 182.0]},
                     "mtp-k2": {1: [150.0, 151.0], 2: [170.0, 171.0]}}, run_id=run_id)
    if emulated:
        run.meta.pod = PodDescription(gpu="NVIDIA A100 80GB PCIe", gpu_count=1, price_per_hr=2.0,
                                      machine={"gpus": [], "cpu": "Test CPU"}, emulated=True)
    return write_run(run, tmp_path / run_id)


def test_decide_renders_its_decision_on_a_terminal(
    app: typer.Typer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    console, buf = _terminal()
    monkeypatch.setattr(decide_cli, "console", console)
    res = CliRunner().invoke(app, ["decide", str(_run_dir(tmp_path, "r1"))])
    assert res.exit_code == 0, res.output
    out = buf.getvalue()
    _assert_rendered(out)
    assert "Decision" in out and re.search(r"c=1\s+all \(pooled\)\s+mtp-k2", out), out


def test_compare_writes_what_it_links_and_keeps_the_emulated_stamp(
    app: typer.Typer, tmp_path: Path
) -> None:
    a, b = _run_dir(tmp_path, "a"), _run_dir(tmp_path, "b", emulated=True)
    out_dir = tmp_path / "cmp"
    res = CliRunner().invoke(app, ["compare", str(a), str(b), "--out", str(out_dir)])
    assert res.exit_code == 0, res.output
    (md,) = out_dir.glob("compare-*.md")
    links = re.findall(r"!\[[^\]]*\]\(([^)]+)\)", md.read_text())
    assert links and all((out_dir / link).is_file() for link in links)
    assert "![" not in res.stdout and f"plot: {out_dir / links[0]}" in res.stdout
    assert f"comparison: {md}" in res.stdout
    # the emulated run's stamp, in the written file, the printed text and the JSON
    assert "> **b: emulated provider" in md.read_text()
    assert "b: emulated provider" in res.stdout
    res = CliRunner().invoke(app, ["compare", str(a), str(b), "--json"])
    cmp = json.loads(res.stdout)
    assert cmp["hardware_stamps"]["b"].startswith("emulated provider")
    assert any(w.startswith("b: emulated provider") for w in cmp["warnings"])


def test_cost_matrix_renders_its_comparison_on_a_terminal(
    app: typer.Typer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tailpod.cli import common
    from tailpod.results.matrix import build_matrix
    from tests.unit.results.test_matrix_spot_versus_on_demand import _spot_card

    card = _spot_card(build_run, spend=3.0, preemptions=[{"pod_usd": 0.6}])
    (tmp_path / "matrix-report.json").write_text(json.dumps(build_matrix([card]), default=str))
    console, buf = _terminal()
    monkeypatch.setattr(common, "console", console)
    res = CliRunner().invoke(app, ["cost", "--matrix", str(tmp_path)])
    assert res.exit_code == 0, res.output
    out = buf.getvalue()
    _assert_rendered(out)
    assert "Spot versus on-demand" in out
    assert re.search(r"vastai:RTX 4090\s+c=1\s+plain\s+\$0\.347\s+\$0\.556", out), out
