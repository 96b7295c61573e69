"""The laptop side of the switch: what the driver asks the pod agent, run here for real, and the
stage-0 guard packed into the start command."""

from __future__ import annotations

import json
import os
import shlex
import time
from pathlib import Path

import httpx
import pytest

from tailpod.agent_client.driver import PodAgent, SubprocessTransport
from tailpod.config import Settings, load_settings, ttl_deadline
from tailpod.errors import ConfigError
from tailpod.pods import deadman_control as dc
from tailpod.sandbox import Sandbox

from .conftest import FAST, Daemons, clean_env, create_pod, deadman, last_json, wait_for


def local_agent(state_dir: Path) -> PodAgent:
    """The driver with the agent as a child process, as `--provider local` runs it; the
    environment carries no credential (the switch reads the pod's environ file)."""
    return PodAgent(SubprocessTransport(state_dir, env=clean_env()))


def fast(settings_timeout: str, tmp_path: Path) -> Settings:
    return load_settings(env={"TAILPOD_HEARTBEAT_TIMEOUT": settings_timeout},
                         dotenv_path=tmp_path / "absent.env")  # fmt: skip


FAST_OPTIONS = {"poll": 0.1, "retry_base": 0.1, "max_backoff": 0.5, "http_timeout": 5}


def test_the_driver_arms_beats_and_lets_the_pod_end_itself(
    sandbox: Sandbox, daemons: Daemons, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pod = create_pod(sandbox, "runpod")
    agent = local_agent(tmp_path / "pod-root" / ".tailpod")
    layout = agent.deadman_layout
    daemons.track(Path(layout.heartbeat))
    settings = fast("60", tmp_path)
    request = dc.arm_request(settings, "runpod", 0, layout, environ_from=pod.environ_path,
                             **FAST_OPTIONS)  # fmt: skip
    # Settings refuse < 60 s; the switch itself does not. 5 s leaves room for a beat's agent
    # start on a loaded machine (each beat is a process start, as over SSH).
    request["heartbeat_timeout"] = 5.0
    request["api_url"] = pod.api_url
    assert pod.pod_key not in json.dumps(request)
    armed = agent.deadman_arm(request)
    assert armed["armed"] and armed["pid"] and armed["preflight"] == "ok"

    beats_until = time.monotonic() + 6.0  # beats for longer than the timeout keep the pod
    while time.monotonic() < beats_until:
        beat = agent.deadman_heartbeat()
        assert beat["armed"] and beat["state"] == "armed" and beat["heartbeat_age_s"] is not None
        time.sleep(0.2)
    assert pod.billing(sandbox)

    wait_for(lambda: not pod.billing(sandbox), 20)  # silence: the pod ends itself
    final = wait_for(lambda: (s := agent.deadman_status())["state"] == "terminated" and s, 20)
    assert not final["armed"] and "heartbeat" in (final["reason"] or "")
    assert sandbox.meter()["billing_count"] == 0
    assert pod.pod_key not in Path(layout.log).read_text()


def test_the_arm_request_carries_no_secret(tmp_path: Path) -> None:
    layout = dc.DeadmanLayout("/root/.tailpod")
    settings = fast("1800", tmp_path)
    arm = dc.arm_request(settings, "vast", 1_800_000_000.5, layout)
    assert arm["provider"] == "vastai" and arm["ttl_at"] == 1_800_000_000.5
    assert arm["heartbeat_file"] == "/root/.tailpod/heartbeat"
    assert arm["log"] == "/root/.tailpod/deadman.log"
    assert arm["heartbeat_timeout"] == 1800 and arm["environ_from"] == "/proc/1/environ"
    assert arm["api_url"] == settings.vast_url
    assert not any("key" in k.lower() for k in arm)
    with pytest.raises(ConfigError):
        dc.provider_name("local")
    with pytest.raises(ConfigError):
        dc.arm_request(fast("0", tmp_path), "runpod", 0, layout)


def test_heartbeat_timeout_setting(tmp_path: Path) -> None:
    def settings(**env: str):  # noqa: ANN202
        return load_settings(env=env, dotenv_path=tmp_path / "absent.env")

    assert settings().heartbeat_timeout_s == 1800.0
    s = settings(TAILPOD_HEARTBEAT_TIMEOUT="900", TAILPOD_RUNPOD_URL="http://127.0.0.1:9")
    assert dc.heartbeat_timeout_for(s) == 900.0
    arm = dc.arm_request(s, "runpod", 1_800_000_000.0, dc.DeadmanLayout())
    assert arm["heartbeat_timeout"] == 900.0 and arm["api_url"] == "http://127.0.0.1:9"
    assert dc.heartbeat_timeout_for(settings(TAILPOD_HEARTBEAT_TIMEOUT="0")) == 0.0
    with pytest.raises(ConfigError):
        dc.heartbeat_timeout_for(settings(TAILPOD_HEARTBEAT_TIMEOUT="5"))
    with pytest.raises(ConfigError):
        settings(TAILPOD_HEARTBEAT_TIMEOUT="soon")


def test_ttl() -> None:
    assert ttl_deadline(2, 1000.0) == 1000.0 + 2 * 60 * 60
    assert ttl_deadline(0.5, 1000.0) == 1000.0 + 30 * 60
    assert ttl_deadline(0, 1000.0) is None  # --ttl-hours 0: no TTL, accepted explicitly
    with pytest.raises(ConfigError):
        ttl_deadline(-1, 1000.0)


# -- stage 0: the guard in the pod's start command ---------------------------------------------------
def guarded(sb: Sandbox, provider: str, layout: dc.DeadmanLayout, ttl_at: float,
            timeout: float) -> str:
    url = sb.runpod_url if provider == "runpod" else sb.vast_url
    argv = dc.guarded_start_command(["sleep", "120"], provider, ttl_at, timeout, url,
                                    layout=layout, poll_s=0.1, retry_s=0.1)
    return shlex.join(argv)


@pytest.mark.parametrize("provider", ["runpod", "vastai"])
def test_start_guard_ends_a_pod_that_never_got_its_ssh_bootstrap(
    sandbox: Sandbox, tmp_path: Path, provider: str
) -> None:
    layout = dc.DeadmanLayout(str(tmp_path / "guard"))
    ttl_at = time.time() + 1.5
    pod = create_pod(sandbox, provider, command=guarded(sandbox, provider, layout, ttl_at, 0))
    # Whether the pod still bills once create_pod returns depends on how long a loaded machine
    # took to start it; the sandbox's own record of when it ended does not.
    wait_for(lambda: not pod.billing(sandbox), 10)
    assert time.time() >= ttl_at
    assert (pod.record.terminated_at or 0.0) >= ttl_at  # billed until its TTL, not ended before
    assert pod.record.status == "terminated" and sandbox.meter()["billing_count"] == 0


def guard_running(layout: dc.DeadmanLayout) -> bool:
    """A live stage-0 guard watches this layout's heartbeat file: its argv (`python -c <code>
    provider ttl timeout heartbeat api`) names the file; a guard that returned leaves at most a
    zombie, whose command line is empty."""
    for proc in Path("/proc").iterdir():
        try:
            argv = (proc / "cmdline").read_bytes().split(b"\0") if proc.name.isdigit() else []
        except OSError:
            continue  # the process ended while we looked
        if argv[1:2] == [b"-c"] and layout.heartbeat.encode() in argv[2:]:
            return True
    return False


def guard_attempted(layout: dc.DeadmanLayout) -> bool:
    """The guard logged a termination attempt (one line each, guard.py)."""
    return Path(layout.heartbeat + ".guard.log").exists()


def test_start_guard_heartbeat_and_standing_down(sandbox: Sandbox, daemons: Daemons,
                                                 tmp_path: Path) -> None:
    """Synchronised on what the guards do (a guard process exits, a guard logs its attempt), not
    on elapsed time: a stalled thread on a loaded machine cannot make a beat late."""
    # Pod A: a fresh heartbeat keeps it; silence ends it. Its beat is dated an hour ahead, so it
    # stays fresh however long setting B and C up takes; the test silences it when it chooses.
    timeout_a = 1.0
    layout_a = dc.DeadmanLayout(str(tmp_path / "a"))
    heartbeat_a = Path(layout_a.heartbeat)
    heartbeat_a.parent.mkdir(parents=True, exist_ok=True)
    heartbeat_a.touch()
    ahead = time.time() + 3600
    os.utime(heartbeat_a, (ahead, ahead))
    a = create_pod(sandbox, "vastai", command=guarded(sandbox, "vastai", layout_a, 0, timeout_a))
    # Pod B: `disarm` stands its guard down. Pod C: the full switch, once armed, takes over. Their
    # heartbeat timeout and TTL are far off: each is shown standing down by its guard exiting.
    layout_b = dc.DeadmanLayout(str(tmp_path / "b"))
    b = create_pod(sandbox, "vastai", command=guarded(sandbox, "vastai", layout_b, 0, 600))
    layout_c = dc.DeadmanLayout(str(tmp_path / "c"))
    c = create_pod(sandbox, "runpod",
                   command=guarded(sandbox, "runpod", layout_c, time.time() + 600, 0))
    for layout in (layout_a, layout_b, layout_c):
        wait_for(lambda layout=layout: guard_running(layout), 20)
    a_guard_seen = time.monotonic()
    disarm = deadman("disarm", "--heartbeat-file", layout_b.heartbeat)
    assert disarm.returncode == 0
    daemons.track(Path(layout_c.heartbeat))
    arm = deadman("arm", "--provider", "runpod", "--ttl-at", str(time.time() + 3600),
                  "--heartbeat-file", layout_c.heartbeat, "--heartbeat-timeout", "600",
                  "--api-url", c.api_url, "--environ-from", c.environ_path, *FAST)
    assert arm.returncode == 0 and last_json(arm.stdout)["armed"], arm.stdout + arm.stderr
    wait_for(lambda: not guard_running(layout_b) and not guard_running(layout_c), 20)
    assert b.billing(sandbox) and c.billing(sandbox)  # both guards returned without firing
    assert not guard_attempted(layout_b) and not guard_attempted(layout_c)
    # A's guard has watched for several of its timeouts (a lower bound, so load cannot fail it)
    # and the fresh heartbeat kept the pod.
    time.sleep(max(0.0, a_guard_seen + 3 * timeout_a - time.monotonic()))
    assert guard_running(layout_a) and a.billing(sandbox) and not guard_attempted(layout_a)
    silent_since = time.time()
    os.utime(heartbeat_a, (silent_since, silent_since))  # the last beat, then silence
    wait_for(lambda: not a.billing(sandbox), 20)
    # the sandbox's own record: the terminate came a full timeout after the last beat, not before
    assert (a.record.terminated_at or 0.0) >= silent_since + timeout_a


def test_start_guard_kills_its_pod_when_rest_refuses_the_pod_key(
    sandbox: Sandbox, tmp_path: Path
) -> None:
    """Whether REST v2 takes the pod-scoped key is undocumented: with the sandbox refusing it on
    every REST route, the guard's termination table still ends the pod (through GraphQL)."""
    sandbox.cloud.refuse_pod_key_on_rest = True
    layout = dc.DeadmanLayout(str(tmp_path / "guard"))
    ttl_at = time.time() + 1.0
    pod = create_pod(sandbox, "runpod", command=guarded(sandbox, "runpod", layout, ttl_at, 0))
    refused = httpx.delete(f"{sandbox.runpod_url}/v2/pods/{pod.pod_id}", timeout=10,
                           headers={"Authorization": f"Bearer {pod.pod_key}"})
    assert refused.status_code == 403  # the switch is on: REST will not do it
    wait_for(lambda: not pod.billing(sandbox), 15)
    assert pod.record.status == "terminated" and sandbox.meter()["billing_count"] == 0
    # the guard ended it when its TTL came, not before (a lower bound: load cannot fail it)
    assert (pod.record.terminated_at or 0.0) >= ttl_at


def test_guard_walks_deadman_termination_table_and_fits_vast_onstart() -> None:
    """One table for guard and daemon; the guarded start command stays within vast.ai's
    4048-character `onstart` limit (vast-ai/docs API reference) with room for longer tags."""
    from tailpod.agent.bootstrap.terminate import TERMINATE_ROUTES
    from tailpod.pods.start_command import start_command

    for provider in ("runpod", "vastai"):
        code = dc.guard_code(provider)
        compile(code, "guard", "exec")
        for method, path, _body in TERMINATE_ROUTES[provider]:
            assert repr(method) in code and repr(path) in code
    argv = dc.guarded_start_command(
        start_command("tp-20261201-153000-abcd", ["tag:tailpod", "tag:gpu-bench"]), "vastai",
        time.time() + 4 * 3600, 1800, "https://console.vast.ai",
        layout=dc.DeadmanLayout(remote_dir="~/.tailpod"))
    onstart = shlex.join(argv)
    assert len(onstart) <= 4048 - 40, len(onstart)
