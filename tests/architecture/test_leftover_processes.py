"""The session's leftover-process check (tests/leftover_processes.py): it names the processes this
session started that still run (its children, and detached ones by its marker or its base temp
directory), and leaves everything else on the machine alone."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.leftover_processes import MARKER, leftovers, settle

SLEEP = "import time; time.sleep(60)"


@pytest.fixture()
def detached() -> Iterator[Callable[..., int]]:
    """Start `python -c SLEEP <tag>` orphaned (its parent exits at once, so init adopts it, as a
    pod agent's engine is), with the given environment and working directory; its pid."""
    started: list[int] = []

    def run(tag: str, env: dict[str, str], cwd: Path) -> int:
        launcher = ("import subprocess,sys;"
                    f"p=subprocess.Popen([sys.executable,'-c',{SLEEP!r},{tag!r}],"
                    "start_new_session=True,stdout=subprocess.DEVNULL,"
                    "stderr=subprocess.DEVNULL);print(p.pid)")
        out = subprocess.run([sys.executable, "-c", launcher], env=env, cwd=cwd,
                             capture_output=True, text=True, timeout=30, check=True).stdout
        pid = int(out)
        started.append(pid)
        cmdline = Path(f"/proc/{pid}/cmdline")
        deadline = time.monotonic() + 30
        while tag.encode() not in cmdline.read_bytes():  # until the child has exec'd
            assert time.monotonic() < deadline, "the child never exec'd"
            time.sleep(0.01)
        return pid

    yield run
    for pid in started:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


def test_names_this_sessions_processes_only(tmp_path: Path,
                                            detached: Callable[..., int]) -> None:
    marker = uuid.uuid4().hex
    base = tmp_path / "base"
    (base / "pod").mkdir(parents=True)
    clean = {"PATH": os.environ["PATH"]}
    child = subprocess.Popen([sys.executable, "-c", SLEEP, "child"], env=clean, cwd="/",
                             start_new_session=True)
    try:
        by_marker = detached("by-marker", {**clean, MARKER: marker}, Path("/"))
        by_cwd = detached("by-cwd", clean, base / "pod")
        by_env = detached("by-env", {**clean, "TAILPOD_POD_HOME": f"{base}/pod"}, Path("/"))
        other_marker = detached("other", {**clean, MARKER: uuid.uuid4().hex}, Path("/"))
        # a sibling directory whose name starts like the base temp's is another session's
        (tmp_path / "base2").mkdir()
        other_base = detached("other-base", clean, tmp_path / "base2")

        found = leftovers(marker, base)

        assert {child.pid, by_marker, by_cwd, by_env} <= set(found)
        assert other_marker not in found and other_base not in found
        assert os.getpid() not in found
        assert found[by_cwd].endswith("by-cwd")
    finally:
        child.kill()
        child.wait(timeout=10)


def test_a_process_that_exits_within_the_grace_is_not_a_leftover(tmp_path: Path) -> None:
    marker = uuid.uuid4().hex
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(1.0)"])
    try:
        assert proc.pid in settle(marker, tmp_path, grace_s=0.0)  # running: named
        assert proc.pid not in settle(marker, tmp_path, grace_s=5.0)  # exited (a zombie) in time
    finally:
        proc.kill()
        proc.wait(timeout=10)
