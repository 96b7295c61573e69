"""`volume` refuses a provider with no volumes by its capability, before any key, host or write."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from tailpod.cli.main import app


@pytest.mark.parametrize("provider", ["local", "ssh"])
def test_a_provider_without_volumes_is_refused_before_anything(provider: str,
                                                               tailpod_home: Path) -> None:
    result = CliRunner().invoke(app, ["volume", "create", "weights", "--provider", provider,
                                      "--size-gb", "50"])
    assert result.exit_code == 2
    assert f"the {provider} provider has no volumes" in " ".join(result.output.split())
    assert not tailpod_home.exists() or not any(tailpod_home.rglob("*.json"))
