"""`up` refuses out-of-range flags and settings before preflight and before anything is rented
(issue 14 §3): exit 2, the flag named, preflight never reached, the sandbox meter at zero."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from tailpod.cli.demo_world import demo_ssh_key
from tailpod.cli.main import app
from tailpod.errors import ConfigError
from tailpod.ledger import Ledger
from tailpod.pods import cloud as cloud_up
from tailpod.sandbox import Sandbox

BASE = ["up", "--provider", "runpod", "--gpu", "NVIDIA A40", "--model", "org/model",
        "--image", "vllm/vllm-openai:v0.11.0", "--no-tailnet"]


@pytest.mark.parametrize(("flags", "named"), [
    (["--port", "0"], "--port"),
    (["--port", "99999"], "--port"),
    (["--max-price", "inf"], "--max-price"),
    (["--max-price", "nan"], "--max-price"),
    (["--max-price", "-1"], "--max-price"),
    (["--ttl-hours", "-1"], "--ttl-hours"),
    (["--ttl-hours", "100000"], "--ttl-hours"),
    (["--gpu-count", "0"], "--gpu-count"),
    (["--context-length", "0"], "--context-length"),
    (["--max-running-requests", "-4"], "--max-running-requests"),
    (["--engine", "nonsense"], "nonsense"),
    (["--engine", "llamacpp"], "--provider local --engine llamacpp"),
])
def test_bad_flag_is_refused_before_preflight_and_rental(
        sandbox: Sandbox, tailpod_home: Path, monkeypatch: pytest.MonkeyPatch,
        flags: list[str], named: str) -> None:
    for key, value in {**sandbox.env(), "TAILPOD_SSH_KEY": str(demo_ssh_key(tailpod_home))}.items():
        monkeypatch.setenv(key, value)
    reached: list[str] = []

    def preflight(*_a: object, **_k: object) -> None:
        reached.append("preflight")
        raise ConfigError("preflight reached: the bad value got past the checks")

    monkeypatch.setattr(cloud_up, "run_preflight_or_refuse", preflight)
    result = CliRunner().invoke(app, BASE + flags)
    assert result.exit_code == 2, result.output
    assert named in result.output and "preflight reached" not in result.output
    assert reached == []
    assert Ledger(tailpod_home).all() == []
    assert sandbox.meter()["billing_count"] == 0 and sandbox.cloud.pods_public() == []


def test_bad_setting_from_the_environment_is_named_too(
        sandbox: Sandbox, tailpod_home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for key, value in sandbox.env().items():
        monkeypatch.setenv(key, value)
    monkeypatch.setenv("TAILPOD_TTL_HOURS", "-2")
    monkeypatch.setenv("TAILPOD_PORT", "70000")
    result = CliRunner().invoke(app, BASE)
    assert result.exit_code == 2, result.output
    out = " ".join(result.output.split())
    assert "TAILPOD_TTL_HOURS" in out and "TAILPOD_PORT" in out and "nothing was rented" in out
