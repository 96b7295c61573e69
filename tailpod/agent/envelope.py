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
import sys
from typing import Any

from . import AGENT_VERSION

EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2
# The probe's optional bearer token (probes/common.API_KEY_ENV); no error text may carry it.
_SECRET_ENV = ("TAILPOD_PROBE_API_KEY",)


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


def scrub(text: str) -> str:
    for name in _SECRET_ENV:
        value = os.environ.get(name)
        if value:
            text = text.replace(value, "***")
    return text


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
    """Write the envelope as the last line of stdout."""
    sys.stdout.write(json.dumps(_finite(envelope), allow_nan=False) + "\n")
    sys.stdout.flush()
