#!/usr/bin/env python3
"""The on-pod dead-man switch: the pod terminates itself when tailpod stops looking after it.

The agent's verbs drive it with JSON on stdin
(docs/agent.md): `deadman arm|heartbeat|status|disarm`. The daemon itself is the internal verb

    python3 -I agent.pyz deadman run --provider runpod|vastai --ttl-at EPOCH \
        --heartbeat-file PATH --heartbeat-timeout S [--api-url URL] [--poll S] [--log FILE]

which `arm` starts detached (its own session, stdio on the log, working directory /) so it
outlives the SSH session that armed it.

`run` checks, every `--poll` seconds, the TTL (`--ttl-at`, epoch seconds) and the age of the
heartbeat file's mtime. When either has expired it logs why and terminates the pod through the
provider's API (terminate.py's table), retrying with capped exponential backoff (and Retry-After
on 429) until the provider says the pod is gone (a 404 counts), or until `--give-up-after`
seconds have passed.

`arm` is idempotent: a live daemon with the same settings is left alone; one with other settings
is replaced.

Credentials come from the environment only (never the command line, never logged):
RunPod `RUNPOD_POD_ID` + `RUNPOD_API_KEY` (the pod-scoped key RunPod injects), vast.ai
`CONTAINER_ID` + `CONTAINER_API_KEY` (the instance-restricted key). A name missing from the
process environment is looked up in `--environ-from` (default /proc/1/environ: the container's
own environment, which SSH sessions often do not inherit).

Exit codes of `deadman run`: 0 the pod is gone (or `--dry-run` fired), 2 bad usage or missing
credentials, 3 gave up before the provider confirmed the pod gone, 143 stopped by a signal.
"""

from __future__ import annotations

import argparse
import contextlib
import http.client
import json
import os
import random
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from typing import Any

from .terminate import ALIASES, PROVIDERS, TERMINATE_ROUTES

VERSION = 1
DEFAULT_ENVIRON_FROM = "/proc/1/environ"
EXIT_GONE, EXIT_USAGE, EXIT_GAVE_UP, EXIT_SIGNAL = 0, 2, 3, 143
LIVE_STATES = ("armed", "firing")
MASK = "***"
DISARMED_SUFFIX = ".disarmed"

# GraphQL answers business errors with HTTP 200: these words mark a refused key.
AUTH_WORDS = ("unauthorized", "forbidden", "permission", "not authorized", "access denied",
              "scoped", "api key")
RUNPOD_POD_GQL = "query DeadmanPod($input: PodFilter!) { pod(input: $input) { id desiredStatus } }"


class Stopped(BaseException):
    """A signal asked the daemon to stop (a BaseException: `except Exception` must not eat it)."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


# -- small helpers ----------------------------------------------------------------------------------
def now_iso(t: float | None = None) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() if t is None else t))


class Log:
    """Timestamped lines to a file (0600) or stderr; every line is scrubbed of the API key."""

    def __init__(self, path: str | None) -> None:
        self.path = path
        self.secrets: list[str] = []

    def scrub(self, text: str) -> str:
        for value in self.secrets:
            if value:
                text = text.replace(value, MASK)
        return text

    def __call__(self, message: str) -> None:
        line = f"{now_iso()} deadman[{os.getpid()}]: {self.scrub(message)}\n"
        try:
            if self.path:
                fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
                with os.fdopen(fd, "a", encoding="utf-8") as fh:
                    fh.write(line)
            else:
                sys.stderr.write(line)
                sys.stderr.flush()
        except OSError:
            pass  # a full disk must not kill the switch


def write_json_atomic(path: str, data: dict[str, Any]) -> None:
    tmp = f"{path}.tmp.{os.getpid()}"
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            json.dump(data, fh, sort_keys=True)
        os.replace(tmp, path)
    except OSError:
        with contextlib.suppress(OSError):
            os.unlink(tmp)


def read_json(path: str) -> dict[str, Any] | None:
    try:
        with open(path, encoding="utf-8") as fh:
            data = json.load(fh)
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def touch(path: str) -> None:
    parent = os.path.dirname(path)
    if parent:
        os.makedirs(parent, mode=0o700, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o600)
    os.close(fd)
    os.utime(path, None)


def mtime_of(path: str) -> float | None:
    try:
        return os.stat(path).st_mtime
    except OSError:
        return None


def state_path_for(heartbeat_file: str) -> str:
    return heartbeat_file + ".deadman.json"


def pid_alive(pid: int) -> bool:
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    except OSError:
        return False
    try:  # a zombie (exited, not yet reaped) is not a live daemon
        with open(f"/proc/{pid}/stat", encoding="utf-8", errors="replace") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return True


def is_deadman_process(pid: int) -> bool:
    """Whether `pid` is alive and runs this script's `run` (not a recycled pid)."""
    if not pid_alive(pid):
        return False
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            argv = fh.read().split(b"\0")
    except OSError:
        return True  # no /proc: trust the pid
    # the agent's `deadman run` (argv ... deadman run ...); the pre-agent script's `deadman.py run`
    agent = any(argv[i:i + 2] == [b"deadman", b"run"] for i in range(len(argv)))
    return agent or (any(a.endswith(b"deadman.py") for a in argv) and b"run" in argv)


def read_environ_file(path: str) -> dict[str, str]:
    """A NUL-separated environ (like /proc/1/environ) or KEY=VALUE lines; {} when unreadable."""
    try:
        with open(path, "rb") as fh:
            raw = fh.read(1 << 20)
    except OSError:
        return {}
    sep = b"\0" if b"\0" in raw else b"\n"
    out: dict[str, str] = {}
    for item in raw.split(sep):
        text = item.decode("utf-8", errors="replace").strip()
        if text.startswith("export "):
            text = text[7:].strip()
        name, eq, value = text.partition("=")
        if eq and name and not name.startswith("#"):
            if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
                value = value[1:-1]
            out[name.strip()] = value
    return out


def credentials(provider: str, environ_from: str | None) -> tuple[str | None, str | None]:
    """(pod id, API key) from the environment, falling back to the container's environ file."""
    names = PROVIDERS[provider]
    pod_id = os.environ.get(names["id_env"], "").strip() or None
    key = os.environ.get(names["key_env"], "").strip() or None
    if (pod_id is None or key is None) and environ_from:
        extra = read_environ_file(environ_from)
        pod_id = pod_id or extra.get(names["id_env"], "").strip() or None
        key = key or extra.get(names["key_env"], "").strip() or None
    return pod_id, key


# -- HTTP -------------------------------------------------------------------------------------------
class Answer:
    """One HTTP exchange, reduced to what the switch decides on; never raises on odd content."""

    def __init__(self, status: int | None, body: Any, headers: dict[str, str],
                 error: str | None = None) -> None:
        self.status = status
        self.body = body
        self.headers = headers
        self.error = error

    def retry_after(self) -> float | None:
        value = self.headers.get("retry-after")
        if not value:
            return None
        try:
            return max(0.0, float(value.strip()))
        except ValueError:
            pass
        try:  # an HTTP date
            from email.utils import parsedate_to_datetime

            return max(0.0, parsedate_to_datetime(value).timestamp() - time.time())
        except (TypeError, ValueError, IndexError, OverflowError):
            return None

    def describe(self) -> str:
        if self.status is None:
            return f"no answer ({self.error})"
        text = json.dumps(self.body)[:200] if self.body is not None else "empty body"
        return f"HTTP {self.status}: {text}"


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    # urllib would replay the Authorization header to wherever a redirect points.
    def redirect_request(self, req: Any, fp: Any, code: int, msg: str, headers: Any,
                         newurl: str) -> None:
        return None


def _opener(url: str) -> urllib.request.OpenerDirector:
    host = urllib.parse.urlsplit(url).hostname or ""
    handlers: list[Any] = [_NoRedirect()]
    if host in ("127.0.0.1", "localhost", "::1"):
        handlers.append(urllib.request.ProxyHandler({}))
    return urllib.request.build_opener(*handlers)


def http_call(method: str, url: str, key: str, body: Any = None, timeout: float = 15.0) -> Answer:
    data = json.dumps(body).encode("utf-8") if body is not None else None
    headers = {"Authorization": f"Bearer {key}", "Accept": "application/json",
               "User-Agent": "tailpod-deadman/1"}
    if data is not None:
        headers["Content-Type"] = "application/json"
    request = urllib.request.Request(url, data=data, method=method, headers=headers)
    status: int | None
    try:
        with _opener(url).open(request, timeout=timeout) as resp:
            status, raw, got = resp.status, resp.read(1 << 20), dict(resp.headers.items())
    except urllib.error.HTTPError as exc:
        status = exc.code
        got = dict(exc.headers.items()) if exc.headers else {}
        try:
            raw = exc.read(1 << 20)
        except (OSError, http.client.HTTPException, ValueError):
            raw = b""
    except (OSError, http.client.HTTPException, ValueError) as exc:
        return Answer(None, None, {}, error=exc.__class__.__name__)
    parsed: Any = None
    if raw:
        try:
            parsed = json.loads(raw.decode("utf-8"))
        except (UnicodeDecodeError, ValueError):
            parsed = {"_text": raw[:200].decode("utf-8", errors="replace")}
    return Answer(status, parsed, {k.lower(): v for k, v in got.items()})


# -- provider APIs ----------------------------------------------------------------------------------
GONE, ACCEPTED, PRESENT, RETRY, REFUSED = "gone", "accepted", "present", "retry", "refused"


class Outcome:
    def __init__(self, kind: str, detail: str, wait: float | None = None) -> None:
        self.kind = kind
        self.detail = detail
        self.wait = wait


def _generic(answer: Answer) -> Outcome:
    """Statuses every provider shares: 404 gone, 429 wait, 401/403 refused, others retry."""
    if answer.status == 404:
        return Outcome(GONE, answer.describe())
    if answer.status == 429:
        return Outcome(RETRY, answer.describe(), answer.retry_after())
    if answer.status in (401, 403):
        return Outcome(REFUSED, answer.describe())
    return Outcome(RETRY, answer.describe())


def _fill(value: Any, pod_id: str) -> Any:
    """A route's body with `{id}` replaced by the pod id (strings inside dicts and lists)."""
    if isinstance(value, str):
        return value.replace("{id}", pod_id)
    if isinstance(value, dict):
        return {k: _fill(v, pod_id) for k, v in value.items()}
    if isinstance(value, list):
        return [_fill(v, pod_id) for v in value]
    return value


def _route_outcome(path: str, answer: Answer) -> Outcome:
    """What one termination route's answer means. GraphQL answers business errors with HTTP 200
    and a retired GraphQL with 404, which is not the pod being gone."""
    graphql = path.endswith("/graphql")
    body = answer.body
    code = str(body.get("error") or "") if isinstance(body, dict) else ""
    if code in ("no_such_instance", "not_found"):  # vast.ai: the instance is gone
        return Outcome(GONE, answer.describe())
    if graphql and answer.status == 200:
        errors = body.get("errors") if isinstance(body, dict) else None
        if not errors:
            return Outcome(ACCEPTED, "GraphQL podTerminate answered without errors")
        first = errors[0] if isinstance(errors, list) else errors
        message = str(first.get("message") if isinstance(first, dict) else first)[:200]
        if "not found" in message.lower():
            return Outcome(GONE, f"GraphQL: {message}")
        if any(word in message.lower() for word in AUTH_WORDS):
            return Outcome(REFUSED, f"GraphQL error: {message}")
        return Outcome(RETRY, f"GraphQL error: {message}")
    if answer.status is not None and 200 <= answer.status < 300:
        if isinstance(body, dict) and body.get("success") is False:
            return Outcome(RETRY, answer.describe())
        return Outcome(ACCEPTED, answer.describe())
    if answer.status == 404 and graphql:
        return Outcome(REFUSED, f"GraphQL unavailable: {answer.describe()}")
    if answer.status in (405, 409):  # this route cannot do it (now): try the next
        return Outcome(REFUSED, answer.describe())
    return _generic(answer)


def walk_routes(provider: str, base: str, pod_id: str, key: str, timeout: float
                ) -> tuple[Outcome, list[str]]:
    """One termination attempt: the table's routes in order. The first route that is accepted
    or finds the pod gone decides; otherwise a wait-worthy answer (429, 5xx) beats a refusal.
    Returns the outcome and one note per route tried (for the attempt's log line)."""
    notes: list[str] = []
    worst: Outcome | None = None
    for method, path, body in TERMINATE_ROUTES[provider]:
        url = base.rstrip("/") + _fill(path, urllib.parse.quote(pod_id, safe=""))
        answer = http_call(method, url, key, _fill(body, pod_id), timeout=timeout)
        outcome = _route_outcome(path, answer)
        label = "GraphQL podTerminate" if path.endswith("/graphql") else f"{method} {path}"
        notes.append(f"{label}: {outcome.kind} ({outcome.detail[:120]})")
        if outcome.kind in (GONE, ACCEPTED):
            return outcome, notes
        if worst is None or (worst.kind == REFUSED and outcome.kind == RETRY):
            worst = outcome
    assert worst is not None
    return worst, notes


class RunPodApi:
    """Terminates through the table's RunPod routes; reads through REST v2, or GraphQL when REST
    refuses the key."""

    def __init__(self, base_url: str, pod_id: str, key: str, timeout: float) -> None:
        self.base = base_url.rstrip("/")
        self.pod_id = pod_id
        self.key = key
        self.timeout = timeout
        self.use_graphql = False
        self.notes: list[str] = []

    def _pod_url(self) -> str:
        return f"{self.base}/v2/pods/{urllib.parse.quote(self.pod_id, safe='')}"

    def describe(self) -> str:
        return "; ".join(self.notes) or f"the RunPod termination table at {self.base}"

    def terminate(self) -> Outcome:
        outcome, self.notes = walk_routes("runpod", self.base, self.pod_id, self.key,
                                          self.timeout)
        # A key REST refused for DELETE is refused for reads too: read back through GraphQL.
        self.use_graphql = any(n.startswith("DELETE") and "refused" in n for n in self.notes)
        return outcome

    def probe(self) -> Outcome:
        if self.use_graphql:
            return self._gql_probe()
        answer = http_call("GET", self._pod_url(), self.key, timeout=self.timeout)
        if answer.status == 200:
            status = answer.body.get("status") if isinstance(answer.body, dict) else None
            if status == "TERMINATED":
                return Outcome(GONE, "status TERMINATED")
            return Outcome(PRESENT, f"status {status!r}")
        outcome = _generic(answer)
        if outcome.kind == REFUSED:  # a key REST refuses may still read through GraphQL
            gql = self._gql_probe()
            if gql.kind != REFUSED:
                return gql
        return outcome

    def _gql(self, query: str) -> Answer:
        return http_call("POST", f"{self.base}/graphql", self.key,
                         {"query": query, "variables": {"input": {"podId": self.pod_id}}},
                         timeout=self.timeout)

    @staticmethod
    def _gql_errors(answer: Answer) -> str | None:
        body = answer.body
        if not isinstance(body, dict) or not body.get("errors"):
            return None
        errors = body["errors"]
        first = errors[0] if isinstance(errors, list) and errors else errors
        message = first.get("message") if isinstance(first, dict) else first
        return str(message)[:200]

    def _gql_probe(self) -> Outcome:
        answer = self._gql(RUNPOD_POD_GQL)
        if answer.status != 200:
            return _generic(answer) if answer.status != 404 else Outcome(RETRY, answer.describe())
        body = answer.body
        data = body.get("data") if isinstance(body, dict) else None
        error = self._gql_errors(answer)
        if error is not None and any(word in error.lower() for word in AUTH_WORDS):
            return Outcome(REFUSED, f"GraphQL error: {error}")
        if error is None and isinstance(data, dict) and "pod" in data:
            pod = data["pod"]
            if pod is None:
                return Outcome(GONE, "GraphQL pod is null")
            status = pod.get("desiredStatus") if isinstance(pod, dict) else None
            if status == "TERMINATED":
                return Outcome(GONE, "desiredStatus TERMINATED")
            return Outcome(PRESENT, f"desiredStatus {status!r}")
        return Outcome(RETRY, f"GraphQL pod query: {answer.describe()}")


class VastApi:
    """`DELETE /api/v0/instances/{id}/` with the instance-restricted key; gone = 404 / null."""

    def __init__(self, base_url: str, pod_id: str, key: str, timeout: float) -> None:
        self.base = base_url.rstrip("/")
        self.pod_id = pod_id
        self.key = key
        self.timeout = timeout
        self.notes: list[str] = []

    def _url(self) -> str:
        return f"{self.base}/api/v0/instances/{urllib.parse.quote(self.pod_id, safe='')}/"

    def describe(self) -> str:
        return "; ".join(self.notes) or f"DELETE {self._url()}"

    def terminate(self) -> Outcome:
        outcome, self.notes = walk_routes("vastai", self.base, self.pod_id, self.key,
                                          self.timeout)
        return outcome

    def probe(self) -> Outcome:
        answer = http_call("GET", self._url() + "?owner=me", self.key, timeout=self.timeout)
        if answer.status == 200 and isinstance(answer.body, dict) and "instances" in answer.body:
            row = answer.body["instances"]
            if row is None:
                return Outcome(GONE, "instances: null")
            status = row.get("actual_status") if isinstance(row, dict) else None
            return Outcome(PRESENT, f"actual_status {status!r}")
        return _generic(answer)


def make_api(provider: str, base_url: str, pod_id: str, key: str,
             timeout: float) -> RunPodApi | VastApi:
    if provider == "runpod":
        return RunPodApi(base_url, pod_id, key, timeout)
    return VastApi(base_url, pod_id, key, timeout)


# -- the daemon -------------------------------------------------------------------------------------
class Daemon:
    def __init__(self, args: argparse.Namespace, log: Log) -> None:
        self.args = args
        self.log = log
        self.state_file = state_path_for(args.heartbeat_file)
        self.started_at = time.time()
        self.pod_id: str | None = None
        self.key: str | None = None

    def config(self) -> dict[str, Any]:
        a = self.args
        return {"provider": a.provider, "ttl_at": a.ttl_at, "heartbeat_file": a.heartbeat_file,
                "heartbeat_timeout_s": a.heartbeat_timeout, "api_url": a.api_url,
                "poll_s": a.poll, "dry_run": a.dry_run}

    def record(self, state: str, reason: str | None = None, **extra: Any) -> None:
        data = {"version": VERSION, "pid": os.getpid(), "state": state, "reason": reason,
                "pod_id": self.pod_id, "started_at": self.started_at, "updated_at": time.time(),
                "log": self.args.log, **self.config(), **extra}
        # API answers end up in `reason`/`last`: scrub them like log lines.
        clean = {k: self.log.scrub(v) if isinstance(v, str) else v for k, v in data.items()}
        write_json_atomic(self.state_file, clean)

    def sleep(self, seconds: float) -> None:
        time.sleep(max(0.0, seconds))

    def expired(self) -> str | None:
        """Why the switch fires now, or None."""
        a = self.args
        now = time.time()
        if a.ttl_at and now >= a.ttl_at:
            return f"TTL expired at {now_iso(a.ttl_at)} ({now - a.ttl_at:.0f} s ago)"
        if a.heartbeat_timeout > 0:
            beat = mtime_of(a.heartbeat_file)
            last = max(beat if beat is not None else 0.0, self.started_at)
            age = now - last
            if age >= a.heartbeat_timeout:
                seen = (f"last heartbeat {now - beat:.0f} s ago" if beat is not None
                        else f"no heartbeat file for {age:.0f} s")
                return f"no heartbeat from tailpod within {a.heartbeat_timeout:g} s ({seen})"
        return None

    def run(self) -> int:
        a = self.args
        self.pod_id, self.key = credentials(a.provider, a.environ_from)
        if self.key:
            self.log.secrets.append(self.key)
        names = PROVIDERS[a.provider]
        if not a.dry_run and (not self.pod_id or not self.key):
            missing = [n for n, v in ((names["id_env"], self.pod_id), (names["key_env"], self.key))
                       if not v]
            self.log(f"cannot arm: {' and '.join(missing)} not set in the environment "
                     f"(nor in {a.environ_from})")
            self.record("error", f"missing {', '.join(missing)}")
            return EXIT_USAGE
        with contextlib.suppress(OSError):
            touch(a.heartbeat_file)  # arming counts as a heartbeat
        ttl = f"TTL at {now_iso(a.ttl_at)}" if a.ttl_at else "no TTL"
        beat = (f"heartbeat timeout {a.heartbeat_timeout:g} s" if a.heartbeat_timeout > 0
                else "no heartbeat check")
        self.log(f"armed for {a.provider} pod {self.pod_id or '(unknown)'}: {ttl}, {beat}, "
                 f"heartbeat file {a.heartbeat_file}, poll {a.poll:g} s"
                 + (" [dry run]" if a.dry_run else ""))
        self.record("armed")
        while True:
            try:
                reason = self.expired()
            except Exception as exc:  # the watch loop must outlive any surprise
                self.log(f"check failed ({exc.__class__.__name__}); will check again")
                reason = None
            if reason:
                return self.fire(reason)
            self.sleep(a.poll)

    def fire(self, reason: str) -> int:
        a = self.args
        self.log(f"firing: {reason}")
        if a.dry_run:
            target = f"{a.provider} pod {self.pod_id or '(unknown)'}"
            self.log(f"dry run: would terminate {target} through {a.api_url}")
            self.record("dry_run_fired", reason)
            return EXIT_GONE
        assert self.pod_id is not None and self.key is not None
        api = make_api(a.provider, a.api_url, self.pod_id, self.key, a.http_timeout)
        self.record("firing", reason)
        deadline = time.monotonic() + a.give_up_after
        attempt = 0
        while True:
            attempt += 1
            try:
                outcome = self.attempt(api, attempt)
            except Exception as exc:  # never let an odd answer end the switch
                outcome = Outcome(RETRY, f"unexpected {exc.__class__.__name__}")
            routes = api.describe()
            if outcome.kind == GONE:
                self.log(f"attempt {attempt}: {routes}; pod {self.pod_id} is gone "
                         f"({outcome.detail})")
                self.record("terminated", reason, attempts=attempt, terminated_at=time.time())
                return EXIT_GONE
            wait = self.backoff(attempt)
            if outcome.wait is not None:
                wait = min(max(outcome.wait, a.retry_base), a.max_backoff)
            if time.monotonic() + wait > deadline:
                self.log(f"attempt {attempt}: {routes}; giving up: the provider never confirmed "
                         f"pod {self.pod_id} gone (last: {outcome.detail}); IT MAY STILL BILL")
                self.record("gave_up", reason, attempts=attempt, last=outcome.detail)
                return EXIT_GAVE_UP
            self.log(f"attempt {attempt}: {routes}; then {outcome.kind} ({outcome.detail}); "
                     f"retrying in {wait:.1f} s")
            self.sleep(wait)

    def attempt(self, api: RunPodApi | VastApi, attempt: int) -> Outcome:
        # One log line per attempt (written by `fire`): every route tried, what it answered.
        outcome = api.terminate()
        if outcome.kind != ACCEPTED:
            return outcome
        # "Accepted" is not "gone": check, as a provider may answer success and do nothing.
        self.sleep(min(self.args.retry_base, 2.0))
        probe = api.probe()
        if probe.kind == GONE:
            return probe
        if probe.kind == REFUSED:
            # A key that may terminate but not read: a repeated terminate answers 404 once gone.
            return Outcome(RETRY, f"terminate accepted; reading the pod refused ({probe.detail})",
                           self.args.retry_base)
        return Outcome(RETRY, f"terminate accepted but the pod is still there ({probe.detail})",
                       probe.wait)

    def backoff(self, attempt: int) -> float:
        a = self.args
        base = min(a.max_backoff, a.retry_base * (2 ** min(attempt - 1, 20)))
        return base * random.uniform(0.5, 1.0)


# -- status / beat / arm / disarm -------------------------------------------------------------------
def status_of(heartbeat_file: str) -> dict[str, Any]:
    state = read_json(state_path_for(heartbeat_file)) or {}
    pid = state.get("pid") if isinstance(state.get("pid"), int) else None
    live = bool(pid and state.get("state") in LIVE_STATES and is_deadman_process(pid))
    now = time.time()
    beat = mtime_of(heartbeat_file)
    out: dict[str, Any] = {
        "armed": live and state.get("state") == "armed",
        "running": live,
        "state": state.get("state") if state else "never_armed",
        "pid": pid if live else None,
        "reason": state.get("reason"),
        "provider": state.get("provider"),
        "pod_id": state.get("pod_id"),
        "heartbeat_age_s": round(now - beat, 1) if beat is not None else None,
        "heartbeat_timeout_s": state.get("heartbeat_timeout_s"),
        "ttl_at": state.get("ttl_at"),
        "ttl_left_s": None,
    }
    ttl_at = state.get("ttl_at")
    if isinstance(ttl_at, (int, float)) and ttl_at:
        out["ttl_left_s"] = round(ttl_at - now, 1)
    if state and not live and state.get("state") in LIVE_STATES:
        out["state"] = "dead"  # the daemon died without recording why (killed, container restart)
    return out


# Each command returns (exit code, result): the agent's CLI puts the result in its envelope.
def cmd_beat(args: argparse.Namespace) -> tuple[int, dict[str, Any]]:
    try:
        touch(args.heartbeat_file)
    except OSError as exc:
        return 1, {"beat": False, "error": exc.__class__.__name__}
    return 0, {"beat": True, **status_of(args.heartbeat_file)}


def cmd_status(args: argparse.Namespace) -> tuple[int, dict[str, Any]]:
    return 0, status_of(args.heartbeat_file)


def stop_daemon(heartbeat_file: str, timeout: float = 5.0) -> int | None:
    """SIGTERM the recorded daemon (only if it is really ours); its pid, or None."""
    state = read_json(state_path_for(heartbeat_file)) or {}
    pid = state.get("pid")
    if not isinstance(pid, int) or not is_deadman_process(pid):
        return None
    with contextlib.suppress(OSError):
        os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and pid_alive(pid):
        time.sleep(0.05)
    return pid


def cmd_disarm(args: argparse.Namespace) -> tuple[int, dict[str, Any]]:
    # The marker also stands down the start command's stage-0 guard (deadman_control.py).
    # The marker may land before the guard has created its directory: create it, or the
    # disarm would be lost and the guard would fire later.
    with contextlib.suppress(OSError):
        os.makedirs(os.path.dirname(os.path.abspath(args.heartbeat_file)), exist_ok=True)
        touch(args.heartbeat_file + DISARMED_SUFFIX)
    pid = stop_daemon(args.heartbeat_file)
    return 0, {"disarmed": pid is not None, "pid": pid}


def agent_entry() -> list[str]:
    """How a Python runs this agent again: `-I <archive>` from the zipapp, else `-m <package>`
    (the source tree, e.g. --provider local and the tests)."""
    archive = getattr(globals().get("__loader__"), "archive", None)  # zipimport names its archive
    if archive:
        return ["-I", str(archive)]
    return ["-m", (__package__ or "").rsplit(".", 1)[0]]


def run_argv(args: argparse.Namespace) -> list[str]:
    """The `run` command line for `arm`: settings only, never a credential."""
    argv = [*agent_entry(), "deadman", "run", "--provider", args.provider,
            "--ttl-at", repr(float(args.ttl_at)), "--heartbeat-file", args.heartbeat_file,
            "--heartbeat-timeout", repr(float(args.heartbeat_timeout)),
            "--api-url", args.api_url, "--poll", repr(float(args.poll)),
            "--retry-base", repr(float(args.retry_base)),
            "--max-backoff", repr(float(args.max_backoff)),
            "--give-up-after", repr(float(args.give_up_after)),
            "--http-timeout", repr(float(args.http_timeout)),
            "--environ-from", args.environ_from or ""]
    if args.log:
        argv += ["--log", args.log]
    if args.dry_run:
        argv.append("--dry-run")
    return argv


def same_settings(state: dict[str, Any], args: argparse.Namespace) -> bool:
    return (state.get("provider") == args.provider and state.get("ttl_at") == args.ttl_at
            and state.get("heartbeat_timeout_s") == args.heartbeat_timeout
            and state.get("api_url") == args.api_url and state.get("poll_s") == args.poll
            and bool(state.get("dry_run")) == bool(args.dry_run))


def cmd_arm(args: argparse.Namespace) -> tuple[int, dict[str, Any]]:
    argv = [args.python, *run_argv(args)]
    pod_id, key = credentials(args.provider, args.environ_from)
    names = PROVIDERS[args.provider]
    if not args.dry_run and (not pod_id or not key):
        missing = [n for n, v in ((names["id_env"], pod_id), (names["key_env"], key)) if not v]
        return EXIT_USAGE, {"armed": False, "error": f"{' and '.join(missing)} not set",
                            "hint": "the provider injects these into the pod's environment"}
    state = read_json(state_path_for(args.heartbeat_file)) or {}
    pid = state.get("pid")
    if isinstance(pid, int) and state.get("state") == "firing" and is_deadman_process(pid):
        # Never interrupt a termination in progress.
        return 1, {"armed": False, "firing": True, "pid": pid, "reason": state.get("reason")}
    if (isinstance(pid, int) and state.get("state") == "armed" and is_deadman_process(pid)
            and same_settings(state, args)):
        touch(args.heartbeat_file)
        return 0, {"armed": True, "pid": pid, "already": True, **preflight(args, pod_id, key)}
    replaced = stop_daemon(args.heartbeat_file)
    for stale in (state_path_for(args.heartbeat_file), args.heartbeat_file + DISARMED_SUFFIX):
        with contextlib.suppress(OSError):
            os.unlink(stale)
    parent = os.path.dirname(args.heartbeat_file)
    if parent:
        os.makedirs(parent, mode=0o700, exist_ok=True)
    out = open(args.log, "ab") if args.log else open(os.devnull, "wb")  # noqa: SIM115
    try:
        child = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=out, stderr=out,
                                 cwd="/", close_fds=True, start_new_session=True)
    finally:
        out.close()
    deadline = time.monotonic() + args.arm_timeout
    while time.monotonic() < deadline:
        state = read_json(state_path_for(args.heartbeat_file)) or {}
        if state.get("pid") == child.pid and state.get("state") in ("armed", "error"):
            break
        if child.poll() is not None:
            break
        time.sleep(0.05)
    armed = state.get("pid") == child.pid and state.get("state") == "armed" \
        and child.poll() is None
    result: dict[str, Any] = {"armed": armed, "pid": child.pid if armed else None,
                              "already": False, "replaced": replaced}
    if not armed:
        result["error"] = state.get("reason") or "the daemon did not report itself armed"
        return 1, result
    result.update(preflight(args, pod_id, key))
    return 0, result


def preflight(args: argparse.Namespace, pod_id: str | None, key: str | None) -> dict[str, Any]:
    """Can this key see this pod at this URL? Read-only; reported, never fatal."""
    if args.dry_run or args.no_preflight or not pod_id or not key:
        return {"preflight": "skipped"}
    api = make_api(args.provider, args.api_url, pod_id, key, args.http_timeout)
    try:
        outcome = api.probe()
    except Exception as exc:
        return {"preflight": f"error: {exc.__class__.__name__}"}
    verdict = {PRESENT: "ok", GONE: "pod not found (check the API URL and pod id)",
               REFUSED: "key refused for reads (terminate may still be allowed)"}
    text = verdict.get(outcome.kind, f"unclear ({outcome.detail})")
    return {"preflight": text.replace(key, MASK)}


# -- command line -----------------------------------------------------------------------------------
def positive_float(text: str) -> float:
    value = float(text)
    if value < 0 or value != value:
        raise argparse.ArgumentTypeError("must be a number >= 0")
    return value


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="agent deadman", description="tailpod's on-pod dead-man switch (standard library only)",
        epilog="Credentials are read from the environment only: RUNPOD_POD_ID + RUNPOD_API_KEY "
               "(RunPod) or CONTAINER_ID + CONTAINER_API_KEY (vast.ai).")
    sub = parser.add_subparsers(dest="command", required=True)

    def watch_options(p: argparse.ArgumentParser) -> None:
        p.add_argument("--provider", required=True, type=lambda s: ALIASES.get(s.lower(), s),
                       choices=sorted(PROVIDERS), help="runpod or vastai")
        p.add_argument("--ttl-at", type=positive_float, required=True,
                       help="epoch seconds after which the pod terminates itself (0 = no TTL)")
        p.add_argument("--heartbeat-file", required=True, help="file whose mtime is the heartbeat")
        p.add_argument("--heartbeat-timeout", type=positive_float, required=True,
                       help="seconds without a heartbeat before the pod terminates itself "
                            "(0 = TTL only)")
        p.add_argument("--api-url", default=None, help="provider API base URL (default: the "
                                                       "real one)")
        p.add_argument("--poll", type=positive_float, default=30.0, help="seconds between checks")
        p.add_argument("--log", default=None, help="append the log here (default: stderr)")
        p.add_argument("--dry-run", action="store_true",
                       help="log what would be terminated instead of calling the API")
        p.add_argument("--retry-base", type=positive_float, default=2.0,
                       help="first retry delay in seconds (doubles up to --max-backoff)")
        p.add_argument("--max-backoff", type=positive_float, default=60.0)
        p.add_argument("--give-up-after", type=positive_float, default=86400.0,
                       help="stop retrying the terminate call after this many seconds")
        p.add_argument("--http-timeout", type=positive_float, default=15.0)
        p.add_argument("--environ-from", default=DEFAULT_ENVIRON_FROM,
                       help="where to look for credentials missing from the environment "
                            "(NUL-separated or KEY=VALUE lines; '' = nowhere)")

    run = sub.add_parser("run", help="the daemon, in the foreground")
    watch_options(run)
    arm = sub.add_parser("arm", help="start the daemon detached (idempotent)")
    watch_options(arm)
    arm.add_argument("--python", default=sys.executable or "python3",
                     help="interpreter for the daemon")
    arm.add_argument("--no-preflight", action="store_true",
                     help="skip the read-only API check after arming")
    arm.add_argument("--arm-timeout", type=positive_float, default=10.0)
    for name, text in (("beat", "touch the heartbeat file and print the status"),
                       ("status", "print the status"),
                       ("disarm", "stop the daemon; the pod keeps running")):
        p = sub.add_parser(name, help=text)
        p.add_argument("--heartbeat-file", required=True)
    return parser


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    args = build_parser().parse_args(argv)
    args.heartbeat_file = os.path.abspath(os.path.expanduser(args.heartbeat_file))
    if args.command in ("run", "arm"):
        if args.api_url is None:
            args.api_url = PROVIDERS[args.provider]["api_url"]
        if args.log:
            args.log = os.path.abspath(os.path.expanduser(args.log))
        if args.poll <= 0:
            args.poll = 1.0
        if not args.ttl_at and not args.heartbeat_timeout:
            build_parser().error("--ttl-at and --heartbeat-timeout are both 0: nothing would fire")
    return args


def main(argv: list[str] | None = None) -> int:
    """`deadman run ...`: the daemon in the foreground (what `arm` starts detached)."""
    args = parse_args(["run", *(argv or [])])
    log = Log(args.log)
    daemon = Daemon(args, log)

    def on_signal(signum: int, _frame: Any) -> None:
        raise Stopped(signum)

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    with contextlib.suppress(AttributeError, ValueError):
        signal.signal(signal.SIGHUP, signal.SIG_IGN)  # the SSH session that armed us may end
    try:
        return daemon.run()
    except Stopped as stop:
        log(f"stopped by signal {stop.signum}; the switch is disarmed")
        state = read_json(daemon.state_file) or {}
        if state.get("state") in LIVE_STATES and state.get("pid") == os.getpid():
            daemon.record("stopped", f"signal {stop.signum} while {state.get('state')}")
        return EXIT_SIGNAL

