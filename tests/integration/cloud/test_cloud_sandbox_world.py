"""`tailpod sandbox serve` is a complete world (issue 12 item 8): with the sandbox in one process and
the environment it writes loaded in another, the ordinary commands work as on a real account."""

from __future__ import annotations

import json
import os
import signal
import stat
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tailpod.sandbox import admin_call
from tailpod.sandbox.world import SANDBOX_MODEL_ID, registry_images
from tests import paths

REPO = paths.REPO
CLI = [sys.executable, "-c", "from tailpod.cli.main import app; app()"]


def read_env_file(path: Path) -> dict[str, str]:
    out = {}
    for line in path.read_text().splitlines():
        if line and not line.startswith("#"):
            key, _, value = line.partition("=")
            out[key] = value
    return out


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """`tailpod sandbox serve --env-file` in its own process (no pod processes: checks only);
    one per module, as its world (the tiny checkpoint) takes a few seconds to build."""
    tmp_path = tmp_path_factory.mktemp("served")
    env_file = tmp_path / "sandbox.env"
    proc = subprocess.Popen(
        [*CLI, "sandbox", "serve", "--json", "--no-run", "--no-sshd", "--start-delay", "0.05",
         "--env-file", str(env_file), "--workdir", str(tmp_path / "pods")],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(REPO), "TAILPOD_HOME": str(tmp_path / "world")},
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert line, proc.stderr.read() if proc.stderr else ""
        yield {"printed": json.loads(line), "env_file": env_file, "tmp": tmp_path}
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=5)


def user_env(served: dict[str, Any]) -> dict[str, str]:
    """Another shell: only the basics plus what the env file holds."""
    tmp: Path = served["tmp"]
    return {"PATH": os.environ["PATH"], "HOME": str(tmp / "user"), "PYTHONPATH": str(REPO),
            "TAILPOD_HOME": str(tmp / "user" / ".tailpod"),
            "TAILPOD_ENV_FILE": os.devnull,
            **read_env_file(served["env_file"])}


def test_serve_environment_holds_every_credential(served: dict[str, Any]) -> None:
    env_file: Path = served["env_file"]
    assert stat.S_IMODE(env_file.stat().st_mode) == 0o600
    written = read_env_file(env_file)
    assert written == served["printed"]["env"]
    for key in ("RUNPOD_API_KEY", "VAST_API_KEY", "TAILSCALE_API_KEY", "TAILSCALE_AUTH_KEY",
                "TAILPOD_SSH_KEY", "TAILPOD_RUNPOD_URL", "TAILPOD_VAST_URL",
                "TAILPOD_TAILSCALE_URL", "TAILPOD_REGISTRY_URL", "TAILPOD_HF_URL",
                "TAILPOD_SSH_CONFIG"):
        assert written.get(key), key
    assert written["TAILPOD_MODEL"] == SANDBOX_MODEL_ID
    repo, _, tag = written["TAILPOD_IMAGE"].partition(":")
    assert tag in registry_images()[repo]
    assert Path(written["TAILPOD_SSH_KEY"]).exists()


@pytest.mark.parametrize(("provider", "gpu"), [("runpod", "NVIDIA A40"), ("vastai", "RTX 4090")])
def test_check_requirements_passes_with_only_the_written_environment(
        served: dict[str, Any], provider: str, gpu: str) -> None:
    result = subprocess.run(
        [*CLI, "check-requirements", "--json", "--provider", provider, "--gpu", gpu,
         "--max-price", "1.5", "--hours", "1"],
        env=user_env(served), capture_output=True, text=True, timeout=180, cwd=served["tmp"])
    assert result.returncode == 0, result.stdout + result.stderr
    checks = {c["name"]: c for c in json.loads(result.stdout)["checks"]}
    for name in ("provider", "hf", "checkpoint", "fit", "image", "tailscale", "ssh", "offers"):
        assert checks[name]["status"] in ("pass", "warn"), (name, checks[name])
    assert checks["tailscale"]["status"] == "pass", checks["tailscale"]
    assert "weights" in checks["checkpoint"]["detail"], checks["checkpoint"]  # read off the Hub
    assert checks["image"]["status"] == "pass", checks["image"]  # the tag resolves to a digest
    written = read_env_file(served["env_file"])
    for secret in ("RUNPOD_API_KEY", "VAST_API_KEY", "TAILSCALE_API_KEY", "TAILSCALE_AUTH_KEY"):
        assert written[secret] not in result.stdout + result.stderr


def test_status_with_the_written_environment(served: dict[str, Any]) -> None:
    result = subprocess.run([*CLI, "status", "--json"], env=user_env(served),
                            capture_output=True, text=True, timeout=120, cwd=served["tmp"])
    assert result.returncode == 0, result.stdout + result.stderr
    body = json.loads(result.stdout)
    assert body["cloud"]["rows"] == []
    meter = admin_call(served["printed"]["urls"]["admin"], "GET", "/admin/meter")
    assert meter["billing_count"] == 0
