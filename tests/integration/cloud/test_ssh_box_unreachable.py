"""`up --provider ssh` on a box that cannot be reached (issue 38 item 7; adversary F9, #27):
an unknown name, a refused port and a port that never sends an SSH banner are each refused
within the connect deadline (seconds, where 359.7 s were seen), before the ledger holds a record
that no `down` can settle, never with "billing is NOT proven stopped" for an engine that was
never started, and with no paramiko traceback text on stderr."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tailpod.cli.main import app
from tailpod.ledger import Ledger
from tests.helpers.silent_port import silent_port

from .conftest import ssh_box_shell

CONNECT_S = 10.0  # provision/ssh_box/provider.py: SshBoxProvider's connect deadline


@pytest.fixture()
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    ssh_box_shell(tmp_path, monkeypatch)
    return tmp_path


@pytest.fixture()
def no_banner() -> Iterator[int]:
    """A loopback port that accepts every connection and never says a byte (no SSH banner)."""
    with silent_port() as port:
        yield port


@pytest.fixture()
def refused() -> Iterator[int]:
    """A loopback port bound and not listening: every connection is refused."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    try:
        yield int(sock.getsockname()[1])
    finally:
        sock.close()


@pytest.mark.parametrize("where", ["unknown name", "refused port", "no banner"])
def test_an_unreachable_box_is_refused_within_the_connect_deadline_before_any_record(
        home: Path, where: str, request: pytest.FixtureRequest) -> None:
    host = {"unknown name": lambda: "root@nohost.invalid",
            "refused port": lambda: f"root@127.0.0.1:{request.getfixturevalue('refused')}",
            "no banner": lambda: f"root@127.0.0.1:{request.getfixturevalue('no_banner')}"}[where]()
    started = time.monotonic()
    result = CliRunner().invoke(app, ["up", "--provider", "ssh", "--host", host,
                                      "--model", "Qwen/Qwen3-0.6B", "--spec-k", "0"])
    took = time.monotonic() - started
    assert result.exit_code == 2, result.output  # nothing was started: the box is bad input
    assert took < 2 * CONNECT_S + 5, f"{where}: refused after {took:.1f} s"
    flat = " ".join(result.output.split())
    assert "cannot reach" in flat and host.split("@", 1)[1] in flat, flat
    assert "nothing was started" in flat, flat
    assert "NOT proven" not in flat and "kill the process group" not in flat, flat
    assert "Traceback" not in result.output and "paramiko" not in result.output, result.output
    assert "SSH protocol banner" not in result.output, result.output
    assert Ledger(home / "home").all() == []  # no record that `down` could never settle


def test_no_paramiko_text_reaches_stderr_of_the_real_command(home: Path, no_banner: int) -> None:
    """As a user runs it (a process of its own, no test logging installed): paramiko logs the
    failed handshake with a traceback, which Python's last-resort handler would print."""
    code = "import sys; from tailpod.cli.main import main; sys.argv[0] = 'tailpod'; main()"
    proc = subprocess.run(
        [sys.executable, "-c", code, "up", "--provider", "ssh", "--host",
         f"root@127.0.0.1:{no_banner}", "--model", "Qwen/Qwen3-0.6B", "--spec-k", "0"],
        capture_output=True, text=True, timeout=120, env=dict(os.environ))
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "cannot reach" in proc.stderr, proc.stderr
    for text in ("Traceback", "paramiko", "SSH protocol banner"):
        assert text not in proc.stderr + proc.stdout, proc.stderr
