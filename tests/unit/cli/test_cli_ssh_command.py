"""`tailpod ssh TAG CMD` runs CMD on the pod as `ssh host CMD` would (newcomer 4.4: the command was
refused, only a shell was offered)."""

from __future__ import annotations

import shlex
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tailpod.cli.main import app
from tailpod.config import load_settings
from tailpod.ledger import Ledger, PodRecord


@pytest.fixture(autouse=True)
def _a_key(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    key = tmp_path / "id_ed25519"
    key.write_text("not read: --print only builds the argv\n")
    monkeypatch.setenv("TAILPOD_SSH_KEY", str(key))


def _pod_with_an_ssh_endpoint(tag: str) -> None:
    settings = load_settings()
    Ledger(settings.state_dir).put(
        PodRecord(
            run_tag=tag,
            provider="runpod",
            status="running",
            pod_id="pod-1",
            ssh={"host": "203.0.113.7", "port": 40022, "user": "root"},
        )
    )


def test_words_after_the_tag_are_the_remote_command_options_included(tailpod_home: Path) -> None:
    _pod_with_an_ssh_endpoint("tp-ssh-cmd")
    result = CliRunner().invoke(app, ["ssh", "--print", "tp-ssh-cmd", "ls", "-la", "/workspace"])
    assert result.exit_code == 0, result.output
    argv = shlex.split(result.output.strip().splitlines()[-1])
    # ssh's options end at `--`; the destination, then the command as one string for the remote shell.
    assert argv[-3:] == ["--", "root@203.0.113.7", "ls -la /workspace"]
    assert argv[argv.index("-p") + 1] == "40022"


def test_without_a_command_it_is_the_interactive_shell_as_before(tailpod_home: Path) -> None:
    _pod_with_an_ssh_endpoint("tp-ssh-shell")
    result = CliRunner().invoke(app, ["ssh", "--print", "tp-ssh-shell"])
    assert result.exit_code == 0, result.output
    argv = shlex.split(result.output.strip().splitlines()[-1])
    assert argv[-1] == "root@203.0.113.7" and "--" not in argv


def test_ssh_s_own_options_after_the_tag_keep_their_meaning(tailpod_home: Path) -> None:
    """`tailpod ssh TAG --print` (and `--config`) after the tag are ssh's own, not a command: with
    them read as the command, `--config` exec'd `ssh … --config` (seen killing a test process)."""
    _pod_with_an_ssh_endpoint("tp-ssh-after")
    result = CliRunner().invoke(app, ["ssh", "tp-ssh-after", "--print"])
    assert result.exit_code == 0, result.output
    argv = shlex.split(result.output.strip().splitlines()[-1])
    assert argv[-1] == "root@203.0.113.7" and "--" not in argv
