"""The open-loop section (results/slo.py): attainment and goodput against rate per arm, and the
max rate under SLO, from constructed cell rows with known answers."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tailpod.results.analysis import analyze
from tailpod.results.report import render_run_markdown
from tailpod.results.schema import CellRow
from tailpod.results.slo import RATE_PLOT_FILE, compute


def _open_cell(arm: str, rate: float | str, rep: int, attainment: float,
               tok_s: float) -> CellRow:
    wall = 10.0
    data: dict[str, Any] = {
        "run_id": "run-a", "arm": arm, "concurrency": 0, "rep": rep, "prompt_class": "prose",
        "cell": f"{arm}|rate{rate}|r{rep}|prose", "requests": 100, "wall_s": wall,
        "output_tokens": int(tok_s * wall), "output_tok_s": tok_s,
        "arrival": {"process": "poisson", "rate": rate, "burstiness": 1.0, "seed": rep,
                    "requests": 100},
        "achieved_rate_rps": 9.0, "slo": {"ttft_ms": 500.0}, "slo_percentile": 90.0,
        "slo_attainment": attainment, "goodput_rps": attainment * 10,
        "goodput_tok_s": attainment * tok_s, "ttft_sched_p90_s": 0.2,
        "schedule_lag_max_s": 0.001,
    }
    return CellRow(**data)


def test_max_rate_under_slo_is_the_last_rate_before_the_first_miss(make_run: Any) -> None:
    run = make_run({"plain": {1: [100.0, 100.0]}}, price=3.6)
    # rate 1 and 2 meet 90%; 4 misses (median of 0.5, 0.95, 0.6 = 0.6); 8 meets again (noise)
    for rate, atts in ((1, [0.99, 1.0]), (2, [0.93, 0.91]), (4, [0.5, 0.95, 0.6]),
                       (8, [0.92])):
        for rep, att in enumerate(atts):
            run.cells.append(_open_cell("plain", rate, rep, att, 1000.0))
    section = compute(run)
    assert section is not None
    by_rate = {p["rate"]: p for p in section["points"] if p["arm"] == "plain"}
    assert by_rate[2]["slo_attainment"] == 0.92 and by_rate[2]["slo_met"] is True
    assert by_rate[4]["slo_attainment"] == 0.6 and by_rate[4]["slo_met"] is False
    assert by_rate[4]["reps"] == 3
    (arm,) = section["arms"]
    assert arm["max_rate_under_slo"] == 2 and arm["bracket_above"] == 4
    assert arm["goodput_rps_at_max"] == 9.2
    # $3.6/h at 1000 tok/s: 3.6 / 3.6e6 tok * 1e6 = $1 per Mtok
    assert abs(arm["usd_per_mtok_at_max"] - 1.0) < 1e-9
    md = render_run_markdown(analyze(run))
    assert "## Open loop: SLO attainment" in md and "| plain | 2 | 9.20 | 1.000 | 4 |" in md


def test_open_loop_cells_stay_out_of_the_concurrency_tables(make_run: Any) -> None:
    run = make_run({"plain": {1: [100.0]}})
    run.cells.append(_open_cell("plain", "inf", 0, 0.1, 5000.0))
    an = analyze(run)
    assert [(c["arm"], c["concurrency"]) for c in an["cells"]] == [("plain", 1)]
    assert an["slo"]["points"][0]["rate"] == float("inf")
    assert an["slo"]["arms"][0]["max_rate_under_slo"] is None


def test_a_closed_loop_run_has_no_slo_section(make_run: Any) -> None:
    run = make_run({"plain": {1: [100.0]}})
    assert analyze(run)["slo"] is None
    assert "Open loop" not in render_run_markdown(analyze(run))


def test_rate_plot_draws_the_ladder_per_arm(make_run: Any, tmp_path: Path,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    from tailpod.results import plots

    run = make_run({"plain": {1: [100.0]}}, price=3.6)
    for rate, atts in ((1, [0.99, 1.0]), (2, [0.93, 0.91]), (4, [0.5, 0.95, 0.6])):
        for rep, att in enumerate(atts):
            run.cells.append(_open_cell("plain", rate, rep, att, 1000.0))
    run.cells.append(_open_cell("plain", "inf", 0, 0.1, 5000.0))  # no place on a rate axis
    an = analyze(run)
    drawn = plots.write_plots(an, tmp_path)
    assert drawn["rate"] == tmp_path / RATE_PLOT_FILE
    assert drawn["rate"].read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    kept: list[Any] = []
    monkeypatch.setattr(plots, "_save", lambda fig, path, analysis: kept.append(fig) or path)
    plots.plot_rate(an, tmp_path / "again.png")
    top, bottom = kept[0].axes
    # medians over reps, in percent: 99.5, 92, 60 (inf left out); TTFT p90 0.2 s = 200 ms
    assert top.lines[0].get_xydata().tolist() == [[1, 99.5], [2, 92.0], [4, 60.0]]
    assert bottom.lines[0].get_xydata().tolist() == [[1, 200.0], [2, 200.0], [4, 200.0]]
    assert [ln.get_ydata()[0] for ln in top.lines[1:]] == [90.0]  # the pass line
    assert [ln.get_ydata()[0] for ln in bottom.lines[1:]] == [500.0]  # the TTFT target
    md = render_run_markdown(an)
    assert f"![SLO attainment and TTFT p90 against request rate]({RATE_PLOT_FILE})" in md


def test_no_rate_plot_without_a_finite_rate(make_run: Any, tmp_path: Path) -> None:
    from tailpod.results import plots

    run = make_run({"plain": {1: [100.0]}})
    run.cells.append(_open_cell("plain", "inf", 0, 0.1, 5000.0))
    an = analyze(run)
    assert "rate" not in plots.write_plots(an, tmp_path)
    assert not (tmp_path / RATE_PLOT_FILE).exists()
    assert RATE_PLOT_FILE not in render_run_markdown(an)
