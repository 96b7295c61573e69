"""newcomer-2026-12.md 2.27 and 2.8: an arm the checkpoint cannot run is refused (exit 2, naming the
arm and the one that would work) before `up` rents and before `benchmark` relaunches the running
pod into it. The sandbox cloud with the tiny target checkpoint, which has no MTP head."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tailpod.cli.main import app
from tailpod.engines.base import EngineConfig
from tailpod.ledger import Ledger
from tailpod.provision.base import PodSpec
from tailpod.provision.create import up_remote
from tailpod.sandbox import Sandbox, start_sandbox
from tests.helpers.api_timings import fast_timings
from tests.helpers.lifecycle_policy import fast_policy
from tests.helpers.up_shell import REGISTRY_STAND_IN, up_shell

from .conftest import settings_for


@pytest.fixture()
def sandbox(tmp_path: Path) -> Iterator[Sandbox]:
    """With the registry and Tailscale stand-ins, so `up`'s preflight passes as on an account."""
    with start_sandbox(start_delay_s=0.05, workdir=tmp_path / "sandbox",
                       stand_in_config=REGISTRY_STAND_IN) as sb:
        yield sb


@pytest.fixture()
def runpod_env(sandbox: Sandbox, tailpod_home: Path, tiny_models: dict[str, Path],
               monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    env = up_shell(sandbox, tailpod_home, monkeypatch, "runpod", str(tiny_models["target"]))
    monkeypatch.delenv("VAST_API_KEY")
    return env


def test_up_with_an_mtp_arm_on_a_checkpoint_without_its_head_rents_nothing(
        sandbox: Sandbox, tailpod_home: Path, runpod_env: dict[str, str]) -> None:
    up = CliRunner().invoke(app, ["up", "--provider", "runpod", "--gpu", "NVIDIA A40",
                                  "--max-price", "1", "--context-length", "512", "--spec-k", "2",
                                  "--spec-method", "mtp"])
    assert up.exit_code == 2, up.output
    assert "arm mtp-k2" in up.output and "no MTP head" in up.output
    assert "--spec-method ngram" in up.output
    assert "Traceback" not in up.output
    assert sandbox.cloud.pods == {} and sandbox.billing_now() == []
    assert Ledger(tailpod_home).all() == []  # nothing rented, nothing even intended


def test_up_lanes_with_an_mtp_spec_lane_rents_nothing(
        sandbox: Sandbox, tailpod_home: Path, runpod_env: dict[str, str]) -> None:
    up = CliRunner().invoke(app, ["up", "--provider", "runpod", "--gpu", "NVIDIA A40",
                                  "--max-price", "1", "--context-length", "512",
                                  "--lanes", "spec:2,plain", "--admission-limit", "4",
                                  "--spec-k", "2", "--spec-method", "mtp"])
    assert up.exit_code == 2, up.output
    assert "arm mtp-k2" in up.output and "no MTP head" in up.output
    assert sandbox.cloud.pods == {} and sandbox.billing_now() == []
    assert Ledger(tailpod_home).all() == []


def test_benchmark_into_an_mtp_arm_is_refused_before_the_running_pod_is_touched(
        sandbox: Sandbox, tailpod_home: Path, runpod_env: dict[str, str]) -> None:
    settings = settings_for(sandbox, tailpod_home, **runpod_env)
    ledger = Ledger(settings.state_dir)
    plain = EngineConfig(engine="vllm", model=runpod_env["TAILPOD_MODEL"], context_length=512)
    up_remote(settings, ledger, PodSpec(run_tag="tp-arms-1", gpu_preference=["NVIDIA A40"],
                                        image="img", start_command=["sleep", "30"]),
              policy=fast_policy(), timings=fast_timings())
    ledger.update("tp-arms-1", engine=plain.to_json())
    before = ledger.get("tp-arms-1")
    assert before is not None and before.status == "running"

    bench = CliRunner().invoke(app, ["benchmark", "tp-arms-1", "--spec-k", "0,2",
                                     "--concurrency", "1", "--reps", "1", "--max-tokens", "8"])
    assert bench.exit_code == 2, bench.output
    assert "arm mtp-k2" in bench.output and "--spec-method ngram" in bench.output
    after = ledger.get("tp-arms-1")
    assert after is not None and after.events == before.events  # no relaunch, no SSH step
    assert not (tailpod_home / "results" / "tp-arms-1").exists() or not any(
        (tailpod_home / "results").rglob("rows.jsonl"))  # nothing measured
    assert len(sandbox.billing_now()) == 1  # the running pod is left as it was, still serving
