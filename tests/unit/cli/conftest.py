"""Fixtures for the command-line tests: a sandbox cloud with a stand-in registry (the plain one,
`sandbox`, is tests/conftest.py's) and the environment that points at it."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from tailpod.sandbox import Sandbox, start_sandbox

# An image the sandbox's stand-in registry pins, for the commands that resolve `--image` to a
# digest before anything else (matrix)
REGISTRY_IMAGE, REGISTRY_DIGEST = "tailpod-test/engine:v1", "sha256:" + "ab" * 32


@pytest.fixture()
def registry_sandbox(tmp_path: Path) -> Iterator[Sandbox]:
    repo, tag = REGISTRY_IMAGE.split(":")
    sb = start_sandbox(start_delay_s=0.05, workdir=tmp_path / "sandbox",
                       stand_in_config={"registry": {"images": {repo: {tag: REGISTRY_DIGEST}}}})
    try:
        yield sb
    finally:
        sb.close()


@pytest.fixture()
def cloud_env(sandbox: Sandbox, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """The sandbox's keys and URLs in the environment, an empty tailpod home, no .env."""
    env = {**sandbox.env(), "TAILPOD_HOME": str(tmp_path / "home"),
           "TAILPOD_ENV_FILE": os.devnull, "COLUMNS": "80"}
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    return env
