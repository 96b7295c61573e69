"""newcomer-2026-12.md 2.9: after a failed relaunch the pod billed with no engine while `status` said
running / arm plain / health unknown, and the way out was only in `up --help`. On the sandbox cloud:
the relaunch and its restore both fail (the pod's engine dies on start), `up --relaunch` exits 3
naming the command that settles it, `status` shows "no engine" with that command, the pod still
bills (nothing was torn down behind the user's back), and the settle command clears the state."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from tailpod.agent_client.driver import ArmStart
from tailpod.cli.main import app
from tailpod.engines.base import EngineConfig
from tailpod.errors import TailpodError
from tailpod.ledger import Ledger, PodRecord
from tailpod.provision.base import PodSpec
from tailpod.provision.create import up_remote
from tailpod.sandbox import Sandbox
from tests.helpers.api_timings import fast_timings
from tests.helpers.lifecycle_policy import fast_policy

from .conftest import settings_for, shell_for

TAG = "tp-noengine-1"


def test_a_pod_left_with_no_engine_says_so_and_how_to_settle_it(
        sandbox: Sandbox, tailpod_home: Path, tiny_models: dict[str, Path],
        monkeypatch: pytest.MonkeyPatch) -> None:
    env = shell_for(sandbox, tailpod_home, monkeypatch)
    settings = settings_for(sandbox, tailpod_home, **env)
    ledger = Ledger(settings.state_dir)
    up_remote(settings, ledger, PodSpec(run_tag=TAG, gpu_preference=["NVIDIA A40"], image="img",
                                        start_command=["sleep", "60"]),
              policy=fast_policy(), timings=fast_timings())
    plain = EngineConfig(engine="vllm", model=str(tiny_models["target"]), context_length=512)
    ledger.update(TAG, engine=plain.to_json())
    engine_starts: list[str] = []

    def dies_on_start(_settings: Any, _record: PodRecord, cfg: EngineConfig, _ledger: Ledger,
                      _progress: Any, _agent: Any = None) -> ArmStart:
        engine_starts.append(cfg.spec.label())
        raise TailpodError("the pod agent's engine relaunch failed: vllm exited during start-up")

    monkeypatch.setattr("tailpod.pods.cloud.relaunch_over_ssh", dies_on_start)
    runner = CliRunner()
    switch = runner.invoke(app, ["up", "--relaunch", TAG, "--spec-k", "2", "--spec-method",
                                 "ngram"])
    assert switch.exit_code == 3, switch.output
    assert engine_starts == ["ngram-k2", "plain"]  # the arm, then the last good arm
    assert "no engine" in switch.output
    assert f"tailpod up --relaunch {TAG} --spec-k 0" in switch.output
    assert len(sandbox.billing_now()) == 1  # the pod still bills: said, not hidden

    status = runner.invoke(app, ["status", "--json", "--no-beat"])
    assert status.exit_code == 0, status.output
    (row,) = json.loads(status.stdout)["pods"]
    assert row["status"] == "running, no engine" and row["healthy"] is False
    assert row["settle"].startswith(f"tailpod up --relaunch {TAG} --spec-k 0")
    table = runner.invoke(app, ["status", "--no-beat"])
    assert f"{TAG}: no engine" in table.output, table.output
    assert f"tailpod up --relaunch {TAG} --spec-k 0" in table.output.replace("\n", " ")

    # the settle command: plain serves again, and status no longer says "no engine"
    monkeypatch.setattr("tailpod.pods.cloud.relaunch_over_ssh",
                        lambda *_a, **_k: ArmStart(startup={}, argv=["vllm"], startup_s=1.0))
    settle = runner.invoke(app, ["up", "--relaunch", TAG, "--spec-k", "0"])
    assert settle.exit_code == 0, settle.output
    (row,) = json.loads(runner.invoke(app, ["status", "--json", "--no-beat"]).stdout)["pods"]
    assert row["status"] == "running" and row["settle"] is None

    down = runner.invoke(app, ["down", TAG])
    assert down.exit_code == 0, down.output
    assert sandbox.billing_now() == []
