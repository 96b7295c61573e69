"""A new user's first rental, on the sandbox (issue 12 item 8): `tailpod sandbox serve --env-file`
in one process; in another, with only that file's environment, `check-requirements`, `up`,
`benchmark`, `status` and `down`, each as its own CLI process. The sandbox runs with RunPod's
GraphQL retired, so `down` proves the teardown on REST v2 alone (issue 12 item 5)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tailpod.sandbox import admin_call
from tailpod.sandbox.sshd import sshd_available
from tests import paths

pytestmark = [
    pytest.mark.engine,
    pytest.mark.skipif(not sshd_available(), reason="OpenSSH sshd is not installed"),
]
REPO = paths.REPO
CLI = [sys.executable, "-c", "from tailpod.cli.main import app; app()"]


@pytest.fixture()
def served(tmp_path: Path, vllm_python: str) -> Iterator[dict[str, Any]]:
    env_file = tmp_path / "sandbox.env"
    proc = subprocess.Popen(
        [*CLI, "sandbox", "serve", "--json", "--env-file", str(env_file), "--graphql-retired",
         "--engine-python", vllm_python, "--workdir", str(tmp_path / "pods")],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(REPO), "TAILPOD_HOME": str(tmp_path / "world")},
    )
    try:
        assert proc.stdout is not None
        printed = json.loads(proc.stdout.readline())
        env = {"PATH": os.environ["PATH"], "HOME": str(tmp_path / "user"),
               "PYTHONPATH": str(REPO), "TAILPOD_HOME": str(tmp_path / "user" / ".tailpod"),
               "TAILPOD_ENV_FILE": os.devnull}
        for line in env_file.read_text().splitlines():
            if line and not line.startswith("#"):
                key, _, value = line.partition("=")
                env[key] = value
        yield {"printed": printed, "env": env, "tmp": tmp_path}
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=5)


def tailpod(served: dict[str, Any], *args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*CLI, *args], env=served["env"], capture_output=True, text=True,
                          timeout=timeout, cwd=served["tmp"])


def test_first_rental_through_the_plain_cli(served: dict[str, Any]) -> None:
    rent = ("--provider", "runpod", "--gpu", "NVIDIA A40", "--max-price", "1")
    check = tailpod(served, "check-requirements", *rent)
    assert check.returncode == 0, check.stdout + check.stderr

    up = tailpod(served, "up", *rent, "--context-length", "512", "--enforce-eager", "--json",
                 timeout=560)
    assert up.returncode == 0, up.stdout[-3000:] + up.stderr[-3000:]
    record = json.loads(up.stdout)
    tag = record["run_tag"]
    assert record["image"].startswith("vllm/vllm-openai@sha256:")

    try:
        bench = tailpod(served, "benchmark", "--spec-k", "0", "--concurrency", "1", "--reps", "1",
                        "--max-tokens", "16", "--no-extend-k")
        assert bench.returncode == 0, bench.stdout[-3000:] + bench.stderr[-3000:]
        status = tailpod(served, "status", "--json")
        assert status.returncode == 0, status.stderr
        rows = {r["run_tag"]: r for r in json.loads(status.stdout)["cloud"]["rows"]}
        assert tag in rows
    finally:
        down = tailpod(served, "down", tag)
    assert down.returncode == 0, down.stdout[-3000:] + down.stderr[-3000:]
    proof = json.loads((served["tmp"] / "results" / tag / "billing-proof.json").read_text())
    assert proof["proven"] is True
    names = {c["name"] for c in proof["checks"]}
    assert "billing-history" in names and "account-spend-rate" not in names  # GraphQL is gone
    meter = admin_call(served["printed"]["urls"]["admin"], "GET", "/admin/meter")
    assert meter["billing_count"] == 0
    for secret in ("RUNPOD_API_KEY", "TAILSCALE_AUTH_KEY", "TAILSCALE_API_KEY"):
        value = served["env"][secret]
        assert value not in up.stdout + up.stderr + down.stdout + down.stderr
