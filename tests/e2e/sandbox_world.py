"""The sandbox world the vast.ai CLI end-to-end tests rent from (test_cloud_cli, test_cloud_trap,
test_cloud_open_loop, test_cloud_sessions, the issue-39 run), and the `up` ... `down` round that
their bodies run inside (rented_pod)."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from tailpod.cli.demo_world import demo_ssh_key
from tailpod.cli.main import app
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


@contextlib.contextmanager
def tiny_vast_cloud(engine_env: dict[str, str], tiny_models: dict[str, Path],
                    image: str = SANDBOX_IMAGE) -> Iterator[dict[str, Any]]:
    """vast_world serving the tiny target checkpoint from engine_env's TAILPOD_HOME, as a module's
    `cloud` fixture yields it: {"sandbox", "home", "env"}."""
    home = Path(engine_env["TAILPOD_HOME"])
    with vast_world(home, str(tiny_models["target"]), image=image) as (sandbox, env):
        yield {"sandbox": sandbox, "home": home, "env": env}


@contextlib.contextmanager
def rented_pod(cloud: dict[str, Any], leftover_engines: Callable[[str], set[int]],
               context_length: int) -> Iterator[str]:
    """`up` on `cloud` (a tiny_vast_cloud) in the CPU engine's eager mode, yielding the run tag;
    then `down` whatever the body did, which must prove that billing stopped and leave neither a
    billing sandbox resource nor an engine process serving from the model's folder."""
    runner = CliRunner()
    up = runner.invoke(app, ["up", "--context-length", str(context_length), "--enforce-eager",
                             "--json"])
    assert up.exit_code == 0, up.output
    tag = json.loads(up.stdout)["run_tag"]
    try:
        yield tag
    finally:
        down = runner.invoke(app, ["down", tag, "--json"])
    assert down.exit_code == 0, down.output
    assert json.loads(down.stdout)["proven"] is True and cloud["sandbox"].billing_now() == []
    assert leftover_engines(str(Path(cloud["env"]["TAILPOD_MODEL"]).parent)) == set()
