"""The constructed-run builder (tests/helpers/run_builder.py) as a fixture for tests/unit/results."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from tailpod.results.io import Run
from tests.helpers.run_builder import build_run


@pytest.fixture()
def make_run() -> Callable[..., Run]:
    return build_run
