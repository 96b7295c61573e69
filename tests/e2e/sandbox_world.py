"""The sandbox world the vast.ai CLI end-to-end tests rent from (test_cloud_cli, test_cloud_trap)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tailpod.cli.demo_world import demo_ssh_key
from tailpod.sandbox.podhost import free_port
from tailpod.sandbox.server import Sandbox, start_sandbox
from tailpod.sandbox.tailscale import DEFAULT_API_TOKEN, DEFAULT_AUTH_KEY

SANDBOX_IMAGE = "vllm/vllm-openai:v0.11.0"


@contextlib.contextmanager
def vast_world(home: Path, model: str, hub_repos: dict[str, Path] | None = None,
               image: str = SANDBOX_IMAGE) -> Iterator[tuple[Sandbox, dict[str, str]]]:
    """A sandbox cloud with real sshd pods, the registry stand-in holding SANDBOX_IMAGE and the
    Hub stand-in holding `hub_repos` (`image`: another vllm/vllm-openai tag, whose release the
    launch is spelled for), and this process's environment set as a user's .env would
    be for `tailpod up` on vast.ai (RTX 4090, $1/h cap) serving `model`; closed on exit."""
    stand_ins: dict[str, Any] = {
        "registry": {"images": {"vllm/vllm-openai": {image.rsplit(":", 1)[1]: "sha256:" + "ab" * 32}}},
    }
    if hub_repos:
        stand_ins["hub"] = {"repos": hub_repos}
    sandbox = start_sandbox(sshd=True, workdir=home / "sandbox", stand_in_config=stand_ins)
    env = {
        **sandbox.env(),
        "TAILSCALE_API_KEY": DEFAULT_API_TOKEN,
        "TAILSCALE_AUTH_KEY": DEFAULT_AUTH_KEY,
        "TAILPOD_SSH_KEY": str(demo_ssh_key(home)),
        "TAILPOD_PROVIDER": "vastai",
        "TAILPOD_MODEL": model,
        "TAILPOD_IMAGE": image,
        "TAILPOD_GPUS": "RTX 4090",
        "TAILPOD_MAX_PRICE": "1.0",
        "TAILPOD_PORT": str(free_port()),
    }
    with pytest.MonkeyPatch.context() as mp:
        for key, value in env.items():
            mp.setenv(key, value)
        try:
            yield sandbox, env
        finally:
            sandbox.close()
