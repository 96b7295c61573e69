"""The start form follows the image (issue 25, work items 1, 2 and 5): the image's config is read
through the registry, an image without an ENTRYPOINT gets a plain command line, the JSON form
only replaces an ENTRYPOINT, a pod whose entrypoint swallowed its arguments is stopped within
seconds, the image's CUDA bounds the hosts, `--ttl-hours 0` rents with no TTL, and each run
records what first contact verified."""

from __future__ import annotations

import json
import shlex
import time
from collections.abc import Iterator
from contextlib import nullcontext
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from tailpod.agent_client.driver import EngineStarted
from tailpod.config import Settings, load_settings, run_settings_problems, ttl_warnings
from tailpod.engines.adapters import get_adapter
from tailpod.engines.base import EngineConfig
from tailpod.engines.image import facts_from_config, read_image_facts
from tailpod.errors import TailpodError
from tailpod.ledger import Ledger
from tailpod.pods import cloud as cloud_up
from tailpod.provision.base import PodSpec
from tailpod.provision.runpod import first_contact as fc
from tailpod.provision.runpod.provider import RunPodProvider, start_command_args
from tailpod.provision.vastai.provider import VastProvider
from tailpod.sandbox import Sandbox, start_sandbox
from tailpod.sandbox.images import compose, image_config
from tailpod.sandbox.tailscale import DEFAULT_API_TOKEN, DEFAULT_AUTH_KEY
from tailpod.sandbox.world import registry_images, sandbox_digest

SCRIPT = ["/bin/sh", "-c", "echo 'tailpod-start: pod ready'; exec sleep 60"]


@pytest.fixture
def world(tmp_path: Path) -> Iterator[Sandbox]:
    sb = start_sandbox(start_delay_s=0.05, workdir=tmp_path / "sandbox",
                       stand_in_config={"registry": {"images": registry_images()}})
    try:
        yield sb
    finally:
        sb.close()


def _settings(sb: Sandbox, home: Path, **env: str) -> Settings:
    from tailpod.cli.demo_world import demo_ssh_key

    return load_settings(env={
        **sb.env(), "TAILPOD_HOME": str(home), "TAILSCALE_API_KEY": DEFAULT_API_TOKEN,
        "TAILSCALE_AUTH_KEY": DEFAULT_AUTH_KEY, "TAILPOD_SSH_KEY": str(demo_ssh_key(home)),
        "TAILPOD_PROVIDER": "runpod", "TAILPOD_IMAGE": "vllm/vllm-openai:v0.11.0",
        "TAILPOD_GPUS": "NVIDIA A40", "TAILPOD_MAX_PRICE": "1.0", **env},
        dotenv_path=home / "absent.env")


def _pinned(repo: str, tag: str) -> str:
    return f"{repo}@{sandbox_digest(repo, tag)}"


def test_the_image_config_is_read_through_the_registry(world: Sandbox, tailpod_home: Path
                                                       ) -> None:
    settings = _settings(world, tailpod_home)
    vllm = read_image_facts(_pinned("vllm/vllm-openai", "v0.11.0"), settings)
    assert vllm.entrypoint == ("vllm", "serve") and vllm.has_entrypoint
    assert vllm.cuda_version == "12.8"  # CUDA_VERSION=12.8.1 in the served config
    sglang = read_image_facts("lmsysorg/sglang:v0.5.15", settings)
    assert sglang.entrypoint == () and not sglang.has_entrypoint
    assert sglang.cuda_version is None
    pytorch = read_image_facts(
        _pinned("runpod/pytorch", "2.8.0-py3.11-cuda12.8.1-cudnn-devel-ubuntu22.04"), settings)
    assert pytorch.entrypoint == () and pytorch.cmd == ("/start.sh",)


@pytest.mark.parametrize(("config", "cuda"), [
    ({"Env": ["CUDA_VERSION=12.4.1"]}, "12.4"),
    ({"Labels": {"com.nvidia.cuda.version": "11.8.0"}}, "11.8"),
    ({"Env": ["NVIDIA_REQUIRE_CUDA=cuda>=12.1 brand=tesla,driver>=470"]}, "12.1"),
    ({"Env": ["PATH=/usr/bin"]}, None),
    ({}, None),
])
def test_cuda_is_derived_from_the_config(config: dict[str, Any], cuda: str | None) -> None:
    assert facts_from_config({"config": config}).cuda_version == cuda


def test_plain_form_without_entrypoint_json_form_only_to_replace_one() -> None:
    plain = start_command_args(SCRIPT, ())
    assert not plain.startswith("{") and shlex.split(plain) == SCRIPT
    # Docker composes an image without ENTRYPOINT: the arguments are the whole process
    assert compose(image_config("lmsysorg/sglang"), plain, json_form=False) == SCRIPT
    for entry in (("vllm", "serve"), None):  # an ENTRYPOINT, or one not known
        sent = json.loads(start_command_args(SCRIPT, entry))
        assert sent == {"entrypoint": ["/bin/sh", "-c"], "cmd": [SCRIPT[2]]}


def test_create_body_carries_the_start_form_and_min_cuda(world: Sandbox, tailpod_home: Path
                                                         ) -> None:
    provider = RunPodProvider(_settings(world, tailpod_home))
    spec = PodSpec(run_tag="tp-x", gpu_preference=["NVIDIA A40"], image="lmsysorg/sglang@x",
                   start_command=SCRIPT, image_entrypoint=(), min_cuda="12.8")
    body = provider._create_body(spec, "NVIDIA A40")
    assert shlex.split(body["args"]) == SCRIPT
    assert body["gpu"] == {"id": "NVIDIA A40", "count": 1, "minCudaVersion": "12.8"}
    from tests.integration.contracts.contract import contract_for

    contract = contract_for("runpod", "POST", "/v2/pods")
    assert contract is not None and contract.request_errors(body) == []
    bad = {**body, "gpu": {**body["gpu"], "minCudaVersion": "12.8.1"}}  # the schema's pattern
    assert contract.request_errors(bad) != []


def test_vast_search_asks_for_hosts_whose_driver_runs_the_image_cuda(
        world: Sandbox, tailpod_home: Path) -> None:
    seen: list[dict[str, Any]] = []
    provider = VastProvider(_settings(world, tailpod_home, TAILPOD_PROVIDER="vastai"))
    real = provider.api.call

    def spy(method: str, path: str, what: str, **kw: Any) -> Any:
        if path.startswith("/api/v0/bundles"):
            seen.append(kw["json"])
        return real(method, path, what, **kw)

    provider.api.call = spy  # type: ignore[method-assign]
    offers = provider.search(["RTX 4090"], 1, 20, min_cuda="12.8")
    assert seen[-1]["cuda_max_good"] == {"gte": 12.8}
    assert all(float(o["cuda_max_good"]) >= 12.8 for o in offers)
    provider.search(["RTX 4090"], 1, 20)
    assert "cuda_max_good" not in seen[-1]


def _fake_pod_side(monkeypatch: pytest.MonkeyPatch, reach_s: float = 0.0) -> list[float]:
    """The engine's side is the real-engine tests' job: no SSH, no agent. The tailnet wait
    takes `reach_s` (a device that is slow, or never comes, for a pod that crash-loops)."""
    armed: list[float] = []
    agent = SimpleNamespace(state_dir="/pod/state")
    started = EngineStarted({"ok": True, "startup_s": 1.0},
                            get_adapter("vllm").parse_startup(""), [])  # fmt: skip

    def reach(*_a: object) -> SimpleNamespace:
        time.sleep(reach_s)
        return SimpleNamespace(pin_name="pod", to_record=lambda: {})

    monkeypatch.setattr(cloud_up, "reach_pod", reach)
    monkeypatch.setattr(cloud_up, "open_pod_agent", lambda *_a: nullcontext(agent))
    monkeypatch.setattr(cloud_up, "arm_deadman",
                        lambda _agent, _s, _p, ttl_at: armed.append(ttl_at) or {"armed": True})
    monkeypatch.setattr(cloud_up, "start_arm", lambda *_a: started)
    monkeypatch.setattr(cloud_up, "RUNNING_POLL_S", 0.1)
    return armed


def test_up_on_an_account_that_does_not_decode_the_json_form_stops_within_seconds(
        world: Sandbox, tailpod_home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """vllm (ENTRYPOINT vllm serve) gets the JSON form; an account whose v2 `args` shlex-splits
    it crash-loops the pod (it stays STARTING). `up` reads the log while the pod boots, names
    the cause and proves the pod down, long before the boot wait (>= 120 s) runs out."""
    world.cloud.runpod_json_start_form = False
    world.cloud.crash_error_after = 10**6  # never ERROR: only the log tells
    monkeypatch.setattr(cloud_up, "BOOT_WATCH_S", 0.3)
    _fake_pod_side(monkeypatch, reach_s=120.0)  # the device never comes
    settings = _settings(world, tailpod_home)
    ledger = Ledger(settings.state_dir)
    monkeypatch.setattr(cloud_up, "pinned_image",
                        lambda *_a: (_pinned("vllm/vllm-openai", "v0.11.0"), None))
    began = time.monotonic()
    with pytest.raises(TailpodError) as failed:
        cloud_up.up_cloud(settings, EngineConfig(engine="vllm", model="org/m"), ledger,
                          lambda _l: None, preflight=False)
    took = time.monotonic() - began
    assert took < 60, took  # the boot wait for an unknown size is 120 s at least
    text = failed.value.message
    assert text.startswith("the image's ENTRYPOINT rejected the start command")
    # the JSON text, shlex-split onto `vllm serve`, became its model argument
    assert "is not a valid model identifier" in text
    assert "billing proven stopped" in text
    record = ledger.all()[0]
    assert record.extra.provider_facts["start_form"] == "json"
    assert world.meter()["billing_count"] == 0
    assert "seen in its container log" in text  # recognised while booting (bootlog.BootWatch)


def test_up_with_no_ttl_and_the_facts_each_run_records(
        world: Sandbox, tailpod_home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    armed = _fake_pod_side(monkeypatch)
    settings = _settings(world, tailpod_home, TAILPOD_TTL_HOURS="0",
                         TAILPOD_IMAGE="lmsysorg/sglang:v0.5.15")
    assert run_settings_problems(settings) == []
    fc.save(settings, fc.FirstContactFacts(
        account=fc.account_id(world.runpod_key), image="lmsysorg/sglang:v0.5.15",
        checked_at=time.time(), start_form="plain", start_command_ran=True,
        pod_key_self_kill=False, meter_delay_s=40.0, meter_bound_s=90.0))
    ledger = Ledger(settings.state_dir)
    said: list[str] = []
    monkeypatch.setattr(cloud_up, "pinned_image",
                        lambda *_a: (_pinned("lmsysorg/sglang", "v0.5.15"), None))
    record, _info = cloud_up.up_cloud(settings, EngineConfig(engine="sglang", model="org/m"),
                                      ledger, said.append, preflight=False)
    try:
        assert any("NO TTL" in line for line in said)
        assert armed == [0.0]  # the dead-man: no TTL, its heartbeat timeout still applies
        assert record.ttl_expires_at is None
        pod = world.cloud.pods[f"runpod:{record.pod_id}"]
        guard = pod.command if isinstance(pod.command, str) else " ".join(pod.command)
        assert " runpod 0.000 1800 " in guard  # the stage-0 guard: ttl 0 = none
        assert not guard.startswith("{")  # sglang has no ENTRYPOINT: a plain command line
        facts = record.extra.provider_facts
        assert facts["start_form"] == "plain" and facts["min_cuda"] is None
        assert facts["image_config"]["entrypoint"] == []
        stamp = facts["first_contact"]
        assert stamp["verified"] and stamp["same_image"]
        assert stamp["pod_key_self_kill"] is False and stamp["meter_delay_s"] == 40.0
    finally:
        from tailpod.provision.teardown import down_remote

        down_remote(settings, ledger, ledger.get(record.run_tag) or record)
    assert world.meter()["billing_count"] == 0


def test_up_gives_the_ledger_and_the_pod_one_ttl_deadline(
        world: Sandbox, tailpod_home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 24: the deadline comes from one clock read; the ledger's ttl_expires_at, the value
    the dead-man is armed with and the stage-0 guard in the pod's start command are that one."""
    armed = _fake_pod_side(monkeypatch)
    settings = _settings(world, tailpod_home, TAILPOD_TTL_HOURS="2")
    ledger = Ledger(settings.state_dir)
    monkeypatch.setattr(cloud_up, "pinned_image",
                        lambda *_a: (_pinned("vllm/vllm-openai", "v0.11.0"), None))
    before = time.time()
    record, _info = cloud_up.up_cloud(settings, EngineConfig(engine="vllm", model="org/m"),
                                      ledger, lambda _l: None, preflight=False)
    after = time.time()
    try:
        deadline = record.ttl_expires_at
        assert deadline is not None and before + 2 * 3600 <= deadline <= after + 2 * 3600
        assert armed == [deadline]
        assert record.extra.deadman["ttl_at"] == deadline
        pod = world.cloud.pods[f"runpod:{record.pod_id}"]
        guard = pod.command if isinstance(pod.command, str) else " ".join(pod.command)
        assert f" runpod {deadline:.3f} 1800 " in guard
    finally:
        from tailpod.provision.teardown import down_remote

        down_remote(settings, ledger, ledger.get(record.run_tag) or record)
    assert world.meter()["billing_count"] == 0


def test_ttl_zero_is_accepted_with_a_warning_and_negative_still_refused(tailpod_home: Path
                                                                        ) -> None:
    base = {"TAILPOD_HOME": str(tailpod_home)}
    zero = load_settings(env={**base, "TAILPOD_TTL_HOURS": "0"},
                         dotenv_path=tailpod_home / "absent.env")
    assert run_settings_problems(zero) == []
    assert "NO TTL" in ttl_warnings(zero)[0] and "heartbeat" in ttl_warnings(zero)[0]
    four = load_settings(env=base, dotenv_path=tailpod_home / "absent.env")
    assert ttl_warnings(four) == []
    negative = load_settings(env={**base, "TAILPOD_TTL_HOURS": "-1"},
                             dotenv_path=tailpod_home / "absent.env")
    assert any("--ttl-hours" in p for p in run_settings_problems(negative))
    no_beat = load_settings(env={**base, "TAILPOD_TTL_HOURS": "0",
                                 "TAILPOD_HEARTBEAT_TIMEOUT": "0"},
                            dotenv_path=tailpod_home / "absent.env")
    assert any("heartbeat" in p for p in run_settings_problems(no_beat))


def test_each_pod_gets_its_own_single_use_auth_key(
        world: Sandbox, tailpod_home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 25 item 6: the pod's environment is readable through the provider's API for the
    pod's life, so with a Tailscale API key it holds a key minted for this pod alone (single use,
    ephemeral, pre-approved, 30 min), never the configured reusable TAILSCALE_AUTH_KEY."""
    from tailpod.provision.tailnet.steps import api_from_settings

    _fake_pod_side(monkeypatch)
    settings = _settings(world, tailpod_home)
    ledger = Ledger(settings.state_dir)
    said: list[str] = []
    monkeypatch.setattr(cloud_up, "pinned_image",
                        lambda *_a: (_pinned("vllm/vllm-openai", "v0.11.0"), None))
    record, _info = cloud_up.up_cloud(settings, EngineConfig(engine="vllm", model="org/m"),
                                      ledger, said.append, preflight=False)
    try:
        pod = world.cloud.pods[f"runpod:{record.pod_id}"]
        sent = str(pod.env["TS_AUTHKEY"])
        assert sent.startswith("tskey-auth-") and sent != DEFAULT_AUTH_KEY
        key_id = record.tailnet["auth_key_id"]
        assert key_id in sent  # the emulator's secrets carry their id
        with api_from_settings(settings) as api:
            meta = api.get_key(key_id)
        create = meta["capabilities"]["devices"]["create"]
        assert (create["reusable"], create["ephemeral"], create["preauthorized"]) == (
            False, True, True)
        assert sorted(create["tags"]) == sorted(settings.tailscale_tags)
        assert any("single-use" in line for line in said)
        assert DEFAULT_AUTH_KEY not in json.dumps(ledger.get(record.run_tag).to_json())
    finally:
        from tailpod.provision.teardown import down_remote

        down_remote(settings, ledger, ledger.get(record.run_tag) or record)
