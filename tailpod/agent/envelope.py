"""The agent's one answer: a JSON envelope on the last line of stdout (docs/agent.md).

    {"agent": AGENT_VERSION, "verb": "engine start", "ok": true, "result": {...}}
    {"agent": AGENT_VERSION, "verb": "engine start", "ok": false,
     "error": {"kind": "...", "message": "...", "tail": [...]}}

Exit codes: 0 ok, 1 the operation failed, 2 usage. Progress goes to stderr.
"""

from __future__ import annotations

import json
import math
import os
import re
import sys
from typing import Any

from . import AGENT_VERSION

EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2
# What the pod holds that no answer may carry, found by VALUE (issue 38 item 4): every variable
# whose name says credential (the probe's bearer token TAILPOD_PROBE_API_KEY, the pod-scoped
# RUNPOD_API_KEY, vast's CONTAINER_API_KEY, HF_TOKEN, a tailnet auth key), read from the agent's
# environment, the container's (/proc/1/environ: SSH sessions often do not inherit it) and the
# env file the pod's start script kept (`remember_env_file`). The laptop never learns these
# values, so masking them here is the one place that can find them whatever their shape.
_SECRET_NAME = re.compile(r"(?i)(TOKEN|SECRET|API_KEY|APIKEY|AUTHKEY|AUTH_KEY|PASSWORD)$")
_CONTAINER_ENVIRON = "/proc/1/environ"
_MIN_LEN = 6  # as tailpod/secrets.py: shorter values would mask ordinary words
_env_files = []  # type: list[str]


def _read_pairs(path: str) -> dict:
    """NUL-separated (an environ) or newline-separated KEY=VALUE pairs; {} when unreadable."""
    try:
        with open(path, "rb") as fh:
            raw = fh.read(1 << 20).decode("utf-8", errors="replace")
    except OSError:
        return {}
    pairs = {}
    for item in raw.replace("\0", "\n").splitlines():
        key, sep, value = item.partition("=")
        if sep and key:
            pairs[key.strip()] = value
    return pairs


def remember_env_file(path: object) -> None:
    """An env file whose credentials the answers must not carry (read at each scrub)."""
    if isinstance(path, str) and path and path not in _env_files:
        _env_files.append(path)


def secret_values() -> list:
    """The credential values on this pod, longest first (a value inside another goes second)."""
    found = set()
    sources = [dict(os.environ), _read_pairs(_CONTAINER_ENVIRON)]
    sources += [_read_pairs(path) for path in _env_files]
    for pairs in sources:
        for name, value in pairs.items():
            value = value.strip()
            if _SECRET_NAME.search(name) and len(value) >= _MIN_LEN:
                found.add(value)
    return sorted(found, key=len, reverse=True)


class AgentError(Exception):
    """An operation failed: `kind` names what (docs/agent.md), `tail` carries log lines."""

    def __init__(self, kind: str, message: str, tail: list[str] | None = None,
                 code: int = EXIT_FAILED) -> None:
        super().__init__(message)
        self.kind = kind
        self.tail = list(tail or [])
        self.code = code


class UsageError(AgentError):
    def __init__(self, message: str) -> None:
        super().__init__("usage", message, code=EXIT_USAGE)


def scrub(text: str, values: list | None = None) -> str:
    for value in secret_values() if values is None else values:
        if value in text:
            text = text.replace(value, "***")
    return text


def _scrubbed(value: Any, values: list) -> Any:
    if isinstance(value, str):
        return scrub(value, values)
    if isinstance(value, dict):
        return {k: _scrubbed(v, values) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_scrubbed(v, values) for v in value]
    return value


def _finite(value: Any) -> Any:
    """JSON has no NaN or infinity: such numbers travel as the strings "NaN", "+Inf", "-Inf"."""
    if isinstance(value, float) and not math.isfinite(value):
        return "NaN" if math.isnan(value) else ("+Inf" if value > 0 else "-Inf")
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
    return value


def success(verb: str, result: dict[str, Any]) -> dict[str, Any]:
    return {"agent": AGENT_VERSION, "verb": verb, "ok": True, "result": result}


def failure(verb: str, error: AgentError) -> dict[str, Any]:
    return {"agent": AGENT_VERSION, "verb": verb, "ok": False,
            "error": {"kind": error.kind, "message": scrub(str(error)),
                      "tail": [scrub(line) for line in error.tail]}}


def emit(envelope: dict[str, Any]) -> None:
    """Write the envelope as the last line of stdout, every string in it scrubbed."""
    clean = _scrubbed(_finite(envelope), secret_values())
    sys.stdout.write(json.dumps(clean, allow_nan=False) + "\n")
    sys.stdout.flush()
