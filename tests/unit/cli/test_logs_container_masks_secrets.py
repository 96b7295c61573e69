"""Secrets in `logs --container` (issue 37 item 10): a container log is whatever the container
printed, and an entrypoint that runs `env` prints the provider's pod-scoped key and every secret
the pod was given (sandbox fault `log_env`, docs/sandbox.md). `tailpod logs TAG --container`
prints each line with every such value masked; the other lines pass unchanged."""

from __future__ import annotations

import time

import pytest
from typer.testing import CliRunner

from tailpod.cli.main import app
from tailpod.config import load_settings
from tailpod.ledger import Ledger, PodRecord
from tailpod.provision.base import PodSpec
from tailpod.provision.providers import get_provider
from tailpod.sandbox import Sandbox

HF_TOKEN = "hf_" + "Zq7" * 10  # an HF token's shape: hf_ and 30 letters and digits
PASSWORD = "s3cr3t-Passw0rd"  # masked by the name it is assigned to, not by its shape


@pytest.mark.parametrize(("provider", "pod_key_name"),
                         [("runpod", "RUNPOD_API_KEY"), ("vast", "CONTAINER_API_KEY")])
def test_the_container_log_prints_the_pods_secrets_masked(
        cloud_env: dict[str, str], sandbox: Sandbox, provider: str, pod_key_name: str) -> None:
    sandbox.cloud.faults.add({"kind": "log_env", "provider": provider})
    settings = load_settings()
    prov = get_provider(provider, settings)
    tag = f"tp-logs-{provider}"
    info = prov.create(PodSpec(
        run_tag=tag, gpu_preference=["A40" if provider == "runpod" else "RTX 3090"], image="img",
        env={"HF_TOKEN": HF_TOKEN, "DB_PASSWORD": PASSWORD, "MODEL_NAME": "tiny/model"},
        start_command=["sh", "-c", "echo container-says-hello; sleep 30"]))
    try:
        Ledger(settings.state_dir).put(PodRecord(run_tag=tag, provider=provider,
                                                 status="running", pod_id=info.pod_id))
        deadline = time.time() + 20
        while time.time() < deadline:  # the pod's own line shows once its container runs
            if "container-says-hello" in (prov.container_log(info.pod_id) or []):  # type: ignore[attr-defined]
                break
            time.sleep(0.1)
        raw = prov.container_log(info.pod_id) or []  # type: ignore[attr-defined]
        pod_key = next(line.split("=", 1)[1] for line in raw
                       if line.startswith(pod_key_name + "="))
        assert pod_key and HF_TOKEN in "\n".join(raw)  # the fault planted them unmasked
        result = CliRunner().invoke(app, ["logs", tag, "--container"])
        assert result.exit_code == 0, result.output
        out = result.output.splitlines()
        for secret in (HF_TOKEN, PASSWORD, pod_key):
            assert secret not in result.output
        assert f"{pod_key_name}=***" in out
        assert "HF_TOKEN=***" in out and "DB_PASSWORD=***" in out
        assert "MODEL_NAME=tiny/model" in out and "container-says-hello" in out
    finally:
        prov.terminate(info.pod_id)
