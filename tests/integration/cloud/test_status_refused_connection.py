"""`status` against a provider URL where nothing listens (a stopped sandbox, a stale
TAILPOD_RUNPOD_URL) answers at once, naming the URL it could not reach and the setting that holds
it, and exits 3: a refused connection is not retried for half a minute (newcomer 2.28)."""

from __future__ import annotations

import socket
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tailpod.cli.main import app
from tailpod.sandbox import Sandbox


def _refusing_url() -> str:
    """A local port nothing listens on: bound once to pick it, then closed."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"http://127.0.0.1:{port}"


def test_status_against_a_refused_connection_answers_at_once_naming_the_url(
        sandbox: Sandbox, tailpod_home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    url = _refusing_url()
    for key, value in {**sandbox.env(), "TAILPOD_RUNPOD_URL": url}.items():
        monkeypatch.setenv(key, value)
    monkeypatch.delenv("VAST_API_KEY")
    started = time.monotonic()
    result = CliRunner().invoke(app, ["status", "--no-beat"])
    took = time.monotonic() - started
    assert result.exit_code == 3, result.output
    assert took < 5.0, f"status took {took:.1f} s on a refused connection"
    assert "nothing is running" not in result.output
    assert url in result.stderr and "TAILPOD_RUNPOD_URL" in result.stderr
    assert "the ledger holds 0 cloud pods" in result.stderr
