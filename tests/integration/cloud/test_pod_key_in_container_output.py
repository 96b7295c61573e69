"""The pod-scoped key the provider injects (the sandbox's `rpa_pod_…` / `vast_inst_…`, with `_`
and `-`; tailpod never learns it) printed by the container in header, JSON, debug-log and glued
forms reaches no file under TAILPOD_HOME or the results and no stream of `logs --container`,
`logs --container --json` or `down` (issue 38 item 4; adversary F5, #39: it was in clear in
container.log, `logs TAG`, the ledger files)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from tailpod.cli.main import app
from tailpod.ledger import Ledger
from tailpod.provision.base import PodSpec
from tailpod.provision.bootlog import diagnose
from tailpod.provision.create import up_remote
from tailpod.provision.providers import get_provider
from tailpod.provision.teardown import run_dir_for
from tailpod.sandbox import Sandbox
from tests.helpers.api_timings import fast_timings
from tests.helpers.lifecycle_policy import fast_policy

from .conftest import GPUS, SANDBOX_NAME, settings_for

KEY_ENV = {"runpod": "RUNPOD_API_KEY", "vastai": "CONTAINER_API_KEY"}
PRINTS = ("echo \"DEBUG httpx headers={{'Authorization': 'Bearer ${k}'}}\"; "
          "echo '{{\"request\": {{\"authorization\": \"Bearer '${k}'\"}}}}'; "
          "echo \"send: b'GET /v2/pods HTTP/1.1\\r\\nAuthorization: Bearer ${k}\\r\\n'\"; "
          "echo {k}_${k}; echo booted; exec sleep 60")


@pytest.mark.parametrize("kind", ["runpod", "vastai"])
def test_the_injected_pod_key_is_masked_in_every_file_and_stream(
        sandbox: Sandbox, tailpod_home: Path, monkeypatch: pytest.MonkeyPatch,
        kind: str) -> None:
    env = {**sandbox.env(), "TAILPOD_PROVIDER": kind,
           "TAILPOD_RESULTS_DIR": str(tailpod_home / "results")}
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    settings = settings_for(sandbox, tailpod_home, **env)
    ledger = Ledger(settings.state_dir)
    tag = f"tp-podkey-{kind}"
    spec = PodSpec(run_tag=tag, gpu_preference=[GPUS[kind]["first"], GPUS[kind]["second"]],
                   image="sandbox/img",
                   start_command=["sh", "-c", PRINTS.format(k=KEY_ENV[kind])])
    record, info = up_remote(settings, ledger, spec, policy=fast_policy(), timings=fast_timings())
    pod = sandbox.cloud.pods[f"{SANDBOX_NAME[kind]}:{info.pod_id}"]
    pod_key = str(pod.meta["pod_key"])
    assert "_" in pod_key  # the shape that broke the old rule (`-` too, for most draws)
    provider = get_provider(kind, settings, timings=fast_timings())
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline and "booted" not in " ".join(
            provider.container_log(info.pod_id) or []):
        time.sleep(0.1)
    raw = provider.container_log(info.pod_id) or []
    assert sum(pod_key in line for line in raw) >= 4, raw  # the container really printed it
    diagnose(provider, info.pod_id, run_dir_for(settings, tag))  # keeps container.log
    runner = CliRunner()
    outputs = [runner.invoke(app, ["logs", tag, "--container"]),
               runner.invoke(app, ["logs", tag, "--container", "--json"]),
               runner.invoke(app, ["down", tag])]
    assert outputs[0].exit_code == 0 and "Bearer ***" in outputs[0].stdout, outputs[0].output
    assert outputs[2].exit_code == 0, outputs[2].output
    for result in outputs:
        assert pod_key not in result.stdout + result.stderr
    files = [p for root in (tailpod_home,) for p in root.rglob("*") if p.is_file()]
    assert any(p.name == "container.log" for p in files) and any(p.name == "ledger.json"
                                                                 for p in files)
    for path in files:
        assert pod_key not in path.read_text(errors="replace"), path


def test_the_vast_instance_key_in_the_create_answer_is_masked_by_value_from_then_on(
        sandbox: Sandbox, tailpod_home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """vast's create answer carries `instance_api_key` (the key the instance gets as
    CONTAINER_API_KEY; docs in ../shared/reference/providers.md): tailpod registers it as it
    reads it, so a key of no known shape is masked by its value alone."""
    import secrets as random

    from tailpod.secrets import redact

    shapeless = "K" + random.token_urlsafe(18) + "-z_9"  # no prefix, no name: only the value

    def issue_pod_key(self: Any, pod: Any) -> str:  # the emulator's, with a shapeless key
        self.pod_keys[(pod.provider, shapeless)] = pod.pod_id
        pod.meta["pod_key"] = shapeless
        return shapeless

    monkeypatch.setattr(type(sandbox.cloud), "issue_pod_key", issue_pod_key)
    assert redact(f"token {shapeless} seen") == f"token {shapeless} seen"  # unknown so far
    settings = settings_for(sandbox, tailpod_home, TAILPOD_PROVIDER="vastai")
    spec = PodSpec(run_tag="tp-podkey-vast2", gpu_preference=[GPUS["vastai"]["first"]],
                   image="sandbox/img", start_command=["sleep", "30"])
    up_remote(settings, Ledger(settings.state_dir), spec, policy=fast_policy(),
              timings=fast_timings())
    assert redact(f"token {shapeless} seen") == "token *** seen"
