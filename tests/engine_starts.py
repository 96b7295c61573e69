"""Counts the real vLLM engines a test session starts, wherever they run (locally, under the
pod agent, inside a sandbox pod), so the cost of the engine tests reads as a number that machine
load cannot distort. tests/conftest.py registers it as a plugin; the count and the tests that
started engines are printed in the terminal summary.

An engine is one vLLM API server process (`python -m vllm.entrypoints.openai.api_server` or
`vllm serve`) or one bare.py offline decode (the serve tax), told apart from other sessions'
engines on the same machine by this session's pytest base temp directory in its command line,
working directory or environment: every engine a test starts serves a model or keeps its home
under it. A poller samples /proc; an engine start takes many seconds on CPU, far longer than the
poll interval, so none is missed in practice."""

from __future__ import annotations

import threading
from collections import Counter
from pathlib import Path

import pytest

POLL_SECONDS = 0.25


def _read(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except OSError:
        return b""


def _is_engine(cmdline: bytes) -> bool:
    """A served engine's API server, or bare.py's offline engine (the serve tax's bare decode,
    recognised by its --serve-argv-file argument)."""
    return (
        b"vllm.entrypoints.openai.api_server" in cmdline
        or b"/vllm\0serve\0" in cmdline
        or cmdline.startswith(b"vllm\0serve\0")
        or b"\0--serve-argv-file\0" in cmdline
    )


def _belongs(entry: Path, cmdline: bytes, marker: bytes) -> bool:
    if marker in cmdline or marker in _read(entry / "environ"):
        return True
    try:
        return marker in str((entry / "cwd").resolve()).encode()
    except OSError:
        return False


class EngineStartCounter:
    def __init__(self, marker: str) -> None:
        self._marker = marker.encode()
        self._seen: set[tuple[int, bytes]] = set()
        self.by_test: Counter[str] = Counter()
        self.current: str | None = "(outside a test)"
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="engine-start-counter", daemon=True)

    @property
    def total(self) -> int:
        return sum(self.by_test.values())

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
        self.scan()

    def _run(self) -> None:
        while not self._stop.wait(POLL_SECONDS):
            self.scan()

    def scan(self) -> None:
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            cmdline = _read(entry / "cmdline")
            if not _is_engine(cmdline):
                continue
            # pid plus start time (field 22 of stat): a reused pid is a new engine.
            started = _read(entry / "stat").rsplit(b")", 1)[-1].split()[19:20]
            key = (int(entry.name), started[0] if started else b"")
            if key in self._seen or not _belongs(entry, cmdline, self._marker):
                continue
            self._seen.add(key)
            if self.current is not None:
                self.by_test[self.current] += 1


class EngineStartPlugin:
    """Counts in the process that runs the tests; under xdist each worker counts its own and
    sends the counts to the controller, which prints the sum."""

    def __init__(self) -> None:
        self.counter: EngineStartCounter | None = None
        self.reported: Counter[str] = Counter()  # from xdist workers

    @pytest.hookimpl(trylast=True)
    def pytest_collection_finish(self, session: pytest.Session) -> None:
        if any(item.get_closest_marker("engine") for item in session.items):
            base = session.config._tmp_path_factory.getbasetemp()  # type: ignore[attr-defined]
            self.counter = EngineStartCounter(str(base))
            self.counter.start()

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_protocol(self, item: pytest.Item):  # type: ignore[no-untyped-def]
        if self.counter is not None:
            # Only the engine tests' starts count. The others share this session under
            # `make test` and start stand-ins with an engine's command line (a Python without
            # vLLM, this counter's own test processes).
            self.counter.current = item.nodeid if item.get_closest_marker("engine") else None
        yield

    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        if self.counter is None:
            return
        self.counter.stop()
        workeroutput = getattr(session.config, "workeroutput", None)
        if workeroutput is not None:  # an xdist worker: hand the counts to the controller
            workeroutput["engine_starts"] = dict(self.counter.by_test)

    @pytest.hookimpl(optionalhook=True)
    def pytest_testnodedown(self, node: object, error: object) -> None:
        output = getattr(node, "workeroutput", None) or {}
        self.reported.update(output.get("engine_starts") or {})

    def pytest_terminal_summary(self, terminalreporter) -> None:  # type: ignore[no-untyped-def]
        counts = Counter(self.reported)
        if self.counter is not None:
            counts.update(self.counter.by_test)
        if self.counter is None and not self.reported:
            return
        tr = terminalreporter
        tr.write_sep("=", f"engine starts: {sum(counts.values())}")
        for nodeid, count in sorted(counts.items()):
            tr.write_line(f"{count:3d}  {nodeid}")
