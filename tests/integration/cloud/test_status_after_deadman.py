"""`status` after a pod ended outside tailpod (issue 26 §6): a pod the dead-man switch ended is
called gone, with the likely cause and how to record it, not "running" beside an unexplained
"ghost"; the flags shown are explained under the table. The pod is ended in the emulator itself
(as the switch's self-terminate does), so the provider truth is the emulator's, not tailpod's."""

from __future__ import annotations

import json
import time
from dataclasses import replace
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tailpod.cli.main import app
from tailpod.ledger import Ledger
from tailpod.provision.base import PodSpec
from tailpod.provision.create import up_remote
from tailpod.sandbox import Sandbox
from tests.helpers.api_timings import fast_timings
from tests.helpers.lifecycle_policy import fast_policy

from .conftest import settings_for, shell_for


def _pod_the_deadman_ends(sandbox: Sandbox, home: Path, monkeypatch: pytest.MonkeyPatch,
                          tag: str, deadman: dict[str, object] | None) -> Ledger:
    env = shell_for(sandbox, home, monkeypatch)
    ledger = Ledger(settings_for(sandbox, home, **env).state_dir)
    up_remote(settings_for(sandbox, home, **env), ledger,
              PodSpec(run_tag=tag, gpu_preference=["A40"], image="img",
                      start_command=["sleep", "30"]),
              policy=fast_policy(), timings=fast_timings())
    record = ledger.get(tag)
    assert record is not None and record.pod_id
    ledger.update(tag, status="running",
                  extra=replace(record.extra, deadman=deadman or None))
    sandbox.cloud.terminate(sandbox.cloud.pods[f"runpod:{record.pod_id}"])
    assert sandbox.billing_now() == []
    return ledger


def test_status_calls_a_pod_the_deadman_ended_gone(
        sandbox: Sandbox, tailpod_home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _pod_the_deadman_ends(sandbox, tailpod_home, monkeypatch, "tp-dm-1", {
        "ttl_at": time.time() + 3600, "pid": 42, "heartbeat_timeout_s": 600.0})
    res = CliRunner().invoke(app, ["status", "--no-beat"], env={"COLUMNS": "250"})
    assert res.exit_code == 0, res.output
    flat = " ".join(res.output.split())
    assert "gone (ledger: running)" in flat
    assert "dead-man switch (no heartbeat for 10 min)" in flat
    assert "record it with: tailpod down tp-dm-1" in flat
    assert "ghost: the ledger holds the pod as live but its provider no longer has it" in flat
    assert "orphan:" not in flat  # only the flags shown are explained
    js = CliRunner().invoke(app, ["status", "--no-beat", "--json"])
    assert js.exit_code == 0, js.output
    doc = json.loads(js.stdout)
    assert doc["pods"][0]["status"] == "gone (ledger: running)"
    cloud_row = doc["cloud"]["rows"][0]
    assert cloud_row["provider_state"] == "gone" and "ghost" in cloud_row["flags"]
    assert doc["cloud"]["rate_per_hr_now"] == 0


def test_status_names_the_ttl_when_the_switch_ended_the_pod_at_it(
        sandbox: Sandbox, tailpod_home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _pod_the_deadman_ends(sandbox, tailpod_home, monkeypatch, "tp-dm-2", {
        "ttl_at": time.time() - 5, "pid": 42, "heartbeat_timeout_s": 600.0})
    res = CliRunner().invoke(app, ["status", "--no-beat"], env={"COLUMNS": "250"})
    assert res.exit_code == 0, res.output
    assert "dead-man switch at its TTL" in " ".join(res.output.split())


def test_a_pod_without_a_switch_is_not_blamed_on_it(
        sandbox: Sandbox, tailpod_home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _pod_the_deadman_ends(sandbox, tailpod_home, monkeypatch, "tp-dm-3", None)
    res = CliRunner().invoke(app, ["status", "--no-beat"], env={"COLUMNS": "250"})
    assert res.exit_code == 0, res.output
    flat = " ".join(res.output.split())
    assert "dead-man" not in flat.replace("dead-man switch, its TTL", "")
    assert "ended outside tailpod (deleted by hand or by the provider)" in flat
