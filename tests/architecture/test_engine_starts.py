"""The session's engine-start counter (tests/engine_starts.py): it counts each engine process of
this session once, however often it is sampled, and leaves other sessions' engines and the helper
processes around an engine (its shell wrapper) out."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.engine_starts import EngineStartCounter, _is_engine

SLEEP = "import time; time.sleep(60)"


@pytest.fixture()
def spawn() -> Iterator[Callable[..., subprocess.Popen[bytes]]]:
    started: list[subprocess.Popen[bytes]] = []

    def run(*argv: str) -> subprocess.Popen[bytes]:
        proc = subprocess.Popen([sys.executable, "-c", SLEEP, *argv])
        started.append(proc)
        # Until the child has exec'd, /proc shows the forking parent's command line.
        cmdline = Path(f"/proc/{proc.pid}/cmdline")
        deadline = time.monotonic() + 30
        while SLEEP.encode() not in cmdline.read_bytes():
            assert time.monotonic() < deadline, "the child never exec'd"
            time.sleep(0.01)
        return proc

    yield run
    for proc in started:
        proc.kill()
        proc.wait(timeout=10)


def test_what_counts_as_an_engine() -> None:
    assert _is_engine(b"/venv/bin/python\0-m\0vllm.entrypoints.openai.api_server\0--model\0m\0")
    assert _is_engine(b"/venv/bin/vllm\0serve\0/models/target\0")
    assert _is_engine(b"vllm\0serve\0m\0")
    assert _is_engine(b"python\0/pod/bare-ab.py\0--serve-argv-file\0argv.json\0")
    # the shell that runs bare.py is one command line: the bare process itself is the engine
    assert not _is_engine(b"sh\0-c\0python /pod/bare-ab.py --serve-argv-file argv.json\0")
    assert not _is_engine(b"VLLM::EngineCore\0")  # a served engine's core, counted by its server
    assert not _is_engine(b"python\0-m\0pytest\0-m\0engine\0")


def test_each_engine_of_this_session_counts_once(
    spawn: Callable[..., subprocess.Popen[bytes]], tmp_path: Path
) -> None:
    counter = EngineStartCounter(str(tmp_path))
    counter.current = "first"
    spawn("vllm.entrypoints.openai.api_server", str(tmp_path / "models" / "target"))
    spawn("vllm.entrypoints.openai.api_server", "/elsewhere/models/target")  # another session's
    counter.scan()
    counter.scan()
    assert counter.total == 1
    counter.current = "second"
    spawn("--serve-argv-file", str(tmp_path / "argv.json"))
    counter.scan()
    assert dict(counter.by_test) == {"first": 1, "second": 1}
