"""Ledger first: `tailpod up` killed while the provider holds its create request open.

The sandbox's `hold_create` fault keeps the create request unanswered until the test releases it.
At that moment the run's intent must already be in the ledger; `up` is then killed (SIGKILL, no
chance to clean up), the provider goes on and makes the pod, and `down --all` must find it by
the run tag and prove it stopped billing.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tailpod.cli.demo_world import demo_ssh_key
from tailpod.cli.main import app
from tailpod.ledger import Ledger
from tailpod.sandbox import start_sandbox
from tailpod.sandbox.tailscale import DEFAULT_API_TOKEN, DEFAULT_AUTH_KEY

IMAGE = "vllm/vllm-openai:v0.11.0"
SANDBOX_NAME = {"runpod": "runpod", "vastai": "vast"}
GPU = {"runpod": "NVIDIA A40", "vastai": "RTX 4090"}


@pytest.mark.parametrize("provider", ["runpod", "vastai"])
def test_up_killed_while_the_create_is_held_leaves_the_intent_and_down_all_settles_it(
    provider: str, tmp_path: Path, tailpod_home: Path, tiny_models: dict[str, Path],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    sandbox = start_sandbox(
        start_delay_s=0.05, workdir=tmp_path / "sandbox",
        stand_in_config={"registry": {"images": {"vllm/vllm-openai": {"v0.11.0": "sha256:"
                                                                      + "ab" * 32}}}},
    )
    env = {
        **sandbox.env(),
        "TAILPOD_HOME": str(tailpod_home),
        "TAILPOD_RESULTS_DIR": str(tailpod_home / "results"),
        "TAILPOD_ENV_FILE": os.devnull,
        "TAILSCALE_API_KEY": DEFAULT_API_TOKEN,
        "TAILSCALE_AUTH_KEY": DEFAULT_AUTH_KEY,
        "TAILPOD_SSH_KEY": str(demo_ssh_key(tailpod_home)),
        "TAILPOD_PROVIDER": provider,
        "TAILPOD_MODEL": str(tiny_models["target"]),
        "TAILPOD_IMAGE": IMAGE,
        "TAILPOD_GPUS": GPU[provider],
        "TAILPOD_MAX_PRICE": "1.0",
    }
    hold = sandbox.add_fault("hold_create", provider=SANDBOX_NAME[provider], times=1,
                             seconds=120)
    up = subprocess.Popen([str(Path(sys.executable).parent / "tailpod"), "up", "--json"],
                          env={**os.environ, **env}, stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, start_new_session=True)
    try:
        if not sandbox.cloud.faults.wait_held(hold, timeout=120):
            up.kill()
            pytest.fail("the create never reached the provider:\n"
                        + up.communicate()[0].decode(errors="replace"))
        # The provider has the request and nothing exists yet: the ledger already names the run.
        assert hold.fired == 1 and sandbox.cloud.pods == {}
        (intent,) = Ledger(tailpod_home).active()
        assert intent.provider == provider and intent.pod_id is None
        assert any(e["event"] == "intent" for e in intent.events), intent.events

        os.killpg(up.pid, signal.SIGKILL)
        up.wait(timeout=30)
        sandbox.cloud.faults.release(hold)  # the provider finishes the create nobody waits for
        deadline = time.monotonic() + 30
        while not sandbox.billing_now() and time.monotonic() < deadline:
            time.sleep(0.02)
        pods = [p for p in sandbox.cloud.pods_public() if p["name"] == intent.run_tag]
        assert len(pods) == 1 and len(sandbox.billing_now()) == 1

        for key, value in env.items():
            monkeypatch.setenv(key, value)
        down = CliRunner().invoke(app, ["down", "--all", "--json"])
        assert down.exit_code == 0, down.output
        assert sandbox.billing_now() == []
        proof = json.loads((tailpod_home / "results" / intent.run_tag
                            / "billing-proof.json").read_text())
        assert proof["proven"] is True
        assert not Ledger(tailpod_home).get(intent.run_tag).active  # type: ignore[union-attr]
    finally:
        if up.poll() is None:
            os.killpg(up.pid, signal.SIGKILL)
            up.wait()
        sandbox.close()
