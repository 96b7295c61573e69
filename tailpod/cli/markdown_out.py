"""Markdown written for report files, printed on the terminal: rendered by rich (headings, bold,
tables sized to the terminal) when stdout is a terminal, the text as it is for a pipe or a file.
Either way an image link becomes a `plot: PATH` line, since neither a terminal nor a pipe shows
a picture (newcomer finding 2.11: `![…](rate.png)` and `##` reached the terminal raw)."""

from __future__ import annotations

import re
from pathlib import Path

from rich import box
from rich.console import Console
from rich.markdown import Markdown
from rich.markup import escape
from rich.table import Table
from rich.text import Text

IMAGE_LINK = re.compile(r"!\[([^\]]*)\]\(([^)\s]+)\)")


def plot_lines(text: str, base: Path | None) -> str:
    """Each `![alt](file)` as `plot: PATH` (PATH under `base`), or, for a file not drawn yet,
    where `tailpod report` will draw it."""

    def one(m: re.Match[str]) -> str:
        path = base / m.group(2) if base is not None else Path(m.group(2))
        if path.exists():
            return f"plot: {path}"
        return f"plot: {path} (not drawn yet: tailpod report {path.parent} draws it)"

    return IMAGE_LINK.sub(one, text)


def _cells(line: str) -> list[str]:
    return [c.strip() for c in line.strip().strip("|").split("|")]


def _inline(cell: str) -> Text:
    """A table cell's inline markdown (bold, strike-through, code) as styled text."""
    marked = escape(cell)
    marked = re.sub(r"~~(.+?)~~", r"[strike]\1[/strike]", marked)
    marked = re.sub(r"\*\*(.+?)\*\*", r"[bold]\1[/bold]", marked)
    return Text.from_markup(marked.replace("`", ""))


def _table(lines: list[str]) -> Table:
    """A pipe table as a rich table whose cells wrap and fold rather than end in an ellipsis, so
    every figure stays whole at the terminal's width."""
    table = Table(box=box.SIMPLE_HEAD, pad_edge=False)
    for head in _cells(lines[0]):
        table.add_column(_inline(head), overflow="fold")
    for line in lines[2:]:  # lines[1] is the |---| rule
        table.add_row(*(_inline(c) for c in _cells(line)))
    return table


def _blocks(text: str) -> list[Markdown | Table]:
    """The text as markdown between its pipe tables, each table a rich table of its own."""
    out: list[Markdown | Table] = []
    prose: list[str] = []
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        if lines[i].startswith("|") and i + 1 < len(lines) and lines[i + 1].startswith("|-"):
            j = i + 2
            while j < len(lines) and lines[j].startswith("|"):
                j += 1
            if prose:
                out.append(Markdown("\n".join(prose)))
                prose = []
            out.append(_table(lines[i:j]))
            i = j
            continue
        prose.append(lines[i])
        i += 1
    if prose:
        out.append(Markdown("\n".join(prose)))
    return out


def print_markdown(text: str, console: Console, base: Path | None = None) -> None:
    """`text` (markdown) on `console`: rendered on a terminal, as it is elsewhere (never
    re-wrapped, so a pipe gets whole table rows); image links as plot lines either way."""
    text = plot_lines(text, base)
    if console.is_terminal:
        for block in _blocks(text):
            console.print(block)
    else:
        console.file.write(text.rstrip("\n") + "\n")
        console.file.flush()
