"""The pod agent masks the pod's own credentials by VALUE in everything it sends back (issue 38
item 4; adversary F5, #39): the pod-scoped key RunPod injects (RUNPOD_API_KEY), vast's
CONTAINER_API_KEY and the HF token, whether the agent's environment holds them or the env file
the pod's start script kept (SSH sessions do not inherit the container's environment). The
engine here prints them as httpx's debug log, a header, JSON and glued to a name by `_`; the
keys hold `_` and `-` and no known prefix, so only their value can find them."""

from __future__ import annotations

import json
import os
import secrets
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from tailpod.agent_client import build as agent_build


@pytest.fixture(scope="module")
def pyz(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return agent_build.build_agent(tmp_path_factory.mktemp("agent")).path


def _key(tag: str) -> str:
    return f"{tag}_{secrets.token_urlsafe(12)}-{secrets.token_hex(4)}_z"


ENGINE = (
    "import http.server, json, os, sys\n"
    "k = os.environ.get('RUNPOD_API_KEY', ''); c = os.environ.get('CONTAINER_API_KEY', '')\n"
    "h = os.environ.get('HF_TOKEN', '')\n"
    "print(\"DEBUG httpx headers={'Authorization': 'Bearer %s'}\" % k, flush=True)\n"
    "print('Authorization: Bearer ' + c, flush=True)\n"
    "print(json.dumps({'hub': {'tok': h}}), flush=True)\n"
    "print('RUNPOD_API_KEY_' + k + ' CONTAINER_' + c, flush=True)\n"
    "if sys.argv[2] == 'die': raise SystemExit('fatal: key ' + k + ' rejected, hub ' + h)\n"
    "class H(http.server.BaseHTTPRequestHandler):\n"
    "    def do_GET(self):\n"
    "        self.send_response(200); self.end_headers(); self.wfile.write(b'{}')\n"
    "    def log_message(self, *a): pass\n"
    "http.server.HTTPServer(('127.0.0.1', int(sys.argv[1])), H).serve_forever()\n"
)


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.mark.parametrize("mode", ["serve", "die"])
def test_the_pod_credentials_never_leave_the_pod_through_the_agent(
        pyz: Path, tmp_path: Path, mode: str) -> None:
    pod_key, container_key, hf = _key("pod"), _key("inst"), _key("hub")
    state_dir = tmp_path / "state"
    state_dir.mkdir()
    # The container key reaches the engine only through the env file (as on a pod whose SSH
    # session lacks the container's environment); the pod key and HF token through the agent's.
    env_file = state_dir / "pod.env"
    env_file.write_text(f"CONTAINER_API_KEY={container_key}\nOTHER=1\n")
    server = tmp_path / "engine.py"
    server.write_text(ENGINE)
    port = _port()
    plan = {"argv": [sys.executable, str(server), str(port), mode], "port": port,
            "label": "plain"}
    env = {**os.environ, "RUNPOD_API_KEY": pod_key, "HF_TOKEN": hf}
    outputs = []
    for verb, payload in ((["engine", "start"], {"state_dir": str(state_dir), "plan": plan,
                                                 "timeout": 60, "env_file": str(env_file)}),
                          (["engine", "status"], {"state_dir": str(state_dir)}),
                          (["engine", "stop"], {"state_dir": str(state_dir)})):
        proc = subprocess.run([sys.executable, "-I", str(pyz), *verb], input=json.dumps(payload),
                              capture_output=True, text=True, timeout=120, env=env,
                              cwd=tmp_path)
        outputs += [proc.stdout, proc.stderr]
        if verb == ["engine", "start"]:
            envelope = json.loads(proc.stdout.splitlines()[-1])
            assert envelope["ok"] is (mode == "serve"), envelope
            # the engine really printed them (the log is kept, only the values are masked)
            shown = (envelope["result"]["log_text"] if mode == "serve"
                     else "\n".join(envelope["error"]["tail"]))
            assert "Authorization: Bearer ***" in shown, shown
    log = (state_dir / "engine-plain.log").read_text()
    assert pod_key in log and container_key in log  # the planted values really were printed
    for text in outputs:
        for value in (pod_key, container_key, hf):
            assert value not in text
