"""Headless Chromium (Debian's `chromium`, installed by `make test` as root:
scripts/system-requirements.sh) opens a page once: the DOM after its script ran, every console
message, and a screenshot kept under pytest's tmp dir. The tests skip, saying why, without it."""

from __future__ import annotations

import html
import json
import os
import re
import shutil
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

CHROMIUM = os.environ.get("CHROMIUM") or shutil.which("chromium") or "/usr/bin/chromium"
# --enable-logging=stderr --v=0 makes Chromium print each console message (log, warning, error,
# an uncaught exception) to stderr as `INFO:CONSOLE:<line>] "<message>", source: <url>`.
_CONSOLE = re.compile(r":CONSOLE[^\]]*\]\s*(.*)")


@dataclass(frozen=True)
class Page:
    dom: str
    console: list[str]
    drawn: dict[str, Any]  # what page.js says it drew (<body data-drawn>)
    screenshot: Path

    def chart(self, chart_id: str) -> dict[str, Any]:
        return next(c for c in self.drawn["charts"] if c["id"] == chart_id)


def _open(path: Path, artifacts: Path) -> Page:
    shot = artifacts / (path.stem + ".png")
    profile = artifacts / "chromium-profile"
    result = subprocess.run(
        [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
         "--disable-extensions", "--disable-background-networking", f"--user-data-dir={profile}",
         "--enable-logging=stderr", "--v=0", "--hide-scrollbars", "--window-size=1280,2000",
         f"--screenshot={shot}", "--dump-dom", path.resolve().as_uri()],
        capture_output=True, text=True, timeout=60,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    console = [m.group(1) for line in result.stderr.splitlines() if (m := _CONSOLE.search(line))]
    found = re.search(r'data-drawn="([^"]*)"', result.stdout)
    assert found, f"the page wrote no data-drawn; console: {console}"
    assert 'data-ready="1"' in result.stdout, f"the page's script did not finish: {console}"
    return Page(result.stdout, console, json.loads(html.unescape(found.group(1))), shot)


@pytest.fixture()
def open_page(tmp_path: Path) -> Callable[[Path], Page]:
    if not (os.path.isfile(CHROMIUM) and os.access(CHROMIUM, os.X_OK)):
        pytest.skip(f"no Chromium at {CHROMIUM}: `make test` installs it as root "
                    "(apt-get install chromium)")
    artifacts = tmp_path / "browser"
    artifacts.mkdir()
    return lambda path: _open(path, artifacts)
