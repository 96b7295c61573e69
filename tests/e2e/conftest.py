"""The real CPU vLLM engine, started once per test module and relaunched per arm (never per test)."""

from __future__ import annotations

import os
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


def _session_leader_cmdline(pid: int) -> str | None:
    """The command line of the process's session leader; None when the leader is gone."""
    try:
        sid = os.getsid(pid)
        return (Path(f"/proc/{sid}") / "cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return None


@pytest.fixture(scope="module")
def leftover_engines() -> Callable[[str], set[int]]:
    """Engine processes that appeared during this module and are still alive, leaving out those
    whose live session leader serves a model outside `mine` (someone else's engine on this
    machine). An orphan whose leader died counts: that is exactly what a leak looks like."""
    before = engine_processes()

    def leftover(mine: str) -> set[int]:
        found = set()
        for pid in engine_processes() - before:
            leader = _session_leader_cmdline(pid)
            if leader is None or mine in leader:
                found.add(pid)
        return found

    return leftover
