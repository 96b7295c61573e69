"""tailpod and the sandbox held to the vendors' published contracts (issue 12, items 1-3).

The start command must replace an image's ENTRYPOINT (RunPod v2 `args` only feeds it), pods walk
RunPod's documented states, and a pod that fails before SSH explains itself through its
container log. Sources of each behaviour: docs/providers.md.
"""

from __future__ import annotations

import json
import shlex
import time
from collections.abc import Iterator
from contextlib import nullcontext
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import httpx
import pytest

from tailpod.agent_client.driver import EngineStarted
from tailpod.config import Settings, load_settings
from tailpod.engines.adapters import get_adapter
from tailpod.engines.base import EngineConfig
from tailpod.errors import CapacityError, TailpodError
from tailpod.ledger import Ledger, PodRecord
from tailpod.pods import cloud as cloud_up
from tailpod.provision import bootlog
from tailpod.provision.base import PodState
from tailpod.provision.providers import get_provider
from tailpod.provision.runpod import provider as runpod_provider
from tailpod.sandbox import Sandbox, start_sandbox
from tailpod.sandbox.image_registry import CONFIG_TYPE
from tailpod.sandbox.images import compose, image_config, parse_start_command
from tailpod.sandbox.sshd import sshd_available
from tailpod.sandbox.tailscale import DEFAULT_API_TOKEN, DEFAULT_AUTH_KEY
from tests.helpers.api_timings import fast_timings

VLLM = "vllm/vllm-openai:v0.11.0"
VLLM_PINNED = "vllm/vllm-openai@sha256:" + "ab" * 32
SHELL = ["sh", "-c", "echo tailpod-start: pod ready; exec sleep 60"]


def rp(sb: Sandbox, method: str, path: str, **kw: Any) -> httpx.Response:
    return httpx.request(method, sb.runpod_url + path, timeout=10,
                         headers={"Authorization": f"Bearer {sb.runpod_key}"}, **kw)


def create(sb: Sandbox, image: str, args: str) -> dict[str, Any]:
    created = rp(sb, "POST", "/v2/pods", json={
        "name": f"tp-fidelity-{time.time_ns()}", "image": image, "args": args,
        "gpu": {"id": "NVIDIA A40", "count": 1}, "ports": ["22/tcp"]})
    assert created.status_code == 201, created.text
    return dict(created.json())


def wait_status(sb: Sandbox, pod_id: str, want: str, timeout: float = 15.0) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    seen = []
    while time.monotonic() < deadline:
        pod = rp(sb, "GET", f"/v2/pods/{pod_id}").json()
        if not seen or seen[-1] != pod["status"]:
            seen.append(pod["status"])
        if pod["status"] == want:
            return dict(pod, seen=seen)
        time.sleep(0.05)
    raise AssertionError(f"pod {pod_id} never reached {want}: {seen}")


@pytest.fixture()
def slow_sandbox(tmp_path: Path) -> Iterator[Sandbox]:
    """Pods that take visible time in each documented state: long enough that a loaded machine
    (CI ran these at load 8 on 2 cores) still polls each state before the next one."""
    sb = start_sandbox(start_delay_s=3.0, workdir=tmp_path / "sandbox", stand_ins=False)
    try:
        yield sb
    finally:
        sb.close()


# -- item 1: the start command runs whatever ENTRYPOINT the image has ---------------------------
def test_docker_composition_of_entrypoint_cmd_and_start_command() -> None:
    vllm = image_config(VLLM_PINNED)
    assert vllm.entrypoint == ("vllm", "serve")
    assert image_config("docker.io/runpod/pytorch:2.8.0").cmd == ("/start.sh",)
    assert image_config("lmsysorg/sglang:v0.5.5").entrypoint == ()
    # A plain args string is appended to the ENTRYPOINT (what RunPod's v2 `args` means) ...
    assert compose(vllm, shlex.join(SHELL)) == ["vllm", "serve", *SHELL]
    # ... RunPod's JSON form replaces it ...
    json_form = runpod_provider.start_command_args(SHELL)
    assert json.loads(json_form) == {"entrypoint": ["sh", "-c"], "cmd": [SHELL[2]]}
    assert parse_start_command(json_form) == (["sh", "-c"], [SHELL[2]])
    assert compose(vllm, json_form) == SHELL
    # ... and no start command runs the image's own ENTRYPOINT + CMD.
    assert compose(image_config("runpod/pytorch:2.8.0"), None) == ["/start.sh"]


def test_registry_serves_image_configs_with_their_entrypoint(tmp_path: Path) -> None:
    sb = start_sandbox(workdir=tmp_path / "sandbox", stand_in_config={
        "registry": {"images": {"vllm/vllm-openai": {"v0.11.0": "sha256:" + "ab" * 32}}}})
    try:
        url = sb.extra_urls["registry"]
        token = httpx.get(url + "/token", params={
            "service": "registry.docker.io", "scope": "repository:vllm/vllm-openai:pull"}
        ).json()["token"]
        auth = {"Authorization": f"Bearer {token}"}
        manifest = httpx.get(url + "/v2/vllm/vllm-openai/manifests/v0.11.0", headers={
            **auth, "Accept": "application/vnd.oci.image.manifest.v1+json"}).json()
        assert manifest["config"]["mediaType"] == CONFIG_TYPE
        blob = httpx.get(url + f"/v2/vllm/vllm-openai/blobs/{manifest['config']['digest']}",
                         headers=auth).json()
        assert blob["config"]["Entrypoint"] == ["vllm", "serve"]
    finally:
        sb.close()


def test_old_args_form_crash_loops_a_vllm_pod_and_the_json_form_runs(
    sandbox: Sandbox,
) -> None:
    old = create(sandbox, VLLM_PINNED, shlex.join(SHELL))  # what tailpod sent before
    new = create(sandbox, VLLM_PINNED, runpod_provider.start_command_args(SHELL))
    crashed = wait_status(sandbox, old["id"], "ERROR")
    assert "RUNNING" not in crashed["seen"] and crashed["runtime"] is None
    record = sandbox.cloud.pods[f"runpod:{old['id']}"]
    assert record.meta["argv"][:3] == ["vllm", "serve", "sh"]
    assert record.meta["exits"] >= sandbox.cloud.crash_error_after  # restarted, exited again
    log = rp(sandbox, "GET", f"/v2/pods/{old['id']}/logs", params={"tail": 50})
    assert log.headers["content-type"].startswith("text/event-stream")
    lines = runpod_provider.parse_log_events(log.text)
    assert sum("unrecognized arguments" in line for line in lines) >= 2  # a crash loop
    running = wait_status(sandbox, new["id"], "RUNNING")
    assert running["runtime"] is not None
    assert sandbox.cloud.pods[f"runpod:{new['id']}"].meta["argv"] == SHELL
    assert rp(sandbox, "DELETE", f"/v2/pods/{old['id']}").status_code == 204
    assert rp(sandbox, "DELETE", f"/v2/pods/{new['id']}").status_code == 204


# -- item 2: pod states as the vendor documents them --------------------------------------------
def test_pods_walk_provisioning_starting_running_with_runtime_null_until_running(
    slow_sandbox: Sandbox,
) -> None:
    pod = create(slow_sandbox, "sandbox/img", "sleep 60")
    assert pod["status"] == "PROVISIONING" and pod["runtime"] is None
    starting = wait_status(slow_sandbox, pod["id"], "STARTING")
    assert starting["runtime"] is None and starting["ssh"]["direct"] is None
    running = wait_status(slow_sandbox, pod["id"], "RUNNING")
    assert running["runtime"]["ports"][0]["private"] == 22
    assert running["seen"][0] == "STARTING"
    assert rp(slow_sandbox, "DELETE", f"/v2/pods/{pod['id']}").status_code == 204


def test_gpu_and_price_are_taken_once_stated_and_the_cap_applied_then(
    slow_sandbox: Sandbox, tailpod_home: Path
) -> None:
    settings = load_settings(env={**slow_sandbox.env(), "TAILPOD_HOME": str(tailpod_home)},
                             dotenv_path=tailpod_home / "absent.env")
    provider = get_provider("runpod", settings, timings=fast_timings())
    pod = create(slow_sandbox, "sandbox/img", "sleep 60")
    early = provider.get(pod["id"])
    assert early is not None and early.state is PodState.PENDING and early.price_per_hr is None
    # The host the scheduler found costs more than the catalog said (a price the create could
    # not know): the cap must be held against what the running pod costs.
    slow_sandbox.cloud.pods[f"runpod:{pod['id']}"].compute_rate = 0.95
    record = PodRecord(run_tag=pod["name"], provider="runpod", pod_id=pod["id"])
    said: list[str] = []
    info = cloud_up.await_running(settings, record, 20, said.append, poll_s=0.1)
    assert info.state is PodState.RUNNING and info.price_per_hr == 0.95
    assert info.gpu_type == "NVIDIA A40"
    assert any("PROVISIONING" in line or "STARTING" in line for line in said)
    with pytest.raises(CapacityError, match="above the cap"):
        cloud_up.check_stated_price(record, info, 0.5)
    cloud_up.check_stated_price(record, info, 1.0)
    provider.terminate(pod["id"])


def test_error_state_is_a_failed_boot(sandbox: Sandbox, tailpod_home: Path,
                                      monkeypatch: pytest.MonkeyPatch) -> None:
    # the state alone decides here: the container-log watch (which would name the cause
    # sooner) is held off
    monkeypatch.setattr(cloud_up, "BOOT_WATCH_S", 1e9)
    settings = load_settings(env={**sandbox.env(), "TAILPOD_HOME": str(tailpod_home)},
                             dotenv_path=tailpod_home / "absent.env")
    pod = create(sandbox, VLLM_PINNED, shlex.join(SHELL))
    record = PodRecord(run_tag=pod["name"], provider="runpod", pod_id=pod["id"])
    with pytest.raises(TailpodError, match="reports ERROR"):
        cloud_up.await_running(settings, record, 20, lambda _line: None, poll_s=0.1)
    rp(sandbox, "DELETE", f"/v2/pods/{pod['id']}")


def test_early_running_quirk_is_handled_like_running(sandbox: Sandbox,
                                                     tailpod_home: Path) -> None:
    settings = load_settings(env={**sandbox.env(), "TAILPOD_HOME": str(tailpod_home)},
                             dotenv_path=tailpod_home / "absent.env")
    sandbox.add_fault("early_running", provider="runpod", op="create")
    # the container comes up 1.5 s after the create, so the create's answer is surely the early
    # one (with this sandbox's 0.05 s it raced the answer on a loaded machine)
    sandbox.add_fault("slow_start", provider="runpod", op="create", seconds=1.5)
    pod = create(sandbox, "sandbox/img", "sleep 60")
    assert pod["status"] == "RUNNING" and pod["runtime"] is None
    record = PodRecord(run_tag=pod["name"], provider="runpod", pod_id=pod["id"])
    info = cloud_up.await_running(settings, record, 5, lambda _line: None, poll_s=0.1)
    assert info.price_per_hr == 0.40  # stated with RUNNING, so recorded and capped at once
    rp(sandbox, "DELETE", f"/v2/pods/{pod['id']}")


# -- item 3: when a pod fails before SSH, show why -----------------------------------------------
@pytest.mark.parametrize(("line", "cause"), [
    ("vllm serve: error: unrecognized arguments: -c 'echo'", "entrypoint-rejected-args"),
    ("Error response from daemon: pull access denied for x/y", "image-pull-failed"),
    ("OSError: [Errno 28] No space left on device", "out-of-disk"),
    ("tailpod-start: sshd did not start", "sshd-missing"),
    ("tailpod-start: tailnet join failed with status 1", "tailnet"),
])
def test_recognised_causes(line: str, cause: str) -> None:
    found = bootlog.recognise(["booting", line])
    assert found is not None and found.name == cause
    assert bootlog.recognise(["booting", "all fine"]) is None


def test_tailnet_hint_only_when_the_tailnet_is_the_cause(tmp_path: Path) -> None:
    hint = "is the auth key still valid?"
    sshd = bootlog.BootDiagnosis(["tailpod-start: sshd did not start"],
                                 bootlog.recognise(["tailpod-start: sshd did not start"]), None)
    message, got = bootlog.explain("the pod did not join the tailnet", hint, sshd, True)
    assert message.startswith("sshd did not start in the pod") and "auth key" not in (got or "")
    silent = bootlog.BootDiagnosis(["nothing of tailpod's"], None, None)
    assert "auth key" not in (bootlog.explain("x", hint, silent, True)[1] or "")
    joined = bootlog.BootDiagnosis(["tailpod-start: pod ready"], None, None)
    assert bootlog.explain("x", hint, joined, True)[1] == hint


def test_runpod_and_vast_container_logs_through_their_endpoints(
    sandbox: Sandbox, tailpod_home: Path
) -> None:
    settings = load_settings(env={**sandbox.env(), "TAILPOD_HOME": str(tailpod_home)},
                             dotenv_path=tailpod_home / "absent.env")
    pod = create(sandbox, "sandbox/img", "sh -c 'echo hello from the pod; exec sleep 60'")
    wait_status(sandbox, pod["id"], "RUNNING")
    runpod = get_provider("runpod", settings, timings=fast_timings())
    deadline = time.monotonic() + 10
    while not (runpod.container_log(pod["id"]) or []) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert runpod.container_log(pod["id"]) == ["hello from the pod"]  # type: ignore[attr-defined]
    runpod.terminate(pod["id"])

    headers = {"Authorization": f"Bearer {sandbox.vast_key}"}
    offers = httpx.post(sandbox.vast_url + "/api/v0/bundles/", headers=headers, timeout=10,
                        json={"rented": {"eq": False}}).json()["offers"]
    made = httpx.put(f"{sandbox.vast_url}/api/v0/asks/{offers[0]['id']}/", headers=headers,
                     timeout=10, json={"image": "sandbox/img", "disk": 10, "label": "tp-logs",
                                       "onstart": "echo hello from vast; exec sleep 60"}).json()
    vast = get_provider("vastai", settings, timings=fast_timings())
    instance = str(made["new_contract"])
    deadline = time.monotonic() + 10
    lines: list[str] | None = None
    while time.monotonic() < deadline and not lines:
        lines = bootlog.fetch_container_log(vast, instance)
        time.sleep(0.1)
    assert lines == ["hello from vast"]
    vast.terminate(instance)


def up_settings(sb: Sandbox, home: Path) -> Settings:
    from tailpod.cli.demo_world import demo_ssh_key

    return load_settings(env={
        **sb.env(), "TAILPOD_HOME": str(home), "TAILSCALE_API_KEY": DEFAULT_API_TOKEN,
        "TAILSCALE_AUTH_KEY": DEFAULT_AUTH_KEY, "TAILPOD_SSH_KEY": str(demo_ssh_key(home)),
        "TAILPOD_PROVIDER": "runpod", "TAILPOD_IMAGE": VLLM, "TAILPOD_GPUS": "NVIDIA A40",
        "TAILPOD_MAX_PRICE": "1.0"}, dotenv_path=home / "absent.env")


@pytest.mark.skipif(not sshd_available(), reason="OpenSSH sshd is not installed")
def test_up_on_vllm_image_gets_past_the_entrypoint_and_the_old_form_is_explained(
    tmp_path: Path, tailpod_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`up --provider runpod --image vllm/vllm-openai:<tag>`: the start script runs (sshd, tailnet
    join) under the image's ENTRYPOINT. With the old args form the pod crash-loops and `up` says
    so from the container log, keeps the log, and gives no tailnet hint."""
    sb = start_sandbox(sshd=True, start_delay_s=0.1, workdir=tmp_path / "sandbox")
    try:
        settings = up_settings(sb, tailpod_home)
        ledger = Ledger(settings.state_dir)
        monkeypatch.setattr(cloud_up, "pinned_image", lambda *_a: (VLLM_PINNED, None))
        monkeypatch.setattr(cloud_up, "RUNNING_POLL_S", 0.2)

        # the engine's side is the real-engine tests' job (tests/e2e)
        agent = SimpleNamespace(state_dir="/pod/state")
        started = EngineStarted({"ok": True, "startup_s": 1.0},
                                get_adapter("vllm").parse_startup(""), [])  # fmt: skip
        reached: list[Any] = []
        monkeypatch.setattr(cloud_up, "open_pod_agent",
                            lambda _s, target, *_a: reached.append(target) or nullcontext(agent))
        monkeypatch.setattr(cloud_up, "arm_deadman", lambda *_a: {"armed": True, "pid": 1})
        monkeypatch.setattr(cloud_up, "start_arm", lambda *_a: started)
        cfg = EngineConfig(engine="vllm", model="org/m")
        record, info = cloud_up.up_cloud(settings, cfg, ledger, lambda _l: None, preflight=False)
        assert reached and reached[0].host  # joined the tailnet: the start script ran
        pod = sb.cloud.pods[f"runpod:{record.pod_id}"]
        assert pod.meta["argv"][:2] == ["/bin/sh", "-c"] and not pod.meta["crashing"]
        assert record.price_per_hr == 0.40 and info.state is PodState.RUNNING
        assert info.detail["requested"] == "NVIDIA A40"  # what only the create knew is kept
        from tailpod.provision.teardown import down_remote

        down_remote(settings, ledger, record)

        monkeypatch.setattr(runpod_provider, "start_command_args",
                            lambda argv, _entry=None: shlex.join(argv))  # the old form
        with pytest.raises(TailpodError) as failed:
            cloud_up.up_cloud(settings, cfg, ledger, lambda _l: None, preflight=False)
        text = failed.value.message
        assert text.startswith("the image's ENTRYPOINT rejected the start command")
        assert "unrecognized arguments" in text and "billing proven stopped" in text
        assert "auth key" not in (failed.value.hint or "")
        tag = next(r.run_tag for r in ledger.all() if r.run_tag != record.run_tag)
        kept = settings.results_dir / tag / bootlog.LOG_FILE
        assert "unrecognized arguments" in kept.read_text()
        assert sb.meter()["billing_count"] == 0
    finally:
        sb.close()


def test_a_pod_whose_sshd_fails_says_so_through_its_log_not_the_tailnet_hint(
    tmp_path: Path, tailpod_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The sandbox pod records "sshd did not start" in its container log, as the start script
    would; `up` shows it, names the cause, and leaves out the auth-key hint (issue 13)."""
    from tailpod.sandbox import sshd as sandbox_sshd

    def no_sshd(*_a: Any, **_k: Any) -> Any:
        raise TailpodError("/usr/sbin/sshd is not installed")

    monkeypatch.setattr(sandbox_sshd, "start_sshd_host", no_sshd)
    sb = start_sandbox(sshd=True, start_delay_s=0.1, workdir=tmp_path / "sandbox")
    try:
        settings = up_settings(sb, tailpod_home)
        monkeypatch.setattr(cloud_up, "pinned_image", lambda *_a: (VLLM_PINNED, None))
        monkeypatch.setattr(cloud_up, "RUNNING_POLL_S", 0.2)
        monkeypatch.setattr(cloud_up, "boot_wait_seconds", lambda *_a: 4.0)  # the tailnet wait
        with pytest.raises(TailpodError) as failed:
            cloud_up.up_cloud(settings, EngineConfig(engine="vllm", model="org/m"),
                              Ledger(settings.state_dir), lambda _l: None, preflight=False)
        assert failed.value.message.startswith("sshd did not start in the pod")
        assert "tailpod-start: sshd did not start: /usr/sbin/sshd is not installed" \
            in failed.value.message
        assert "did not join the tailnet" in failed.value.message  # what timed out, still said
        assert "auth key" not in (failed.value.hint or "")
        assert sb.meter()["billing_count"] == 0
    finally:
        sb.close()
