"""Fixtures for the dead-man switch: a sandbox cloud, pods with their injected env, the daemon."""

from __future__ import annotations

import contextlib
import functools
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest

from tailpod.agent_client import build as agent_build
from tailpod.sandbox import Sandbox
from tailpod.sandbox.model import SandboxPod

PROVIDERS = ["runpod", "vastai"]
SANDBOX_NAME = {"runpod": "runpod", "vastai": "vast"}
# Fast settings for tests: poll 0.1 s, first retry 0.1 s, backoff capped at 0.5 s.
FAST = ["--poll", "0.1", "--retry-base", "0.1", "--max-backoff", "0.5", "--http-timeout", "5"]


@functools.lru_cache(maxsize=1)
def agent_pyz() -> Path:
    """The built agent, as a pod runs it: `python3 -I agent.pyz deadman ...`."""
    return agent_build.build_agent().path


# The switch's argv-style options to the agent's JSON keys (docs/agent.md).
_BOOLEAN_FLAGS = {"--dry-run", "--no-preflight"}
_VERB = {"beat": "heartbeat"}


def deadman(*args: str, env: dict[str, str] | None = None,
            timeout: float = 20) -> subprocess.CompletedProcess[str]:
    """The switch through the built agent: `run` is the daemon's own argv; `arm`, `beat`,
    `status` and `disarm` send their options as JSON on stdin (the verbs the driver uses)."""
    command, options = args[0], list(args[1:])
    if command == "run":
        argv, stdin = [sys.executable, "-I", str(agent_pyz()), "deadman", "run", *options], ""
    else:
        payload: dict[str, Any] = {}
        while options:
            flag = options.pop(0)
            key = flag[2:].replace("-", "_")
            payload[key] = True if flag in _BOOLEAN_FLAGS else options.pop(0)
        argv = [sys.executable, "-I", str(agent_pyz()), "deadman", _VERB.get(command, command)]
        stdin = json.dumps(payload)
    return subprocess.run(argv, input=stdin, env=env or clean_env(), capture_output=True,
                          text=True, timeout=timeout)


def last_json(text: str) -> dict[str, Any]:
    """The answer on the last line of stdout: an agent envelope's result, or its error as the
    switch reported it ({"error": message})."""
    data = dict(json.loads(text.strip().splitlines()[-1]))
    if "agent" in data and "verb" in data:
        return dict(data["result"]) if data["ok"] else {"error": data["error"]["message"]}
    return data


def wait_for(predicate: Callable[[], Any], timeout: float, interval: float = 0.05) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    raise AssertionError(f"condition not met within {timeout} s")


@dataclass
class Pod:
    """A sandbox pod as its container sees itself: provider, id and the injected environment."""

    provider: str  # "runpod" | "vastai"
    pod_id: str
    record: SandboxPod
    api_url: str
    account_key: str

    @property
    def env(self) -> dict[str, str]:
        """The container's environment, read like /proc/1/environ."""
        raw = Path(f"/proc/{self.record.pid}/environ").read_bytes()
        return dict(item.split("=", 1) for item in raw.decode().split("\0") if "=" in item)

    @property
    def environ_path(self) -> str:
        return f"/proc/{self.record.pid}/environ"

    @property
    def pod_key(self) -> str:
        return str(self.record.meta["pod_key"])

    def billing(self, sb: Sandbox) -> bool:
        name = SANDBOX_NAME[self.provider]
        return any(r["provider"] == name and r["id"] == self.pod_id for r in sb.billing_now())


def create_pod(sb: Sandbox, provider: str, command: str = "sleep 120",
               env: dict[str, str] | None = None) -> Pod:
    """Rent a pod through the sandbox API with the account key, as tailpod would."""
    if provider == "runpod":
        r = httpx.post(sb.runpod_url + "/v2/pods", timeout=10,
                       headers={"Authorization": f"Bearer {sb.runpod_key}"},
                       json={"name": f"tailpod-dm-{time.time_ns()}", "image": "sandbox/img",
                             "gpu": {"id": "NVIDIA A40", "count": 1}, "args": command,
                             "env": env or {}, "ports": ["22/tcp"]})
        assert r.status_code == 201, r.text
        pod_id, url, key = str(r.json()["id"]), sb.runpod_url, sb.runpod_key
    else:
        headers = {"Authorization": f"Bearer {sb.vast_key}"}
        offers = httpx.post(sb.vast_url + "/api/v0/bundles/", headers=headers, timeout=10,
                            json={"rented": {"eq": False}}).json()["offers"]
        r = httpx.put(f"{sb.vast_url}/api/v0/asks/{offers[0]['id']}/", headers=headers,
                      timeout=10, json={"image": "sandbox/img", "disk": 10, "onstart": command,
                                        "env": env or {}, "label": "tailpod-dm"})
        assert r.status_code == 200, r.text
        body = r.json()
        pod_id, url, key = str(body["new_contract"]), sb.vast_url, sb.vast_key
        # what vast hands back at create is the key the container gets
        assert body["instance_api_key"]
    record = sb.cloud.pods[f"{SANDBOX_NAME[provider]}:{pod_id}"]
    if provider == "vastai":
        assert body["instance_api_key"] == record.meta["pod_key"]
    if command:
        wait_for(lambda: record.pid is not None, 5)
    return Pod(provider, pod_id, record, url, key)


@dataclass
class Daemons:
    """Starts the agent's dead-man daemons and makes sure none outlives its test."""

    tmp: Path
    procs: list[subprocess.Popen[str]] = field(default_factory=list)
    state_files: list[Path] = field(default_factory=list)

    def paths(self, name: str = "dm") -> tuple[Path, Path]:
        base = self.tmp / name
        base.mkdir(parents=True, exist_ok=True)
        return base / "heartbeat", base / "deadman.log"

    def run(self, pod: Pod, *, ttl_at: float = 0.0, timeout: float = 0.0, name: str = "dm",
            extra: list[str] | None = None, env: dict[str, str] | None = None,
            environ_from: str | None = None) -> tuple[subprocess.Popen[str], Path, Path]:
        """`deadman run` in the foreground, credentials only through the pod's environ."""
        heartbeat, log = self.paths(name)
        argv = [sys.executable, "-I", str(agent_pyz()), "deadman", "run", "--provider", pod.provider,
                "--ttl-at", str(ttl_at), "--heartbeat-file", str(heartbeat),
                "--heartbeat-timeout", str(timeout), "--api-url", pod.api_url,
                "--log", str(log), "--environ-from",
                pod.environ_path if environ_from is None else environ_from,
                *FAST, *(extra or [])]
        proc = subprocess.Popen(argv, env=env if env is not None else clean_env(),
                                stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, text=True, start_new_session=True)
        self.procs.append(proc)
        self.state_files.append(Path(str(heartbeat) + ".deadman.json"))
        return proc, heartbeat, log

    def track(self, heartbeat: Path) -> None:
        self.state_files.append(Path(str(heartbeat) + ".deadman.json"))

    def cleanup(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout=5)
        for state_file in self.state_files:  # daemons started detached by `arm`
            with contextlib.suppress(OSError, ValueError):
                pid = json.loads(state_file.read_text())["pid"]
                cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
                if b"deadman" in cmdline:
                    os.kill(pid, signal.SIGKILL)


def clean_env() -> dict[str, str]:
    """An environment without any provider credential (they come from --environ-from)."""
    return {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "LANG": "C.UTF-8"}


@pytest.fixture()
def daemons(tmp_path: Path) -> Iterator[Daemons]:
    d = Daemons(tmp_path / "daemons")
    try:
        yield d
    finally:
        d.cleanup()


def read_state(heartbeat: Path) -> dict[str, Any]:
    return dict(json.loads(Path(str(heartbeat) + ".deadman.json").read_text()))


def wait_armed(proc: subprocess.Popen[str], heartbeat: Path, guard_s: float = 120.0) -> None:
    """Until the daemon records `armed`. It touches the heartbeat file first and writes its state
    file after (tailpod/agent/bootstrap/deadman.py, `Daemon.run`), so no state file yet means not
    yet; and how long a Python start takes on a loaded machine is no part of the test: a daemon
    that exits first fails at once with its output, and `guard_s` only ends a hang."""
    state_file = Path(str(heartbeat) + ".deadman.json")
    deadline = time.monotonic() + guard_s
    while not (state_file.exists() and read_state(heartbeat)["state"] == "armed"):
        if proc.poll() is not None:
            out = proc.stdout.read() if proc.stdout else ""
            raise AssertionError(f"the daemon exited {proc.returncode} before arming: {out}")
        if time.monotonic() > deadline:
            raise AssertionError(f"the daemon did not arm within {guard_s} s")
        time.sleep(0.05)
