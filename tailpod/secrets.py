"""Secret values that cannot be printed by accident, and a scrubber for text that might hold one."""

from __future__ import annotations

import re
import threading
from typing import Any

_known: set[str] = set()
_lock = threading.Lock()
_MASK = "***"


class Secret:
    """A string that masks itself in str(), repr(), f-strings and JSON-ish dumps.

    Call `reveal()` only at the point where the value leaves the process for its rightful
    destination (an HTTP header, a pod's environment).
    """

    __slots__ = ("_value",)

    def __init__(self, value: str) -> None:
        if not isinstance(value, str):
            raise TypeError("Secret takes a str")
        self._value = value
        if len(value) >= 6:
            with _lock:
                _known.add(value)

    def reveal(self) -> str:
        return self._value

    def hint(self) -> str:
        """A non-secret fingerprint (key type prefix and length) for messages."""
        prefix = self._value.split("-")[0] if "-" in self._value[:12] else ""
        return f"{prefix + '-' if prefix else ''}{_MASK}({len(self._value)} chars)"

    def __bool__(self) -> bool:
        return bool(self._value)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Secret) and other._value == self._value

    def __hash__(self) -> int:
        return hash(("Secret", self._value))

    def __str__(self) -> str:
        return _MASK

    def __repr__(self) -> str:
        return f"Secret({_MASK})"

    def __format__(self, spec: str) -> str:
        return _MASK

    def __reduce__(self) -> Any:
        raise TypeError("Secret values are not picklable")


# Credentials this process was never told of but that a pod's output can carry: the pod-scoped
# key RunPod injects (RUNPOD_API_KEY), vast's CONTAINER_API_KEY, the tailnet auth key, an HF
# token an engine echoes in its arguments. The pod agent masks them by value before anything
# leaves the pod (tailpod/agent/envelope.py); what reaches tailpod by another road (a provider's
# container log) is masked here by the name they are assigned to, by the header scheme that
# carries them (`Bearer X`, whatever X's characters) and by the shape of known key families.
_SENSITIVE_NAME = (r"(?:[A-Za-z0-9_]*(?:TOKEN|SECRET|API_KEY|APIKEY|AUTHKEY|AUTH_KEY|PASSWORD)"
                   r"|CONTAINER_API_KEY|AUTHORIZATION|X-API-KEY)")
_VALUE = r"[^\s'\",}\]\\]"  # a credential's characters: up to a quote, space, brace or backslash
_ASSIGNED = re.compile(
    rf"(?i)(?P<name>['\"]?\b{_SENSITIVE_NAME}['\"]?\s*[=:]\s*['\"]?)(?!(?:Bearer|Basic)\s)"
    rf"(?P<value>(?={_VALUE}*[A-Za-z]){_VALUE}{{6,}})")
# The credential after an HTTP auth scheme; an all-lowercase word after "bearer" is English,
# and `$NAME` is the shell variable a manual stop names in place of the key (provision/base.py).
_SCHEME = re.compile(
    rf"(?i)(?P<name>\b(?:Bearer|Basic)\s+)(?P<value>(?!\*\*\*|\$)(?-i:(?![a-z]+\b)){_VALUE}{{12,}})")
# Key families by prefix; `_` and `-` belong to the key (RunPod's pod keys and vast's instance
# keys as the sandbox issues them: tailpod/sandbox/cloud.py issue_pod_key), and a key glued to
# its name by `_` (RUNPOD_API_KEY_rpa_...) still starts a key.
_SHAPES = re.compile(r"(?<![A-Za-z0-9])(?:hf_[A-Za-z0-9]{20,}|tskey-[A-Za-z0-9-]{10,}"
                     r"|rpa_[A-Za-z0-9_-]{20,}|vast_inst_[A-Za-z0-9_-]{10,})")


def redact(text: str) -> str:
    """Replace every known secret value in `text` with a mask (every occurrence), then every
    credential after an HTTP auth scheme, every value assigned to a credential's name and every
    token of a known credential shape."""
    with _lock:
        values = sorted(_known, key=len, reverse=True)
    for value in values:
        if value in text:
            text = text.replace(value, _MASK)
    text = _SCHEME.sub(lambda m: m.group("name") + _MASK, text)
    text = _ASSIGNED.sub(lambda m: m.group("name") + (
        m.group("value") if m.group("value") == _MASK else _MASK), text)
    return _SHAPES.sub(_MASK, text)


def reveal_env(env: dict[str, str | Secret]) -> dict[str, str]:
    """Materialise an environment mapping for a child process or provider API call."""
    return {k: v.reveal() if isinstance(v, Secret) else v for k, v in env.items()}
