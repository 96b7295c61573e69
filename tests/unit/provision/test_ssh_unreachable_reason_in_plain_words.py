"""Why an SSH attempt failed, in a user's words (provision/ssh/client.py `_reason`): paramiko's
"Error reading SSH protocol banner" (a port that accepts and never speaks SSH) came through as its
own text, and only when the banner wait, not the connect wait, ran out first: the adversary's
no-banner box (F9) read differently from run to run."""

from __future__ import annotations

import paramiko
import pytest

from tailpod.provision.ssh.client import _reason


@pytest.mark.parametrize(("exc", "said"), [
    (paramiko.SSHException("Error reading SSH protocol banner"),
     "the port accepted the connection but no SSH server answered (no banner)"),
    (paramiko.SSHException("Error reading SSH protocol banner[Errno 104] Connection reset"),
     "the port accepted the connection but no SSH server answered (no banner)"),
    (ConnectionRefusedError(111, "Connection refused"), "connection refused"),
    (TimeoutError("timed out"), "timed out"),
    (EOFError(), "connection closed during handshake"),
])
def test_each_failure_is_named_in_plain_words(exc: BaseException, said: str) -> None:
    assert _reason(exc) == said
