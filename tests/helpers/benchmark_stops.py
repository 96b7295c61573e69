"""`benchmark` run only as far as the pod, for the tests of what it checks before anything waits:
the ledger answers with a given pod record, and the SSH wait and the sweep are recorded and
stopped there, so a test reads how far a command got (test_open_loop_bounds_checked_first,
test_soak_minutes_checked_first)."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pytest

from tailpod.cli import benchmark as benchmark_cli
from tailpod.errors import ConfigError
from tailpod.ledger import PodRecord


class Reached(ConfigError):
    """Raised where a stopped step is reached (a ConfigError, so the command exits 2 in one line)."""


def stop_at_the_pod(monkeypatch: pytest.MonkeyPatch, home: Path,
                    pod: Callable[[], PodRecord]) -> list[str]:
    """TAILPOD_HOME set to `home` with no .env file; `benchmark`'s ledger resolves any tag to
    `pod()`; its SSH wait and its sweep raise Reached. Returns what was reached, in order:
    "ledger", "ssh wait", "sweep"."""
    monkeypatch.setenv("TAILPOD_HOME", str(home))
    monkeypatch.setenv("TAILPOD_ENV_FILE", os.devnull)
    seen: list[str] = []

    class Ledger:
        def resolve(self, tag: str) -> PodRecord:
            seen.append("ledger")
            return pod()

    def stop(what: str) -> Callable[..., None]:
        def reached(*_a: object, **_k: object) -> None:
            seen.append(what)
            raise Reached(f"{what} reached")
        return reached

    monkeypatch.setattr(benchmark_cli, "ledger_for", lambda settings: Ledger())
    monkeypatch.setattr("tailpod.measure.hosts.sweep_host", stop("ssh wait"))
    monkeypatch.setattr("tailpod.measure.sweep.run_sweep", stop("sweep"))
    return seen
