"""`demo --lanes` with --local or --matrix is refused before anything starts (exit 2)."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from tailpod.cli.main import app


@pytest.mark.parametrize("other", ["--local", "--matrix"])
def test_demo_lanes_refuses_local_and_matrix(tailpod_home: Path, other: str) -> None:
    res = CliRunner().invoke(app, ["demo", "--lanes", other])
    assert res.exit_code == 2, res.output
    assert "--lanes runs on the sandbox cloud" in res.output
    assert not (tailpod_home / "models").exists()  # not even the checkpoint was built
