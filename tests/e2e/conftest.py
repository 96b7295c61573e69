"""The real CPU vLLM engine, started once per test module and relaunched per arm (never per test)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest


def engine_processes() -> set[int]:
    """Live vLLM processes: the API server by its command line, EngineCore and workers by the
    names they give themselves (their renaming hides the original command line)."""
    found = set()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if state != "Z" and ("VLLM::" in cmdline or "vllm.entrypoints" in cmdline):
            found.add(int(entry.name))
    return found


@pytest.fixture(scope="module")
def leftover_engines() -> Callable[[], set[int]]:
    """Engine processes that appeared during this module and are still alive."""
    before = engine_processes()
    return lambda: engine_processes() - before
