"""The remote path of `tailpod status` and `tailpod down` (RunPod sandbox; default timings)."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tailpod.cli.main import app
from tailpod.ledger import Ledger
from tailpod.provision.base import PodSpec
from tailpod.provision.create import up_remote
from tailpod.provision.providers import get_provider
from tailpod.sandbox import Sandbox
from tests.helpers.api_timings import fast_timings
from tests.helpers.lifecycle_policy import fast_policy

from .conftest import settings_for, shell_for


def test_status_and_down_for_cloud_pods(sandbox: Sandbox, tailpod_home: Path,
                                        monkeypatch: pytest.MonkeyPatch) -> None:
    env = shell_for(sandbox, tailpod_home, monkeypatch)
    settings = settings_for(sandbox, tailpod_home, **env)
    ledger = Ledger(settings.state_dir)
    sandbox.add_fault("capacity", provider="runpod", gpu="NVIDIA H100 80GB HBM3")
    spec = PodSpec(run_tag="tp-cli-1", gpu_preference=["H100 SXM", "A40"], image="img",
                   start_command=["sleep", "30"])
    up_remote(settings, ledger, spec, policy=fast_policy(), timings=fast_timings())
    get_provider("runpod", settings).create(
        PodSpec(run_tag="tp-cli-orphan", gpu_preference=["A40"], image="img", start_command=[]))
    runner = CliRunner()

    status = runner.invoke(app, ["status", "--json"])
    assert status.exit_code == 0, status.output
    cloud = {r["run_tag"]: r for r in json.loads(status.stdout)["cloud"]["rows"]}
    assert cloud["tp-cli-1"]["fallback_from"] == "NVIDIA H100 80GB HBM3"
    assert cloud["tp-cli-1"]["gpu"] == "NVIDIA A40"
    assert cloud["tp-cli-orphan"]["flags"] == ["orphan"]

    down = runner.invoke(app, ["down", "tp-cli-1"])
    # the orphan makes the proof fail: exit 3, and the orphan is named with its kill command
    assert down.exit_code == 3, down.output
    assert "tp-cli-orphan" in down.output and "STILL BILLING" in down.output

    down_all = runner.invoke(app, ["down", "--all"])
    assert down_all.exit_code == 0, down_all.output
    assert sandbox.meter()["billing_count"] == 0
    assert (tailpod_home / "results" / "tp-cli-orphan" / "billing-proof.json").exists()
    assert sandbox.runpod_key not in down.output + down_all.output + status.output


def test_down_expired_through_the_cli_ends_only_runs_past_their_ttl(
    sandbox: Sandbox, tailpod_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    env = shell_for(sandbox, tailpod_home, monkeypatch)
    settings = settings_for(sandbox, tailpod_home, **env)
    ledger = Ledger(settings.state_dir)
    for tag in ("tp-old-1", "tp-young-1"):
        up_remote(settings, ledger, PodSpec(run_tag=tag, gpu_preference=["A40"], image="img",
                                            start_command=["sleep", "30"]),
                  policy=fast_policy(), timings=fast_timings())
    ledger.update("tp-old-1", ttl_expires_at=time.time() - 60)  # its TTL ran out a minute ago
    ledger.update("tp-young-1", ttl_expires_at=time.time() + 3600)

    down = CliRunner().invoke(app, ["down", "--expired"])
    assert down.exit_code == 0, down.output
    assert "tp-old-1" in down.output and "tp-young-1" not in down.output
    assert [r["name"] for r in sandbox.billing_now()] == ["tp-young-1"]
    assert Ledger(settings.state_dir).get("tp-old-1").status == "terminated"  # type: ignore[union-attr]
    assert Ledger(settings.state_dir).get("tp-young-1").active  # type: ignore[union-attr]
    assert (tailpod_home / "results" / "tp-old-1" / "billing-proof.json").exists()

    again = CliRunner().invoke(app, ["down", "--expired"])  # nothing left to do, still 0
    assert again.exit_code == 0, again.output
    assert [r["name"] for r in sandbox.billing_now()] == ["tp-young-1"]
    assert CliRunner().invoke(app, ["down", "tp-young-1"]).exit_code == 0
    assert sandbox.billing_now() == []
