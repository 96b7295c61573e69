"""Limits vast.ai publishes for its API, checked before anything is sent and enforced the same way
by the sandbox's vast emulator (one source for both).

Source: vast-ai/docs @ c624622622496828c1ae58edec481bba1f5d675d,
`api-reference/openapi/yaml/create_instance.yaml` (file last changed in f9c190db), block
`x-input-validation` (lines 299-319):

    image: max_length 1024            args: max_length 4096, "Combined length of args,
    label: max_length 256                   args_str and onstart"
    env:   max_length 256, max_total_length 32768, "Environment variables"
    disk:  min 8.0 ("Minimum storage space in GB")

and `onstart` at most 4048 characters ("`onstart` field is limited to 4048 characters -- gzip+base64
for longer scripts", `api-reference/openapi.yaml` info.description, "Key Quirks").

What `env max_length 256` counts is not said: the value, or `KEY=value`. The stricter reading is
checked here (`KEY=value` <= 256 characters per entry, the entries' `KEY=value` lengths summed
<= 32768), so a request that passes passes either reading. The docker-flag entries vast takes in
`env` ("-p 8000:8000": "1") are counted too. An RSA `PUBLIC_KEY` (>= 372 characters for 2048
bits) breaks the per-entry bound: tailpod refuses before renting and names an ed25519 key
(~100 characters) as the fix; vast's documented other way in (`POST /api/v0/instances/{id}/ssh/`,
attach_ssh.yaml) is not used by tailpod.

Per-endpoint rate limits (`x-rate-limit` of each file; "per IP address"; no Retry-After is
documented on any 429): create `threshold: 4.5, penalty: 12, per: request`
(create_instance.yaml:294-298), show instances `threshold: 1.0` (show_instances.yaml:497),
show instance `2.0` (show_instance.yaml:515), destroy `3.0` (destroy_instance.yaml:107), search
offers `requests: 10, per: minute` (search_offers.yaml:428-431). Only the last has a stated unit;
tailpod paces searches to it (SEARCH_PER_MINUTE) and meets the others' 429s with backoff.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence

SOURCE = ("vast-ai/docs @ c624622622496828c1ae58edec481bba1f5d675d "
          "api-reference/openapi/yaml/create_instance.yaml x-input-validation")
ONSTART_MAX_CHARS = 4048
ARGS_AND_ONSTART_MAX_CHARS = 4096  # args + args_str + onstart, combined
ENV_ENTRY_MAX_CHARS = 256  # per entry, read as "KEY=value" (the stricter reading)
ENV_TOTAL_MAX_CHARS = 32768
IMAGE_MAX_CHARS = 1024
LABEL_MAX_CHARS = 256
DISK_MIN_GB = 8.0

# x-rate-limit per endpoint (see above); the threshold numbers have no stated unit.
RATE_LIMITS: dict[str, dict[str, float]] = {
    "create": {"threshold": 4.5, "penalty": 12},
    "list": {"threshold": 1.0},
    "get": {"threshold": 2.0},
    "terminate": {"threshold": 3.0},
    "search": {"requests": 10, "per_s": 60.0},
}
SEARCH_PER_MINUTE = 10


def rent_limit_errors(onstart: str | None, args: Sequence[str] | None,
                      env: Mapping[str, str] | None, *, image: str | None = None,
                      label: str | None = None, args_str: str | None = None) -> list[str]:
    """Every published limit the request breaks, each naming the limit and its source; empty when
    it fits. Never quotes a value (env values are secrets)."""
    errors: list[str] = []
    onstart_len = len(onstart or "")
    if onstart_len > ONSTART_MAX_CHARS:
        errors.append(f"onstart is {onstart_len} characters; vast.ai accepts at most "
                      f"{ONSTART_MAX_CHARS}")
    combined = sum(len(a) for a in args or []) + len(args_str or "") + onstart_len
    if combined > ARGS_AND_ONSTART_MAX_CHARS:
        errors.append(f"args, args_str and onstart are {combined} characters together; vast.ai "
                      f"accepts at most {ARGS_AND_ONSTART_MAX_CHARS}")
    if image is not None and len(image) > IMAGE_MAX_CHARS:
        errors.append(f"the image name is {len(image)} characters; vast.ai accepts at most "
                      f"{IMAGE_MAX_CHARS}")
    if label is not None and len(label) > LABEL_MAX_CHARS:
        errors.append(f"the label is {len(label)} characters; vast.ai accepts at most "
                      f"{LABEL_MAX_CHARS}")
    total = 0
    for key, value in (env or {}).items():
        size = len(f"{key}={value}")
        total += size
        if size > ENV_ENTRY_MAX_CHARS:
            fix = (" (an RSA SSH key: use an ed25519 key, TAILPOD_SSH_KEY)"
                   if key == "PUBLIC_KEY" else "")
            errors.append(f"environment variable {key} is {size} characters as KEY=value; "
                          f"vast.ai accepts at most {ENV_ENTRY_MAX_CHARS} per entry{fix}")
    if total > ENV_TOTAL_MAX_CHARS:
        errors.append(f"the environment is {total} characters in all; vast.ai accepts at most "
                      f"{ENV_TOTAL_MAX_CHARS}")
    return errors


class WindowPacer:
    """At most `requests` calls in any `per_s` seconds: `wait()` sleeps until the next may go."""

    def __init__(self, requests: int, per_s: float, *,
                 clock: Callable[[], float] = time.monotonic,
                 sleep: Callable[[float], None] = time.sleep) -> None:
        self.requests, self.per_s, self.clock, self.sleep = requests, per_s, clock, sleep
        self.sent: deque[float] = deque()
        self.lock = threading.Lock()
        self.waited_s = 0.0

    def wait(self) -> float:
        with self.lock:
            now = self.clock()
            while self.sent and now - self.sent[0] >= self.per_s:
                self.sent.popleft()
            pause = 0.0
            if len(self.sent) >= self.requests:
                pause = self.per_s - (now - self.sent[0])
                self.sleep(pause)
                self.waited_s += pause
                self.sent.popleft()
                now = self.clock()
            self.sent.append(now)
            return pause
