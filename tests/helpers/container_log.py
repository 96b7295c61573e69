"""Waiting on a sandbox pod's container log (tailpod/sandbox/podhost.py writes it as the pod runs)."""

from __future__ import annotations

import time
from pathlib import Path


def wait_for_log(path: Path, text: str, times: int = 1, timeout: float = 30.0) -> str:
    """The log once `text` is in it `times` times, or what it holds at the timeout. Each line a
    container prints lands in its own moment, so a check of two lines waits for both."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if path.exists() and path.read_text().count(text) >= times:
            return path.read_text()
        time.sleep(0.05)
    return path.read_text() if path.exists() else ""
