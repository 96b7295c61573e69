"""The real CPU engine for tests/kl/test_kl_engine.py: one at a time, in its own TAILPOD_HOME."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="module")
def kl_engine_env(engine_env: dict[str, str]) -> dict[str, str]:
    """The shared engine environment (tests/conftest.py), in this module's own TAILPOD_HOME."""
    return engine_env
