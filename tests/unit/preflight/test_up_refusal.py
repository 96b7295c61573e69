"""`up` refused by preflight prints the table `check-requirements` prints, then one error line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tailpod.cli.main import app
from tailpod.ledger import Ledger

DEAD = "http://127.0.0.1:9"  # the discard port: every call is refused at once


def test_up_refused_by_preflight_prints_the_requirements_table(
    tailpod_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in ("TAILPOD_RUNPOD_URL", "TAILPOD_TAILSCALE_URL", "TAILPOD_REGISTRY_URL",
                 "TAILPOD_REGISTRY_AUTH_URL", "TAILPOD_HF_URL"):
        monkeypatch.setenv(name, DEAD)
    monkeypatch.setenv("RUNPOD_API_KEY", "rp_refusal_test_key_0001")
    for name in ("TAILSCALE_AUTH_KEY", "TAILSCALE_API_KEY", "TAILPOD_SSH_KEY"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HOME", str(tailpod_home))  # no ~/.ssh key to fall back on
    result = CliRunner().invoke(app, [
        "up", "--provider", "runpod", "--model", str(tailpod_home / "no-such-model"),
        "--image", "vllm/vllm-openai:v0.11.0", "--gpu", "NVIDIA A40", "--max-price", "1", "--json",
    ])  # fmt: skip
    assert result.exit_code == 2, result.output
    # no record to print: stdout holds the JSON error object only; the table goes to stderr
    assert json.loads(result.stdout)["error"]["kind"] == "PreflightRefused"
    err = " ".join(result.stderr.split())
    assert "check-requirements (runpod)" in err and "how to fix" in err
    assert "Tailscale token and auth key" in err and "SSH key" in err
    assert "not ready:" in err and "nothing was created" in err
    assert "preflight failed, nothing was rented" in err and err.count("error:") == 1
    assert "rp_refusal_test_key_0001" not in result.output
    assert Ledger(tailpod_home).all() == []
