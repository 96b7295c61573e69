"""A pod whose SSH session dies while a command runs (adversary-2026-12 #28: a box killed 8 s into
a benchmark) is named as a lost connection. At e816682 the command came back as exit status -1
(paramiko's answer for a channel closed without one) and `benchmark` said only `probe run failed
(no-envelope): no result envelope (exit -1)`, with no word about SSH."""

from __future__ import annotations

import contextlib
import os
import signal
import threading
import time
from pathlib import Path

import pytest

from tailpod.config import load_settings
from tailpod.provision.ssh import SshTarget, open_ssh
from tailpod.provision.ssh.client import SshError
from tailpod.sandbox.sshd import SshdHost

pytestmark = pytest.mark.sshd


def test_a_session_dropped_mid_command_is_named_as_a_lost_connection(
        sshd_host: SshdHost, tmp_path: Path, user_key: Path) -> None:
    settings = load_settings(env={"TAILPOD_HOME": str(tmp_path / "home"),
                                  "TAILPOD_SSH_KEY": str(user_key)},
                             dotenv_path=tmp_path / "absent.env")
    session = open_ssh(settings, SshTarget(sshd_host.host, sshd_host.port, sshd_host.user),
                       wait_s=10)
    pids = tmp_path / "pids"
    killed: list[int] = []

    def drop_the_session() -> None:
        """SIGKILL the sshd process serving this session (the command's parent), then the
        command itself, as a box that dies takes both."""
        end = time.monotonic() + 20
        while time.monotonic() < end and not pids.exists():
            time.sleep(0.05)
        time.sleep(0.2)  # the write is whole
        command, parent = (int(p) for p in pids.read_text().split())
        for pid in (parent, command):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
                killed.append(pid)

    killer = threading.Thread(target=drop_the_session, daemon=True)
    killer.start()
    try:
        with pytest.raises(SshError) as caught:
            session.run(f"echo $$ $PPID > {pids}; exec sleep 20", timeout_s=30)
    finally:
        killer.join(25)
        with contextlib.suppress(Exception):
            session.close()
    assert killed, "the session's processes were never found"
    assert "was lost while running a command" in str(caught.value), caught.value
