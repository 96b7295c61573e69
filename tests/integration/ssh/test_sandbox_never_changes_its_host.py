"""A sandbox pod is a process on this machine: what its agent would install over SSH (HAProxy for
the lanes, tailpod/agent/bootstrap/haproxy.py) never reaches this machine's package manager
(issue 38 item 9). The pod's SSH session finds the sandbox's refusing `apt-get` and `sudo` first
(tailpod/sandbox/shims.py), and the agent says the pod cannot install HAProxy.

This machine's own `apt-get` and `sudo` are played by recorders first on the sandbox's PATH; the
test looks at which `apt-get` a session finds before it runs anything, so on a sandbox that would
reach the real one it fails without running it."""

from __future__ import annotations

import json
import os
import shlex
import sys
from pathlib import Path
from types import SimpleNamespace

import paramiko
import pytest

from tailpod.sandbox.sshd import SshdPodHost, container_session_env, start_sshd_host
from tests import paths

# The agent's proxy-prepare step on a pod without HAProxy (find_haproxy answers None whether or
# not this machine has one), as the user `euid` names: root runs apt-get, others sudo -n apt-get.
PREPARE = """
import json, os, sys
from pathlib import Path
sys.path.insert(0, {repo!r})
from tailpod.agent.bootstrap import haproxy
haproxy.find_haproxy = lambda: None
os.geteuid = lambda: {euid}
try:
    haproxy.prepare("global\\n", Path({state!r}))
    print(json.dumps({{"ok": True}}))
except haproxy.EngineStartError as exc:
    print(json.dumps({{"ok": False, "message": str(exc), "tail": exc.tail}}))
"""


def _recorders(bin_dir: Path, log: Path) -> None:
    bin_dir.mkdir()
    for name in ("apt-get", "sudo"):
        path = bin_dir / name
        path.write_text(f'#!/bin/sh\necho "{name} $*" >> "{log}"\nexit 0\n')
        path.chmod(0o755)


def _run(client: paramiko.SSHClient, command: str) -> tuple[int, str, str]:
    _, out, err = client.exec_command(command, timeout=60)
    code = out.channel.recv_exit_status()
    return code, out.read().decode(), err.read().decode()


@pytest.mark.parametrize("euid", [0, 1000], ids=["root", "not-root"])
def test_the_lanes_proxy_step_installs_nothing_on_the_sandbox_host(
    need_sshd: None, tmp_path: Path, user_key: Path, monkeypatch: pytest.MonkeyPatch, euid: int
) -> None:
    log = tmp_path / "host-package-manager.log"
    _recorders(tmp_path / "host-bin", log)
    monkeypatch.setenv("PATH", f"{tmp_path / 'host-bin'}{os.pathsep}{os.environ['PATH']}")
    podhost = SshdPodHost(tmp_path / "sandbox")
    pod = SimpleNamespace(key="runpod:pod-1", provider="runpod", pod_id="pod-1")
    pub = (user_key.parent / (user_key.name + ".pub")).read_text()
    sshd = start_sshd_host(tmp_path / "pod-sshd", pub,
                           session_env=container_session_env(podhost, pod))  # type: ignore[arg-type]
    client = paramiko.SSHClient()
    client.set_missing_host_key_policy(paramiko.AutoAddPolicy())  # noqa: S507 - loopback test sshd
    try:
        client.connect(sshd.host, sshd.port, username=sshd.user, key_filename=str(user_key),
                       look_for_keys=False, allow_agent=False, timeout=10)
        shims = str(podhost.inner.shim_dir)
        for name in ("apt-get", "sudo"):
            code, found, _ = _run(client, f"command -v {name}")
            assert code == 0 and found.strip() == f"{shims}/{name}", (name, found)

        state = tmp_path / "proxy"
        script = PREPARE.format(repo=str(paths.REPO), euid=euid, state=str(state))
        code, out, err = _run(client, f"{shlex.quote(sys.executable)} -I -c {shlex.quote(script)}")
        assert code == 0, err
        result = json.loads(out.strip().splitlines()[-1])
    finally:
        client.close()
        sshd.stop()

    assert not log.exists(), log.read_text()  # this machine's apt-get and sudo were never run
    assert result["ok"] is False
    refused_by = "apt-get" if euid == 0 else "sudo"
    assert result["message"] == ("haproxy is not installed and this pod cannot install it: "
                                 + ("" if euid == 0 else "sudo -n ")
                                 + f"apt-get update exited {100 if euid == 0 else 1}")
    assert any(line.startswith(f"sandbox: {refused_by} refused") for line in result["tail"])
    assert not (state / "haproxy.cfg").exists()
