"""`benchmark`'s progress: the cell being measured and the time left (measure/sweep.py
cell_progress) lead the spinner's line for the whole sweep, and the pod's own latest line (the SSH
connect, the engine's start, the probe) follows it. Without a terminal each goes on stderr as its
own line (cli/common.py step_say). Before, the spinner said "connecting ... over SSH (up to 60 s)"
from the first second to the last (newcomer finding 2.13)."""

from __future__ import annotations

from collections.abc import Callable

from tailpod.cli.common import console

Spinner = Callable[[float, str], None]

# cli/pods.py startup_progress shows a line's last 90 characters: the cell's text is kept whole
LINE_WIDTH = 90


def cell_progress_line(spinner: Spinner, on_terminal: bool | None = None
                       ) -> tuple[Spinner, Callable[[str], None]]:
    """(the callback the sweep's host reports its lines through, the one the sweep reports each
    cell through), both drawing on `spinner`; `on_terminal` defaults to the console's."""
    cell = [""]
    if on_terminal is None:
        on_terminal = console.is_terminal

    def host_line(elapsed: float, line: str) -> None:
        text = " ".join(str(line).split())
        if not on_terminal or not cell[0]:
            spinner(elapsed, text)
            return
        room = LINE_WIDTH - len(cell[0]) - 3
        spinner(elapsed, f"{cell[0]} · {text[-room:]}" if room > 0 and text else cell[0])

    def on_cell(text: str) -> None:
        cell[0] = text
        spinner(0.0, text)

    return host_line, on_cell
