"""Fixtures for the probe tests: the agent's probe verbs and synthetic servers (127.0.0.1 only)."""

from __future__ import annotations

import contextlib
import io
import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from unittest import mock

import pytest

from tailpod.agent import verbs
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


def call_agent(verb: str, payload: Any = None) -> tuple[int, dict[str, Any]]:
    """One agent verb in this process, as on the pod: JSON on stdin, the envelope (the last line
    of stdout) back with the exit code."""
    out = io.StringIO()
    stdin = io.StringIO("" if payload is None else json.dumps(payload))
    with mock.patch("sys.stdin", stdin), contextlib.redirect_stdout(out):
        code = verbs.main(verb.split())
    return code, json.loads(out.getvalue().splitlines()[-1])


def sweep_cells(arm: str, concurrency: list[int], classes: list[str], reps: int = 1,
                caches: tuple[str, ...] = ("cold",)) -> list[dict[str, Any]]:
    """The cells of a sweep in the laptop's order (rep, concurrency, class, cache)."""
    return [{"arm": arm, "concurrency": c, "rep": rep, "prompt_class": name, "cache": cache}
            for rep in range(reps) for c in concurrency for name in classes for cache in caches]


def probe_run(options: dict[str, Any], cells: list[dict[str, Any]],
              out: Path | None = None) -> list[dict[str, Any]]:
    """`probe run`, which must succeed; its rows."""
    code, envelope = call_agent("probe run", {"options": options, "cells": cells,
                                              "out": str(out) if out else None})
    assert code == 0 and envelope["ok"], envelope
    return list(envelope["result"]["rows"])
