"""Every wait of a sweep names the cell and the time left (newcomer 2.13, 5.2): run_sweep tells
its `progress` "cell i/N arm=.. c=.. rep=.., ~N s left" before each cell, counting a resumed
sweep's finished cells (the spinner's side: tests/unit/cli/test_sweep_progress_line.py)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tailpod.measure.plan import Cell
from tailpod.measure.sweep import RunDirectory, cell_progress, run_sweep
from tests.unit.measure.test_sweep import ScriptedHost, ctx, make_plan


def test_the_line_names_the_cell_and_the_time_left_at_the_pace_so_far() -> None:
    cell = Cell(arm="ngram-k2", concurrency=4, rep=1, prompt_class="prose")
    # 3 cells measured in 60 s: 20 s each; cell 4 of 10 and the 6 after it: 7 x 20 s = 140 s
    assert cell_progress(cell, 4, 10, 60.0, 3) == "cell 4/10 arm=ngram-k2 c=4 rep=1, ~140 s left"
    assert cell_progress(cell, 1, 10, 5.0, 0) == (
        "cell 1/10 arm=ngram-k2 c=4 rep=1, time left known after this cell")
    rate = Cell(arm="plain", concurrency=0, rep=0, prompt_class="prose", rate=float("inf"))
    assert cell_progress(rate, 2, 2, 10.0, 1).startswith("cell 2/2 arm=plain rate=inf rep=0,")
    trace = Cell(arm="plain", concurrency=0, rep=2, prompt_class="prose", trace=True)
    assert cell_progress(trace, 1, 1, 0.0, 0).startswith("cell 1/1 arm=plain trace rep=2,")


def test_the_sweep_says_each_cell_before_measuring_it_and_counts_a_resume(tmp_path: Path) -> None:
    lines: list[str] = []
    with pytest.raises(KeyboardInterrupt):
        run_sweep(make_plan([0, 1], extend=False), RunDirectory(tmp_path),
                  ScriptedHost({0: 10, 1: 15}, crash_after_cells=2), ctx(),
                  log=lambda *_: None, progress=lines.append)
    heads = [line.split(",")[0] for line in lines]
    # two arms x c=1,2 x 1 rep = 4 cells; the third was announced when the host failed
    assert heads == ["cell 1/4 arm=plain c=1 rep=0", "cell 2/4 arm=plain c=2 rep=0",
                     "cell 3/4 arm=ngram-k1 c=1 rep=0"]
    assert lines[0].endswith("time left known after this cell")
    assert re.search(r", ~\d+ s left$", lines[1])
    lines.clear()
    run_sweep(make_plan([0, 1], extend=False), RunDirectory(tmp_path),
              ScriptedHost({0: 10, 1: 15}), ctx(), log=lambda *_: None, progress=lines.append)
    assert [line.split(",")[0] for line in lines] == ["cell 3/4 arm=ngram-k1 c=1 rep=0",
                                                      "cell 4/4 arm=ngram-k1 c=2 rep=0"]
