"""No raw traceback on the terminal (issue 38: the adversary counted 16: a full results disk during
`benchmark`, `up` with 12 KB free, paramiko's text when no SSH banner comes, `up` racing
`down --all`). An OSError is one line naming the file; anything else tailpod did not expect is
one line, with the traceback kept, redacted, in the home's crashes/ folder."""

from __future__ import annotations

import errno
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tailpod.cli.main import app
from tailpod.secrets import Secret


def test_a_full_disk_is_one_line_naming_the_file(
        tailpod_home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def full(*_a: object, **_k: object) -> None:
        raise OSError(errno.ENOSPC, "No space left on device", "/results/run-1/rows.jsonl")

    monkeypatch.setattr("tailpod.cli.common.load_settings", full)
    result = CliRunner().invoke(app, ["status", "--no-beat"])
    assert result.exit_code == 1
    assert "Traceback" not in result.output
    lines = result.output.strip().splitlines()
    assert lines[0] == "error: No space left on device: /results/run-1/rows.jsonl"
    assert lines[1].startswith("  hint: free space there")


def test_an_unexpected_error_is_one_line_and_its_traceback_is_kept_redacted(
        tailpod_home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    planted = Secret("rpa_pod_ab-cd_ef0123456789")

    def broken(*_a: object, **_k: object) -> None:
        raise RuntimeError(f"Error reading SSH protocol banner; key {planted.reveal()}")

    monkeypatch.setattr("tailpod.cli.common.load_settings", broken)
    result = CliRunner().invoke(app, ["status", "--no-beat"])
    assert result.exit_code == 1
    assert "Traceback" not in result.output
    assert planted.reveal() not in result.output
    said = " ".join(result.output.split())  # the console folds long lines
    assert said.startswith("error: unexpected RuntimeError: Error reading SSH protocol banner")
    (log,) = (tailpod_home / "crashes").iterdir()
    assert said.endswith(f"hint: the traceback is in {log}; `tailpod status` shows whatever "
                         "still bills")
    text = log.read_text()
    assert "Traceback (most recent call last)" in text and "RuntimeError" in text
    assert planted.reveal() not in text
    assert log.stat().st_mode & 0o777 == 0o600
