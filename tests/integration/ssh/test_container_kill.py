"""A sandbox pod's teardown kills its processes (and their sessions), and nothing else."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

from tailpod.sandbox.sshd import (
    CONTAINER_MARKER,
    SshdPodHost,
    _session_of,
    kill_container_processes,
)

# The parent carries the marker; its child starts with an empty environment, as a vLLM worker's
# environment looks after it renames itself. Both share the parent's session.
PARENT = (
    "import subprocess,sys,time;"
    "c=subprocess.Popen([sys.executable,'-c','import time; time.sleep(60)'],env={});"
    "print(c.pid,flush=True);time.sleep(60)"
)


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def test_session_id_is_read_from_the_right_field() -> None:
    assert _session_of(str(os.getpid())) == os.getsid(0)


def test_kills_the_pod_session_only() -> None:
    env = {**os.environ, CONTAINER_MARKER: "sandbox:pod-1"}
    pod = subprocess.Popen(
        [sys.executable, "-c", PARENT],
        env=env,
        stdout=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    other = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(60)"],
        env={**os.environ, CONTAINER_MARKER: "sandbox:pod-2"},
        start_new_session=True,
    )
    try:
        assert pod.stdout is not None
        child = int(pod.stdout.readline())
        killed = kill_container_processes("sandbox:pod-1")
        assert {pod.pid, child} <= set(killed)
        pod.wait(timeout=10)
        deadline = time.time() + 10
        while alive(child) and time.time() < deadline:
            time.sleep(0.1)
        assert not alive(child)
        assert other.poll() is None  # another pod's process lives on
        assert os.getpid() not in killed
    finally:
        other.kill()
        pod.kill()
        other.wait(timeout=10)


def test_two_sandboxes_never_share_a_marker_for_the_same_pod_id(tmp_path: Path) -> None:
    # vast.ai pod ids count up from the same number in every sandbox: a terminate in one
    # sandbox must not kill the same-numbered pod of another sandbox on this machine.
    pod = SimpleNamespace(key="vast:31000008")
    one, two = SshdPodHost(tmp_path / "one"), SshdPodHost(tmp_path / "two")
    assert one.container_marker(pod) != two.container_marker(pod)  # type: ignore[arg-type]
    assert one.container_marker(pod).startswith("vast:31000008@")  # type: ignore[arg-type]
