"""For tests/unit/results: the constructed-run builder (tests/helpers/run_builder.py) as a fixture,
and the results commands on an app of their own."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
import typer

from tailpod.cli import results as results_cli
from tailpod.results.io import Run
from tests.helpers.run_builder import build_run


@pytest.fixture()
def make_run() -> Callable[..., Run]:
    return build_run


@pytest.fixture()
def app(tailpod_home: Path) -> typer.Typer:
    """`report`, `compare` and the other results commands, registered on a bare app (in a home
    of the test's own)."""
    app = typer.Typer()

    @app.callback()
    def _root() -> None:
        """test root"""

    results_cli.register(app)
    return app
