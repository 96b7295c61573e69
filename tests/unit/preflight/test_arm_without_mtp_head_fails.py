"""newcomer-2026-12.md 2.27: check-requirements only warned that the checkpoint has no MTP head, and
`up --spec-method mtp` rented on it. An arm the run will start that cannot run on the checkpoint is
a FAIL naming the arm and the arm that would work; without an arm it stays a warning."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from tailpod.cli.main import app
from tailpod.engines.base import EngineConfig, SpecArm
from tailpod.preflight import Plan, Status

from .conftest import World
from .test_preflight_checks import one
from .test_preflight_runs import cli_env  # noqa: F401 - the fixture, used by name

MTP_K2 = EngineConfig(engine="vllm", model="", spec=SpecArm(k=2, method="mtp"))
NGRAM_K2 = EngineConfig(engine="vllm", model="", spec=SpecArm(k=2, method="ngram"))


def test_an_mtp_arm_on_a_checkpoint_without_an_mtp_head_fails(world: World) -> None:
    result = one(world, "checkpoint", Plan(arms=(MTP_K2,)), TAILPOD_MODEL="org/nomtp")
    assert result.status is Status.FAIL, result.detail
    assert "arm mtp-k2" in result.detail and "no MTP head" in result.detail
    assert "--spec-method ngram" in result.fix


def test_an_ngram_arm_or_no_arm_does_not_fail_there(world: World) -> None:
    ngram = one(world, "checkpoint", Plan(arms=(NGRAM_K2,)), TAILPOD_MODEL="org/nomtp")
    assert ngram.status is not Status.FAIL, ngram.detail
    plain = one(world, "checkpoint", TAILPOD_MODEL="org/nomtp")
    assert plain.status is Status.WARN and "no MTP head" in plain.detail


def test_an_mtp_arm_on_a_checkpoint_with_its_head_passes(world: World) -> None:
    result = one(world, "checkpoint", Plan(arms=(MTP_K2,)))  # the world's model has one
    assert result.status is Status.PASS, result.detail


@pytest.mark.usefixtures("cli_env")
def test_check_requirements_spec_flags_fail_the_mtp_arm(world: World, tmp_path: Path) -> None:
    args = ["check-requirements", "--json", "--model", "org/nomtp", "--hours", "2"]
    failed = CliRunner().invoke(app, [*args, "--spec-k", "0,2", "--spec-method", "mtp"])
    assert failed.exit_code == 1, failed.output
    assert '"arm mtp-k2 cannot run on org/nomtp' in failed.output
    ngram = CliRunner().invoke(app, [*args, "--spec-k", "0,2", "--spec-method", "ngram"])
    assert "cannot run" not in ngram.output, ngram.output
