"""A rate-limit storm during `up`'s preflight is transient (issue 14 §4): it says so, says when to
retry, exits 75 (docs/exit-codes.md) and rents nothing."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tailpod.cli.main import app

from .conftest import World
from .test_preflight_checks import SECRETS, write_env


@pytest.fixture()
def up_env(world: World, env_file: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    write_env(env_file, world)
    for name, value in world.env().items():
        if name not in SECRETS:
            monkeypatch.setenv(name, value)
    monkeypatch.setenv("TAILPOD_ENV_FILE", str(env_file))
    try:
        yield
    finally:
        world.sandbox.clear_faults()  # the world is shared by the whole session


def test_429_storm_in_preflight_is_transient_with_a_retry_time(world: World, up_env: None) -> None:
    storm = world.sandbox.add_fault("rate_limit", provider="runpod", op="any", retry_after=1)
    result = CliRunner().invoke(app, ["up", "--no-tailnet"])
    assert result.exit_code == 75, result.output  # EX_TEMPFAIL, docs/exit-codes.md
    out = " ".join(result.output.split())
    assert "transient" in out and "HTTP 429" in out and "nothing was rented" in out
    assert "again in about 60 s" in out
    assert "check-requirements for the fixes" not in out
    assert storm.fired >= 1
    world.nothing_created()


def test_a_real_failure_beside_the_storm_is_still_a_usage_error(world: World,
                                                               up_env: None) -> None:
    world.sandbox.add_fault("rate_limit", provider="runpod", op="any", retry_after=1)
    result = CliRunner().invoke(app, ["up", "--no-tailnet", "--image", "vllm/vllm-openai:nope"])
    assert result.exit_code == 2, result.output  # the image must be fixed first; retrying won't
    world.nothing_created()
