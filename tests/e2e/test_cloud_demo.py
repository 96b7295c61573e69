"""`tailpod demo`: the whole cloud path on the sandbox with real SSH and the real engine."""

from __future__ import annotations

import json
import socket
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from tailpod.cli.main import app
from tailpod.sandbox.cloud import DEFAULT_RUNPOD_KEY
from tailpod.sandbox.podhost import free_port
from tailpod.sandbox.sshd import sshd_available
from tailpod.sandbox.tailscale import DEFAULT_API_TOKEN, DEFAULT_AUTH_KEY

pytestmark = pytest.mark.engine


@pytest.mark.skipif(not sshd_available(), reason="OpenSSH sshd is not installed")
def test_demo_runs_the_cloud_path_and_leaves_nothing(
    engine_env: dict[str, str], leftover_engines: Any
) -> None:
    port = free_port()
    result = CliRunner().invoke(
        app,
        [
            "demo",
            "--port",
            str(port),
            "--spec-k",
            "0,1",
            "--concurrency",
            "1,2",
            "--max-tokens",
            "16",
        ],
        catch_exceptions=False,
    )
    out = result.output
    assert result.exit_code == 0, out
    assert "was not available" in out  # the capacity fallback is said out loud
    assert "tailnet device removed" in out
    assert "0 resources billing" in out
    assert "demo done" in out
    for secret in (DEFAULT_AUTH_KEY, DEFAULT_API_TOKEN, DEFAULT_RUNPOD_KEY):
        assert secret not in out
    results = Path(engine_env["TAILPOD_RESULTS_DIR"])
    (run_dir,) = [d for d in results.iterdir() if (d / "billing-proof.json").exists()]
    proof = json.loads((run_dir / "billing-proof.json").read_text())
    assert proof["proven"] is True
    run = json.loads((run_dir / "run.json").read_text())
    assert run["provider"] == "runpod" and run["measured_from"] == "pod"
    assert run["image"]["digest"].startswith("sha256:")
    assert {a["label"] for a in run["arms"]} == {"plain", "ngram-k1"}
    # The sandbox rented nothing: the report must not pass the CPU's numbers off as the A100's.
    # tailpod knows it only as a general fact: the RunPod API it used was not RunPod's own.
    check = run["pod"]["hardware_check"]
    assert check["verdict"] == "emulated" and run["pod"]["emulated"] is True
    assert check["stamp"].startswith("non-vendor API endpoint http://127.0.0.1:")
    assert "provider claims unverified" in check["stamp"] and "illustrative" in check["stamp"]
    assert check["stamp"] in " ".join(out.split())
    report = (run_dir / "report.md").read_text()
    assert f"> **{check['stamp']}**" in report.split("## Arms")[0]
    home = Path(engine_env["TAILPOD_HOME"])
    for path in [*results.rglob("*.json"), *results.rglob("*.jsonl"), home / "ledger.json"]:
        text = path.read_text()
        for secret in (DEFAULT_AUTH_KEY, DEFAULT_API_TOKEN, DEFAULT_RUNPOD_KEY):
            assert secret not in text, path
    # A terminated pod takes its SSH-started engine with it.
    assert leftover_engines(str(home / "models")) == set()
    with socket.socket() as s:
        assert s.connect_ex(("127.0.0.1", port)) != 0
