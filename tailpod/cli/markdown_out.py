"""Markdown written for report files, printed on the terminal: rendered by rich (headings, bold,
tables sized to the terminal) when stdout is a terminal, the text as it is for a pipe or a file.
Either way an image link becomes a `plot: PATH` line, since neither a terminal nor a pipe shows
a picture (newcomer finding 2.11: `![…](rate.png)` and `##` reached the terminal raw)."""

from __future__ import annotations

import re
from pathlib import Path

from rich.console import Console
from rich.markdown import Markdown

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


def print_markdown(text: str, console: Console, base: Path | None = None) -> None:
    """`text` (markdown) on `console`: rendered on a terminal, as it is elsewhere (never
    re-wrapped, so a pipe gets whole table rows); image links as plot lines either way."""
    text = plot_lines(text, base)
    if console.is_terminal:
        console.print(Markdown(text))
    else:
        console.file.write(text.rstrip("\n") + "\n")
        console.file.flush()
