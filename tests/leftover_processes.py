"""The suite fails when a process it started outlives it (issue 38 item 9): a failing test once
left its sandbox pod's agent and sshd, lane servers and HAProxy running, and the next engine on
port 8000 collided with them. tests/conftest.py registers this as a plugin.

A process counts as this session's when, read from /proc:
- it descends from the process that runs the tests (sshd, a sandbox pod's container process);
- its environment carries this process's `TAILPOD_TEST_SESSION` marker, set at configure time and
  inherited by every child started with this process's environment; or
- its command line, environment or working directory names this session's pytest base temp
  directory (what a sandbox pod's agent starts: the engines, lane servers and HAProxy, which
  detach into their own sessions, run in a pod home and with a PATH under it).
Another session's processes on the same machine match none of these (their own base temp, their
own marker, not our descendants). Each process that runs tests checks its own at session end,
after the session's fixtures are torn down; under xdist each worker checks its own and hands the
leftovers to the controller. What is left after a grace period fails the run, named by command
line, and is then killed so the next run starts clean."""

from __future__ import annotations

import contextlib
import os
import signal
import time
import uuid
from pathlib import Path

import pytest

MARKER = "TAILPOD_TEST_SESSION"
GRACE_S = 5.0
POLL_S = 0.1


def _read(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except OSError:
        return b""


def _stat_fields(pid: int) -> list[bytes]:
    """/proc/<pid>/stat from field 3 (state) on; the command name may hold spaces and ')'."""
    return _read(Path(f"/proc/{pid}/stat")).rsplit(b")", 1)[-1].split()


def _pids() -> list[int]:
    return [int(e.name) for e in Path("/proc").iterdir() if e.name.isdigit()]


def _descendants(root: int, parents: dict[int, int]) -> set[int]:
    children: dict[int, list[int]] = {}
    for pid, ppid in parents.items():
        children.setdefault(ppid, []).append(pid)
    found: set[int] = set()
    todo = [root]
    while todo:
        for child in children.get(todo.pop(), []):
            if child not in found:
                found.add(child)
                todo.append(child)
    return found


def _names(pid: int, needle: bytes) -> bool:
    entry = Path(f"/proc/{pid}")
    if needle in _read(entry / "cmdline") or needle in _read(entry / "environ"):
        return True
    try:
        return needle in (os.readlink(entry / "cwd") + "/").encode()
    except OSError:
        return False


def leftovers(marker: str, base_temp: Path | None, me: int | None = None) -> dict[int, str]:
    """This session's live processes other than `me` (default: this process): pid -> command
    line."""
    me = os.getpid() if me is None else me
    parents: dict[int, int] = {}
    live: set[int] = set()
    for pid in _pids():
        fields = _stat_fields(pid)
        if len(fields) < 2 or fields[0] in (b"Z", b"X"):
            continue  # gone, or a zombie: exited, only not yet reaped by its parent
        live.add(pid)
        parents[pid] = int(fields[1])
    mine = _descendants(me, parents)
    needles = [f"{MARKER}={marker}\0".encode()]
    if base_temp is not None:
        needles.append((str(base_temp).rstrip("/") + "/").encode())
    mine |= {pid for pid in live - mine if any(_names(pid, n) for n in needles)}
    mine.discard(me)
    found = {}
    for pid in sorted(mine & live):
        cmdline = _read(Path(f"/proc/{pid}/cmdline")).replace(b"\0", b" ").strip()
        if cmdline or Path(f"/proc/{pid}").exists():
            found[pid] = cmdline.decode(errors="replace") or f"[pid {pid}]"
    return found


def settle(marker: str, base_temp: Path | None, grace_s: float = GRACE_S) -> dict[int, str]:
    """The leftovers still running after `grace_s` (processes that are exiting get that long)."""
    deadline = time.monotonic() + grace_s
    while True:
        found = leftovers(marker, base_temp)
        if not found or time.monotonic() >= deadline:
            return found
        time.sleep(POLL_S)


def kill(pids: list[int]) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)


class LeftoverProcessPlugin:
    def __init__(self) -> None:
        # Each process that runs tests has its own marker (an xdist worker inherits the
        # controller's environment, and would otherwise match its siblings' children).
        self.marker = uuid.uuid4().hex
        os.environ[MARKER] = self.marker
        self.found: dict[str, str] = {}  # "pid (where)" -> command line

    @pytest.hookimpl(trylast=True)  # after the runner tore the session's fixtures down
    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        if session.config.pluginmanager.hasplugin("dsession"):
            self._fail(session, {})  # the xdist controller runs no tests; its workers report
            return
        if not session.items:
            return
        base = session.config._tmp_path_factory.getbasetemp()  # type: ignore[attr-defined]
        left = settle(self.marker, base)
        where = os.environ.get("PYTEST_XDIST_WORKER", "this process")
        found = {f"{pid} ({where})": cmd for pid, cmd in left.items()}
        kill(list(left))
        workeroutput = getattr(session.config, "workeroutput", None)
        if workeroutput is not None:
            workeroutput["leftover_processes"] = found
        self._fail(session, found)

    @pytest.hookimpl(optionalhook=True)
    def pytest_testnodedown(self, node: object, error: object) -> None:
        output = getattr(node, "workeroutput", None) or {}
        self.found.update(output.get("leftover_processes") or {})

    def _fail(self, session: pytest.Session, found: dict[str, str]) -> None:
        self.found.update(found)
        if self.found and session.exitstatus == pytest.ExitCode.OK:
            session.exitstatus = pytest.ExitCode.TESTS_FAILED

    def pytest_terminal_summary(self, terminalreporter) -> None:  # type: ignore[no-untyped-def]
        if not self.found:
            return
        tr = terminalreporter
        tr.write_sep("=", f"{len(self.found)} process(es) the tests started outlived them "
                          "(killed now); fixtures must end what they start", red=True)
        for where, cmd in sorted(self.found.items()):
            tr.write_line(f"{where}: {cmd[:300]}")
