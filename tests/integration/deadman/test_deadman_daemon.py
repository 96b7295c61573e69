"""The switch's own behaviour: arm/beat/status/disarm, secrecy, dry runs, odd API answers."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from tailpod.sandbox import Sandbox

from .conftest import (
    FAST,
    Daemons,
    agent_pyz,
    clean_env,
    create_pod,
    deadman,
    last_json,
    read_state,
    wait_armed,
    wait_for,
)


def test_help_runs_with_a_bare_python() -> None:
    # `python3 -I -S`: no site-packages, no PYTHONPATH — what a pod's system Python offers.
    out = subprocess.run(["python3", "-I", "-S", str(agent_pyz()), "deadman", "run", "--help"],
                         capture_output=True, text=True, timeout=20)
    assert out.returncode == 0, out.stderr
    for word in ("--provider", "--ttl-at", "--heartbeat-file", "--heartbeat-timeout",
                 "--api-url", "--environ-from", "--dry-run"):
        assert word in out.stdout


def test_arm_beat_status_rearm_disarm_and_no_secret_anywhere(
    sandbox: Sandbox, daemons: Daemons, tmp_path: Path
) -> None:
    pod = create_pod(sandbox, "runpod")
    heartbeat, log = daemons.paths("arm")
    daemons.track(heartbeat)
    secret = pod.pod_key
    env = {**clean_env(), "RUNPOD_POD_ID": pod.pod_id, "RUNPOD_API_KEY": secret}
    arm = ["arm", "--provider", "runpod", "--ttl-at", str(time.time() + 3600),
           "--heartbeat-file", str(heartbeat), "--heartbeat-timeout", "600",
           "--api-url", pod.api_url, "--log", str(log), "--environ-from", "", *FAST]
    first = deadman(*arm, env=env)
    assert first.returncode == 0, first.stdout + first.stderr
    armed = last_json(first.stdout)
    assert armed["armed"] is True and armed["already"] is False
    assert armed["preflight"] == "ok"
    pid = armed["pid"]

    # The credential is in the daemon's environment, and nowhere else.
    cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    assert b"deadman" in cmdline and secret.encode() not in cmdline
    assert secret.encode() in Path(f"/proc/{pid}/environ").read_bytes()
    assert os.getsid(pid) == pid  # its own session: an SSH hang-up cannot reach it

    # Beat: touches the file and reports the switch.
    os.utime(heartbeat, (time.time() - 100, time.time() - 100))
    beat = deadman("beat", "--heartbeat-file", str(heartbeat))
    status = last_json(beat.stdout)
    assert status["beat"] and status["armed"] and status["pid"] == pid
    assert status["heartbeat_age_s"] < 5 and 3500 < status["ttl_left_s"] <= 3600
    assert time.time() - heartbeat.stat().st_mtime < 5

    # Same settings again: left alone. Other settings: replaced.
    again = last_json(deadman(*arm, env=env).stdout)
    assert again["already"] is True and again["pid"] == pid
    other = [*arm[:arm.index("--heartbeat-timeout") + 1], "900",
             *arm[arm.index("--heartbeat-timeout") + 2:]]
    replaced = last_json(deadman(*other, env=env).stdout)
    assert replaced["armed"] and replaced["replaced"] == pid and replaced["pid"] != pid
    wait_for(lambda: not Path(f"/proc/{pid}").exists() or
             Path(f"/proc/{pid}/stat").read_text().split(") ")[1][0] == "Z", 5)

    disarmed = last_json(deadman("disarm", "--heartbeat-file", str(heartbeat)).stdout)
    assert disarmed["disarmed"] and disarmed["pid"] == replaced["pid"]
    after = last_json(deadman("status", "--heartbeat-file", str(heartbeat)).stdout)
    assert after["running"] is False and after["state"] == "stopped"
    assert pod.billing(sandbox)  # disarming never touches the pod

    for path in (log, Path(str(heartbeat) + ".deadman.json")):
        assert secret not in path.read_text()
    for out in (first, beat):
        assert secret not in out.stdout + out.stderr


def test_a_firing_switch_logs_no_secret_even_when_the_api_echoes_it(
    daemons: Daemons, tmp_path: Path
) -> None:
    secret = "rpa_pod_ECHOED_SECRET_0123456789"
    with fake_api([(500, {"error": f"bad key {secret}"}), (404, {"detail": "gone"})]) as api:
        env = {**clean_env(), "RUNPOD_POD_ID": "pod123", "RUNPOD_API_KEY": secret}
        heartbeat, log = daemons.paths("echo")
        out = deadman("run", "--provider", "runpod", "--ttl-at", "1", "--heartbeat-file",
                      str(heartbeat), "--heartbeat-timeout", "0", "--api-url", api.url,
                      "--log", str(log), "--environ-from", "", *FAST, env=env)
    assert out.returncode == 0
    text = log.read_text() + Path(str(heartbeat) + ".deadman.json").read_text()
    assert "bad key ***" in text and secret not in text
    assert api.requests[0]["authorization"] == f"Bearer {secret}"


def test_the_start_script_arms_it_and_the_pod_ends_itself(
    sandbox: Sandbox, daemons: Daemons, tmp_path: Path
) -> None:
    """No SSH at all (the laptop died right after create): the start script's switch fires."""
    heartbeat, log = daemons.paths("onstart")
    daemons.track(heartbeat)
    payload = {"provider": "vast", "ttl_at": 0, "heartbeat_file": str(heartbeat),
               "heartbeat_timeout": 1, "api_url": sandbox.vast_url, "log": str(log),
               "poll": 0.1, "retry_base": 0.1, "max_backoff": 0.5, "http_timeout": 5,
               "python": "python3"}
    arm = (f"printf %s {shlex.quote(json.dumps(payload))} | "
           f"{shlex.join(['python3', '-I', str(agent_pyz()), 'deadman', 'arm'])}")
    pod = create_pod(sandbox, "vastai", command=f"{arm} && sleep 120")
    wait_for(lambda: not pod.billing(sandbox), 15)
    assert pod.record.status == "terminated"
    wait_for(lambda: read_state(heartbeat)["state"] == "terminated", 10)
    assert "no heartbeat from tailpod" in log.read_text()
    assert sandbox.meter()["billing_count"] == 0


def test_dry_run_fires_without_calling_any_api(daemons: Daemons, tmp_path: Path) -> None:
    with fake_api([]) as api:
        heartbeat, log = daemons.paths("dry")
        out = deadman("run", "--provider", "vastai", "--ttl-at", str(time.time() + 0.3),
                      "--heartbeat-file", str(heartbeat), "--heartbeat-timeout", "0",
                      "--api-url", api.url, "--log", str(log), "--dry-run", "--environ-from",
                      "", *FAST)
    assert out.returncode == 0
    assert "dry run: would terminate vastai pod" in log.read_text()
    assert read_state(heartbeat)["state"] == "dry_run_fired"
    assert api.requests == []


def test_missing_credentials_are_named_not_guessed(daemons: Daemons, tmp_path: Path) -> None:
    heartbeat, log = daemons.paths("nocreds")
    out = deadman("run", "--provider", "vastai", "--ttl-at", "1", "--heartbeat-file",
                  str(heartbeat), "--heartbeat-timeout", "0", "--log", str(log),
                  "--environ-from", str(tmp_path / "absent"))
    assert out.returncode == 2
    assert "CONTAINER_ID and CONTAINER_API_KEY not set" in log.read_text()
    arm = deadman("arm", "--provider", "runpod", "--ttl-at", "1", "--heartbeat-file",
                  str(heartbeat), "--heartbeat-timeout", "0", "--environ-from", "")
    assert arm.returncode == 1 and "RUNPOD_POD_ID and RUNPOD_API_KEY" in arm.stdout


def test_credentials_from_an_environ_file(daemons: Daemons, tmp_path: Path) -> None:
    """SSH sessions may lack the container env: the switch reads /proc/1/environ-like files."""
    environ = tmp_path / "environ"
    environ.write_bytes(b"PATH=/bin\0CONTAINER_ID=4242\0CONTAINER_API_KEY=vast_inst_abcdef\0")
    with fake_api([(200, {"success": True}), (200, {"instances": None})]) as api:
        heartbeat, log = daemons.paths("environ")
        out = deadman("run", "--provider", "vast", "--ttl-at", "1", "--heartbeat-file",
                      str(heartbeat), "--heartbeat-timeout", "0", "--api-url", api.url,
                      "--log", str(log), "--environ-from", str(environ), *FAST)
    assert out.returncode == 0, log.read_text()
    assert [(r["method"], r["path"]) for r in api.requests] == [
        ("DELETE", "/api/v0/instances/4242/"), ("GET", "/api/v0/instances/4242/?owner=me")]
    assert api.requests[0]["authorization"] == "Bearer vast_inst_abcdef"


def test_odd_answers_never_crash_it(daemons: Daemons, tmp_path: Path) -> None:
    with fake_api([], name="elsewhere") as elsewhere, fake_api([
        (200, b"<html>not json</html>"),                    # success without a success flag
        ("close", None),                                     # connection dropped mid-answer
        (302, None, {"Location": elsewhere.url + "/steal"}),  # redirect: never followed
        (200, [1, 2, 3]),                                    # JSON of the wrong shape
        (502, b"\xff\xfe garbage"),                          # undecodable body
        (429, {"detail": "slow down"}, {"Retry-After": "Wed, 21 Oct 2015 07:28:00 GMT"}),
        (429, {"detail": "slow down"}, {"Retry-After": "soon"}),
        (200, {"success": True}),                           # accepted...
        (200, {"instances": "weird"}),                      # ...the check answers nonsense
        (200, {"success": False, "error": "no_such_instance"}),  # gone
    ]) as api:
        env = {**clean_env(), "CONTAINER_ID": "77", "CONTAINER_API_KEY": "vast_inst_odd123"}
        heartbeat, log = daemons.paths("odd")
        out = deadman("run", "--provider", "vastai", "--ttl-at", "1", "--heartbeat-file",
                      str(heartbeat), "--heartbeat-timeout", "0", "--api-url", api.url,
                      "--log", str(log), "--environ-from", "", *FAST, env=env)
    assert out.returncode == 0, log.read_text() + out.stderr
    assert "Traceback" not in out.stderr + log.read_text()
    assert len(api.requests) == 10 and elsewhere.requests == []
    assert read_state(heartbeat)["state"] == "terminated"


def test_a_signal_disarms_it_and_says_so(sandbox: Sandbox, daemons: Daemons) -> None:
    pod = create_pod(sandbox, "runpod")
    proc, heartbeat, log = daemons.run(pod, timeout=600)
    wait_armed(proc, heartbeat)
    proc.terminate()
    assert proc.wait(timeout=60) == 143  # the timeout only ends a hang
    assert "stopped by signal 15" in log.read_text()
    assert read_state(heartbeat)["state"] == "stopped"
    assert pod.billing(sandbox)


# -- a scripted fake API ---------------------------------------------------------------------------
class FakeApi:
    def __init__(self, script: list[tuple[Any, ...]]) -> None:
        self.script = list(script)
        self.requests: list[dict[str, Any]] = []
        self.url = ""


class _Ctx:
    def __init__(self, api: FakeApi, server: ThreadingHTTPServer) -> None:
        self.api, self.server = api, server

    def __enter__(self) -> FakeApi:
        return self.api

    def __exit__(self, *_exc: Any) -> None:
        self.server.shutdown()
        self.server.server_close()


def fake_api(script: list[tuple[Any, ...]], name: str = "fake") -> _Ctx:
    """A loopback server answering `script` in order (status, body[, headers]); 404 after."""
    api = FakeApi(script)

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *_args: Any) -> None:
            return

        def _answer(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length) if length else b""
            api.requests.append({"method": self.command, "path": self.path, "body": body,
                                 "authorization": self.headers.get("Authorization")})
            step = api.script.pop(0) if api.script else (404, {"detail": "not found"})
            status, payload = step[0], step[1]
            headers = step[2] if len(step) > 2 else {}
            if status == "close":
                self.close_connection = True
                self.connection.shutdown(2)
                return
            data = payload if isinstance(payload, bytes) else (
                json.dumps(payload).encode() if payload is not None else b"")
            self.send_response(status)
            for key, value in headers.items():
                self.send_header(key, value)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        do_GET = do_POST = do_PUT = do_DELETE = _answer  # noqa: N815

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05},
                     daemon=True).start()
    api.url = f"http://127.0.0.1:{server.server_address[1]}"
    return _Ctx(api, server)


def test_runpod_falls_back_to_graphql_when_rest_refuses_the_pod_key(
    daemons: Daemons, tmp_path: Path
) -> None:
    refused = (403, {"title": "Forbidden", "status": 403, "detail": "access denied"})
    with fake_api([
        refused,  # DELETE /v2/pods/{id}
        refused,  # POST /v2/pods/{id}/action {"action": "terminate"}
        (200, {"data": {"podTerminate": None}}),
        (200, {"data": {"pod": None}}),
    ]) as api:
        env = {**clean_env(), "RUNPOD_POD_ID": "podgql", "RUNPOD_API_KEY": "rpa_pod_gql12345"}
        heartbeat, log = daemons.paths("gql")
        out = deadman("run", "--provider", "runpod", "--ttl-at", "1", "--heartbeat-file",
                      str(heartbeat), "--heartbeat-timeout", "0", "--api-url", api.url,
                      "--log", str(log), "--environ-from", "", *FAST, env=env)
    assert out.returncode == 0, log.read_text()
    # the termination table, in order: REST DELETE, the v2 action, GraphQL podTerminate
    assert [(r["method"], r["path"]) for r in api.requests] == [
        ("DELETE", "/v2/pods/podgql"), ("POST", "/v2/pods/podgql/action"), ("POST", "/graphql"),
        ("POST", "/graphql")]
    assert json.loads(api.requests[1]["body"]) == {"action": "terminate"}
    attempts = [line for line in log.read_text().splitlines() if "attempt 1:" in line]
    assert len(attempts) == 1 and "DELETE /v2/pods/{id}: refused" in attempts[0] \
        and "GraphQL podTerminate: accepted" in attempts[0]
    terminate = json.loads(api.requests[2]["body"])
    assert "podTerminate" in terminate["query"]
    assert terminate["variables"] == {"input": {"podId": "podgql"}}  # variables, no interpolation
