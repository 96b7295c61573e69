"""Size limits of a vast.ai rent request (`PUT /api/v0/asks/{id}/`), checked before anything is
sent and enforced the same way by the sandbox's vast emulator (one source for both).

- `onstart`: at most 4048 characters ("`onstart` field is limited to 4048 characters -- gzip+base64
  for longer scripts", vast-ai/docs api-reference/openapi.yaml @ c624622622496828c1ae58edec481bba1f5d675d,
  info.description, "Key Quirks").
- `args` + `onstart`: at most 4096 characters together. This bound is reported for the vast CLI
  but is not in vast-ai/vast-cli @ 55679830a2c2adcf5c7fad08bf08717a9591062a; it is kept as the
  stricter combined bound (tailpod sends `onstart` only, so it never binds tailpod itself).
- An environment value: vast publishes no limit (docs @ c624622 name only a per-user count of
  stored env-vars). Each `KEY=value` reaches the container through Docker as one string, and Linux
  refuses a single argument or environment string longer than MAX_ARG_STRLEN = 32 pages =
  131072 bytes including its terminating NUL (torvalds/linux include/uapi/linux/binfmts.h), so
  that is the bound checked here.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

ONSTART_MAX_CHARS = 4048
ARGS_AND_ONSTART_MAX_CHARS = 4096
ENV_ENTRY_MAX_BYTES = 131072  # "KEY=value" plus its NUL


def rent_limit_errors(onstart: str | None, args: Sequence[str] | None,
                      env: Mapping[str, str] | None) -> list[str]:
    """Every limit the request breaks, each naming the limit; empty when it fits. Never quotes a
    value (env values are secrets)."""
    errors: list[str] = []
    onstart_len = len(onstart or "")
    if onstart_len > ONSTART_MAX_CHARS:
        errors.append(f"onstart is {onstart_len} characters; vast.ai accepts at most "
                      f"{ONSTART_MAX_CHARS}")
    args_len = sum(len(a) for a in args or [])
    if args and args_len + onstart_len > ARGS_AND_ONSTART_MAX_CHARS:
        errors.append(f"args + onstart are {args_len + onstart_len} characters; vast.ai accepts "
                      f"at most {ARGS_AND_ONSTART_MAX_CHARS} together")
    for key, value in (env or {}).items():
        if key.startswith("-"):  # "-p 8000:8000": a docker flag, not an environment entry
            continue
        size = len(f"{key}={value}".encode()) + 1
        if size > ENV_ENTRY_MAX_BYTES:
            errors.append(f"environment variable {key} is {size} bytes as KEY=value; a "
                          f"container environment entry is at most {ENV_ENTRY_MAX_BYTES} bytes")
    return errors
