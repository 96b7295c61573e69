"""Fixtures for the probe tests: the probe module and synthetic servers (127.0.0.1 only)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tailpod.sandbox.synthetic_server import SyntheticConfig, SyntheticServer


@pytest.fixture()
def synthetic() -> Iterator[Callable[..., SyntheticServer]]:
    """Start synthetic servers with a config; all are stopped at the end of the test."""
    started: list[SyntheticServer] = []

    def start(**overrides: Any) -> SyntheticServer:
        # fast defaults keep the whole area well under its time budget
        base: dict[str, Any] = {"rate": 4000.0, "ttft_s": 0.002}
        base.update(overrides)
        server = SyntheticServer(SyntheticConfig(**base)).start()
        started.append(server)
        return server

    yield start
    for server in started:
        server.stop()


@pytest.fixture()
def prompt_dir(tmp_path: Path) -> Callable[..., Path]:
    """Write a one-class prompts directory from a list of user messages."""

    def make(*contents: str, name: str = "t", **extra: Any) -> Path:
        import json

        d = tmp_path / ("prompts-" + name)
        d.mkdir(exist_ok=True)
        data = {"name": name, "prompts": [
            {"messages": [{"role": "user", "content": c}]} for c in contents
        ]}
        data.update(extra)
        (d / (name + ".json")).write_text(json.dumps(data))
        return d

    return make
