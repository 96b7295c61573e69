"""`benchmark --serve-tax` on a sandbox pod: bare.py runs on the pod over SSH with the pod's
engine Python, after the served engine stops, and the served arm starts again for its cells."""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from tailpod.cli.demo import demo_ssh_key
from tailpod.cli.main import app
from tailpod.sandbox.server import start_sandbox
from tailpod.sandbox.sshd import sshd_available
from tailpod.sandbox.tailscale import DEFAULT_API_TOKEN, DEFAULT_AUTH_KEY

pytestmark = [
    pytest.mark.engine,
    pytest.mark.skipif(not sshd_available(), reason="OpenSSH sshd is not installed"),
]
runner = CliRunner()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def cloud(engine_env: dict[str, str], tiny_models: dict[str, Path]) -> Iterator[dict[str, Any]]:
    home = Path(engine_env["TAILPOD_HOME"])
    sandbox = start_sandbox(
        sshd=True,
        workdir=home / "sandbox",
        stand_in_config={
            "registry": {"images": {"vllm/vllm-openai": {"v0.11.0": "sha256:" + "ab" * 32}}}
        },
    )
    env = {
        **sandbox.env(),
        "TAILSCALE_API_KEY": DEFAULT_API_TOKEN,
        "TAILSCALE_AUTH_KEY": DEFAULT_AUTH_KEY,
        "TAILPOD_SSH_KEY": str(demo_ssh_key(home)),
        "TAILPOD_PROVIDER": "vastai",
        "TAILPOD_MODEL": str(tiny_models["target"]),
        "TAILPOD_IMAGE": "vllm/vllm-openai:v0.11.0",
        "TAILPOD_GPUS": "RTX 4090",
        "TAILPOD_MAX_PRICE": "1.0",
        "TAILPOD_PORT": str(free_port()),
    }
    with pytest.MonkeyPatch.context() as mp:
        for key, value in env.items():
            mp.setenv(key, value)
        try:
            yield {"sandbox": sandbox, "home": home}
        finally:
            sandbox.close()


def test_serve_tax_on_a_pod(cloud: dict[str, Any], leftover_engines: Any) -> None:
    up = runner.invoke(app, ["up", "--context-length", "1024", "--enforce-eager", "--json"])
    assert up.exit_code == 0, up.output
    tag = json.loads(up.output)["run_tag"]
    try:
        here = runner.invoke(app, ["benchmark", "--serve-tax", "--from-here"])
        assert here.exit_code == 2 and "--from-here" in here.output  # refused before it runs
        bench = runner.invoke(app, ["benchmark", "--serve-tax", "--spec-k", "0", "--concurrency",
                                    "1", "--reps", "1", "--max-tokens", "16", "--run-id", "tax"])
        assert bench.exit_code == 0, bench.output  # fmt: skip
        run = json.loads((cloud["home"] / "results" / "tax" / "run.json").read_text())
        (arm,) = run["arms"]
        assert arm["serve_tax"]["status"] == "measured", arm["serve_tax"]
        (row,) = arm["serve_tax"]["rows"]
        assert row["output_tokens"] == 4 * 16 and row["output_tok_s"] > 0
        cells = [json.loads(line) for line in
                 (cloud["home"] / "results" / "tax" / "rows.jsonl").read_text().splitlines()]
        (cell,) = [c for c in cells if c["kind"] == "cell"]
        assert cell["failed"] == 0 and cell["output_tok_s"] > 0  # the served engine came back
        assert len(arm["starts"]) == 1 and arm["startup"]["facts"]["ready"]
    finally:
        down = runner.invoke(app, ["down", tag, "--json"])
    assert down.exit_code == 0, down.output
    assert cloud["sandbox"].billing_now() == []
    assert leftover_engines(str(cloud["home"])) == set()
