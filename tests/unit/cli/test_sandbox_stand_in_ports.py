"""`sandbox serve --stand-in-port NAME=PORT` pins a stand-in's port (registry, hub, tailscale), as
`--runpod-port` pins an emulator's. At e816682 the stand-ins took random ports and no flag could
pin them, so a user with a port policy could not comply (newcomer 2.1). A bad value is one line,
exit 2, before anything starts."""

from __future__ import annotations

import os
import socket
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from tailpod.cli.main import app
from tailpod.errors import ConfigError


class Started(ConfigError):
    pass


@pytest.fixture()
def started(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> list[dict[str, Any]]:
    """start_sandbox's arguments, recorded and stopped there."""
    monkeypatch.setenv("TAILPOD_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("TAILPOD_ENV_FILE", os.devnull)
    calls: list[dict[str, Any]] = []

    def start(*_a: Any, **k: Any) -> None:
        calls.append(k)
        raise Started("sandbox started")

    monkeypatch.setattr("tailpod.sandbox.start_sandbox", start)
    monkeypatch.setattr("tailpod.sandbox.world.stand_in_config",
                        lambda _dir: {"registry": {"images": {}}, "hub": {"repos": {}}})
    return calls


@pytest.mark.parametrize(("flags", "says"), [
    (["--stand-in-port", "tailscale"], "--stand-in-port takes NAME=PORT"),
    (["--stand-in-port", "tailscale=0"], "PORT 1-65535; got 'tailscale=0'"),
    (["--stand-in-port", "tailscale=65536"], "got 'tailscale=65536'"),
    (["--stand-in-port", "nope=31000"], "NAME one of registry, hub, tailscale"),
    (["--stand-in-port", "hub=31000", "--stand-in-port", "hub=31001"],
     "--stand-in-port names hub twice"),
    (["--stand-in-port", "hub=31000", "--no-stand-ins"], "--no-stand-ins leaves out"),
])
def test_a_bad_stand_in_port_is_one_line_before_anything_starts(
        started: list[dict[str, Any]], flags: list[str], says: str) -> None:
    result = CliRunner().invoke(app, ["sandbox", "serve", *flags])
    assert result.exit_code == 2, result.output
    assert says in " ".join(result.output.split())
    assert "╭" not in result.output
    assert started == []


def test_each_pinned_stand_in_gets_its_port(started: list[dict[str, Any]]) -> None:
    result = CliRunner().invoke(app, ["sandbox", "serve", "--stand-in-port", "tailscale=31777",
                                      "--stand-in-port", "hub=31778"])
    assert "sandbox started" in result.output, result.output
    (call,) = started
    assert call["stand_in_config"] == {"registry": {"images": {}},
                                       "hub": {"repos": {}, "port": 31778},
                                       "tailscale": {"port": 31777}}


def test_the_sandbox_serves_a_stand_in_on_the_pinned_port(tmp_path: Path) -> None:
    from tailpod.sandbox import start_sandbox

    with socket.socket() as probe:  # a port free now
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    with start_sandbox(workdir=tmp_path / "sb", stand_in_config={"tailscale": {"port": port}},
                       run_commands=False) as sb:
        assert sb.urls()["tailscale"].startswith(f"http://127.0.0.1:{port}")
