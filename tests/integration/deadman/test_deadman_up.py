"""The dead-man switch as `tailpod up` arms it: a real pod (sandbox cloud, real sshd), the real CLI.

`up` rents, joins the tailnet, arms the switch over SSH, then fails to start the engine (the pod's
Python has no vLLM) and keeps the pod (`--keep-on-failure`), so no engine is needed here. After
that tailpod goes quiet: `status` must beat the switch, and once nothing beats it the pod must
terminate itself, with the sandbox meter at zero.
"""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tailpod.cli.main import app
from tailpod.ledger import Ledger
from tailpod.pods import deadman_control
from tailpod.sandbox import start_sandbox
from tailpod.sandbox.sshd import sshd_available
from tests.helpers.up_shell import REGISTRY_STAND_IN, up_shell

from .conftest import wait_for

pytestmark = pytest.mark.skipif(not sshd_available(), reason="OpenSSH sshd is not installed")

# Long enough for `up` to return and `status` to beat once on a loaded 2-core machine; the
# 60 s floor of TAILPOD_HEARTBEAT_TIMEOUT (SSH latency on real pods) is lifted for this test.
TIMEOUT_S = 20.0


def test_up_arms_a_switch_that_status_feeds_and_silence_fires(
    tmp_path: Path, tailpod_home: Path, tiny_models: dict[str, Path],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(deadman_control, "heartbeat_timeout_for", lambda _settings: TIMEOUT_S)
    sandbox = start_sandbox(sshd=True, workdir=tmp_path / "sandbox",
                            stand_in_config=REGISTRY_STAND_IN)
    try:
        up_shell(sandbox, tailpod_home, monkeypatch, "runpod", str(tiny_models["target"]),
                 TAILPOD_GPUS="NVIDIA A40", TAILPOD_MAX_PRICE="1.0",
                 # a Python without vLLM: the engine cannot start, the pod is kept
                 TAILPOD_ENGINE_PYTHON=shutil.which("python3") or "/usr/bin/python3")
        monkeypatch.delenv("VAST_API_KEY")
        runner = CliRunner()

        up = runner.invoke(app, ["up", "--keep-on-failure", "--context-length", "256"])
        assert up.exit_code != 0 and "up but not serving" in up.output, up.output
        (record,) = Ledger(tailpod_home).active()
        assert len(sandbox.billing_now()) == 1
        (state_file,) = (tmp_path / "sandbox").rglob("heartbeat.deadman.json")
        heartbeat = state_file.with_name("heartbeat")
        armed = json.loads(state_file.read_text())
        assert armed["state"] == "armed" and armed["heartbeat_timeout_s"] == TIMEOUT_S

        before = heartbeat.stat().st_mtime_ns
        status = runner.invoke(app, ["status", "--json"])
        assert status.exit_code == 0, status.output
        assert heartbeat.stat().st_mtime_ns > before  # status beat the switch over SSH
        last_beat = heartbeat.stat().st_mtime
        (row,) = json.loads(status.stdout)["pods"]
        assert row["deadman"]["state"] == "armed"

        # Silence: nobody beats, the pod ends itself and the meter stops.
        wait_for(lambda: not sandbox.billing_now(), TIMEOUT_S + 30, interval=0.2)
        assert time.time() - last_beat >= TIMEOUT_S  # not before the timeout
        # The switch dies with its pod, so its last word may be "firing" rather than "terminated".
        fired = json.loads(state_file.read_text())
        assert fired["state"] in ("firing", "terminated"), fired
        assert "no heartbeat from tailpod within 20 s" in fired["reason"], fired
        assert sandbox.meter()["billing_count"] == 0
        assert [p["status"] for p in sandbox.cloud.pods_public()] == ["terminated"]

        # tailpod learns it afterwards: down proves nothing bills and settles the ledger.
        down = runner.invoke(app, ["down", record.run_tag])
        assert down.exit_code == 0, down.output
        assert not Ledger(tailpod_home).get(record.run_tag).active  # type: ignore[union-attr]
    finally:
        sandbox.close()
