"""`benchmark`'s spinner keeps the cell being measured and its time left ahead of the pod's own
lines for the whole sweep (cli/sweep_progress.py; newcomer 2.13: it said "connecting ... over SSH"
from the first second to the last). Without a terminal each line goes out as it came."""

from __future__ import annotations

from tailpod.cli.sweep_progress import LINE_WIDTH, cell_progress_line

CELL = "cell 3/28 arm=mtp-k2 c=16 rep=4, ~310 s left"


def test_on_a_terminal_the_cell_leads_every_line_and_survives_the_cut() -> None:
    shown: list[str] = []
    host_line, on_cell = cell_progress_line(lambda _t, line: shown.append(line), on_terminal=True)
    host_line(0.0, "connecting to root@pod over SSH (up to 60 s)")
    assert shown == ["connecting to root@pod over SSH (up to 60 s)"]  # no cell yet
    on_cell(CELL)
    assert shown[-1] == CELL
    host_line(1.0, "[probe]  " + "x" * 200)
    # the spinner keeps a line's last 90 characters: the cell is whole, the pod's line cut
    assert shown[-1] == CELL + " · " + ("[probe] " + "x" * 200)[-(LINE_WIDTH - len(CELL) - 3):]
    assert len(shown[-1]) == LINE_WIDTH


def test_without_a_terminal_each_line_goes_out_as_it_came() -> None:
    shown: list[str] = []
    host_line, on_cell = cell_progress_line(lambda _t, line: shown.append(line), on_terminal=False)
    on_cell(CELL)
    host_line(1.0, "[probe] warming up")
    assert shown == [CELL, "[probe] warming up"]
