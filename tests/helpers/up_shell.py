"""What a user's .env gives `tailpod up` on the sandbox clouds (tailpod/sandbox), for the tests
that run `up` itself: the tailnet stand-in's keys, the demo SSH key, one provider, the model and
the image the registry stand-in pins (pass REGISTRY_STAND_IN to `start_sandbox`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tailpod.cli.demo_world import demo_ssh_key
from tailpod.sandbox import Sandbox
from tailpod.sandbox.tailscale import DEFAULT_API_TOKEN, DEFAULT_AUTH_KEY

UP_IMAGE = "vllm/vllm-openai:v0.11.0"
REGISTRY_STAND_IN: dict[str, dict[str, Any]] = {
    "registry": {"images": {"vllm/vllm-openai": {"v0.11.0": "sha256:" + "ab" * 32}}}}


def up_shell(sb: Sandbox, home: Path, monkeypatch: pytest.MonkeyPatch, provider: str,
             model: str, **extra: str) -> dict[str, str]:
    """That environment, results under `home`, `extra` over it: set in this process (for
    CliRunner) and returned."""
    env = {
        **sb.env(),
        "TAILPOD_RESULTS_DIR": str(home / "results"),
        "TAILSCALE_API_KEY": DEFAULT_API_TOKEN,
        "TAILSCALE_AUTH_KEY": DEFAULT_AUTH_KEY,
        "TAILPOD_SSH_KEY": str(demo_ssh_key(home)),
        "TAILPOD_PROVIDER": provider,
        "TAILPOD_MODEL": model,
        "TAILPOD_IMAGE": UP_IMAGE,
        **extra,
    }
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    return env
