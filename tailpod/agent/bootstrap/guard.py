"""The stage-0 guard: the dead-man switch's first stage, run by the pod's start command.

The agent is not on the pod until tailpod's SSH bootstrap uploads it, and the laptop may die
before that. This guard fires on the same TTL and heartbeat file as the daemon (deadman.py); it
steps aside once the daemon runs (its state file names a live `deadman run`) or after `disarm`.
Firing, it walks terminate.py's table each attempt, logs one line per attempt to
<heartbeat>.guard.log, and backs off 2x up to 300 s. A REST route answering 404, or GraphQL
saying "not found", means the pod is gone.

argv: provider, ttl_at (epoch s, 0 = none), heartbeat timeout (s, 0 = none), heartbeat file,
API base URL. Credentials come from the container's environment, never from argv.

This is readable source: tailpod/agent_client/build.py `guard_code` fills in the four
constants below for one provider (from terminate.py), strips docstrings, comments and
indentation, and deflates it into the start command, which must fit vast.ai's 4048-character
`onstart` limit (tests/integration/deadman/test_deadman_control.py).
"""

from __future__ import annotations

import json
import os
import sys
import time
import urllib.request

# Filled in at build time for one provider (agent_build.guard_code).
CREDENTIAL_ENV = ("RUNPOD_POD_ID", "RUNPOD_API_KEY")
ROUTES: list = []
POLL_S = 30.0
RETRY_S = 5.0


def daemon_runs(heartbeat: str) -> bool:
    """The recorded daemon is alive: its pid's command line is the agent's `deadman run` (or the
    pre-agent deadman.py)."""
    try:
        pid = json.load(open(heartbeat + ".deadman.json"))["pid"]
        return b"deadman" in open("/proc/%d/cmdline" % pid, "rb").read()
    except Exception:
        return False


def note(heartbeat: str, attempt: int, text: str) -> None:
    open(heartbeat + ".guard.log", "a").write("%d attempt %d: %s\n" % (time.time(), attempt, text))


def main(argv: list) -> int:
    provider, ttl_at, timeout, heartbeat, api = argv[:5]
    ttl_at, timeout, started = float(ttl_at), float(timeout), time.time()
    heartbeat = os.path.expanduser(heartbeat)
    pod_id, key = (os.environ.get(name, "") for name in CREDENTIAL_ENV)
    while True:
        if os.path.exists(heartbeat + ".disarmed") or daemon_runs(heartbeat):
            return 0
        now = time.time()
        try:
            beat = os.stat(heartbeat).st_mtime
        except OSError:
            beat = 0
        if ttl_at and now >= ttl_at or timeout and now - max(beat, started) >= timeout:
            break
        time.sleep(POLL_S)
    delay, attempt = RETRY_S, 0
    while True:
        attempt += 1
        tried = ""
        for method, path, body in ROUTES:
            graphql = "graphql" in path
            text = b""
            data = None if body is None else json.dumps(body).replace("{id}", pod_id).encode()
            headers = {"Authorization": "Bearer " + key, "Content-Type": "application/json"}
            try:
                request = urllib.request.Request(
                    api + path.replace("{id}", pod_id), data, headers, method=method)
                answer = urllib.request.urlopen(request, timeout=30)
                code, text = answer.status, answer.read(4096).lower()
            except urllib.request.HTTPError as error:
                code = error.code
            except Exception:
                code = 0
            tried += "%s %s %d; " % (method, path, code)
            if code == 404 and not graphql or graphql and b"not found" in text:
                note(heartbeat, attempt, tried + "gone")
                return 0
            if 199 < code < 300 and b"errors" not in text:
                break  # accepted: keep asking until the provider says the pod is gone
        note(heartbeat, attempt, tried + "retry in %ds" % delay)
        time.sleep(delay)
        delay = min(delay * 2, 300)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
