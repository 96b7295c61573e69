"""The MTP ignore-list workaround on a sandbox pod: a Hub-id checkpoint carrying the trap, served
by the Hub stand-in, is patched on the pod (an overlay of the downloaded snapshot: weights linked,
config.json patched), the real CPU engine starts from the overlay, and the run records the patch.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from tailpod.cli.main import app
from tailpod.sandbox.sshd import sshd_available
from tests.e2e.sandbox_world import vast_world
from tests.e2e.trap_checkpoint import build_trap_checkpoint

pytestmark = [
    pytest.mark.engine,
    pytest.mark.skipif(not sshd_available(), reason="OpenSSH sshd is not installed"),
]
runner = CliRunner()
TRAP_ID = "tailpod-test/mimo-int8-trap"


@pytest.fixture(scope="module")
def cloud(engine_env: dict[str, str]) -> Iterator[dict[str, Any]]:
    home = Path(engine_env["TAILPOD_HOME"])
    trap = build_trap_checkpoint(home / "hub" / TRAP_ID)
    with vast_world(home, TRAP_ID, hub_repos={TRAP_ID: trap}) as (sandbox, _env):
        yield {"sandbox": sandbox, "home": home, "trap": trap}


def test_a_trapped_hub_checkpoint_is_served_from_a_patched_overlay(
    cloud: dict[str, Any], leftover_engines: Any
) -> None:
    up = runner.invoke(app, ["up", "--context-length", "1024", "--enforce-eager", "--json"])
    assert up.exit_code == 0, up.output
    tag = json.loads(up.stdout)["run_tag"]
    try:
        bench = runner.invoke(app, ["benchmark", "--spec-k", "0", "--concurrency", "1", "--reps",
                                    "1", "--max-tokens", "8", "--run-id", "trap"])  # fmt: skip
        assert bench.exit_code == 0, bench.output
        run = json.loads((cloud["home"] / "results" / "trap" / "run.json").read_text())
        (arm,) = run["arms"]
        served = arm["checkpoints"]["model"]
        # The run names the Hub checkpoint and its revision, and what was patched and why.
        assert served["source"] == "overlay" and served["ref"] == TRAP_ID
        assert served["revision"] and served["revision"] == served["patch"]["revision"]
        patch = served["patch"]
        assert patch["patched_files"] == ["config.json"]
        assert "re:^model\\.mtp_layers\\.0\\." in patch["added"]
        assert "model.mtp_layers.0.self_attn.q_proj" in patch["modules"]
        assert "ignore list" in patch["reason"]
        # The engine was pointed at the overlay the pod built from the downloaded snapshot.
        overlay = Path(served["served_from"])
        assert str(overlay) in arm["argv"] and overlay.name == "plain"
        assert os.path.islink(overlay / "model.safetensors")  # linked, never copied
        assert not os.path.islink(overlay / "config.json")  # written, not linked to the source
        assert Path(os.path.realpath(overlay / "tokenizer.json")).is_file()
        config = json.loads((overlay / "config.json").read_text())
        assert config["quantization_config"]["ignore"] == ["lm_head", *patch["added"]]
        original = json.loads((cloud["trap"] / "config.json").read_text())
        assert original["quantization_config"]["ignore"] == ["lm_head"]  # the source untouched
        assert arm["startup"]["facts"]["ready"]
    finally:
        down = runner.invoke(app, ["down", tag, "--json"])
    assert down.exit_code == 0, down.output
    assert cloud["sandbox"].billing_now() == []
    assert leftover_engines(str(cloud["home"])) == set()
