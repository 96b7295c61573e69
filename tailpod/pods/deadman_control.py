"""Laptop side of the on-pod dead-man switch: what tailpod asks the pod agent to arm, and the
stage-0 guard it packs into the pod's start command.

The switch itself is the agent's `deadman` verbs (tailpod/agent/bootstrap/deadman.py), driven by
`PodAgent.deadman_arm` / `deadman_heartbeat` (tailpod/agent_client/driver.py); `arm_request` is the
`deadman arm` input. Arming is idempotent; a heartbeat is the periodic "tailpod is still here"
that `status` and `benchmark` send. No credential ever appears in a request: the pod's provider
injects them into its environment (RunPod `RUNPOD_POD_ID`/`RUNPOD_API_KEY`, vast.ai
`CONTAINER_ID`/`CONTAINER_API_KEY`), and the switch reads them there, or from the container's
environment file when an SSH session does not inherit them.
"""
from __future__ import annotations

import base64
import shlex
import zlib
from typing import Any

from tailpod.agent.bootstrap.terminate import ALIASES, PROVIDERS
from tailpod.agent_client.build import guard_code
from tailpod.agent_client.layout import DeadmanLayout
from tailpod.config import Settings
from tailpod.errors import ConfigError
from tailpod.provision import providers as providers_mod

DEFAULT_POLL_S = 30.0
DEFAULT_PYTHON = "python3"
CONTAINER_ENVIRON = "/proc/1/environ"

# The switch's provider names, aliases and credential variables are the agent's own (it runs on
# the pod without tailpod, so it is their single source).


def provider_name(provider: str) -> str:
    """The switch's provider name for tailpod's provider names ("vast" is accepted too)."""
    name = ALIASES.get(provider.strip().lower())
    if name is None:
        raise ConfigError(f"the dead-man switch has no provider {provider!r}",
                          hint="it runs on rented pods only: runpod or vastai")
    return name


def heartbeat_timeout_for(settings: Settings) -> float:
    """`TAILPOD_HEARTBEAT_TIMEOUT` checked: 0 means TTL only, otherwise at least a minute."""
    value = float(settings.heartbeat_timeout_s)
    if 0 < value < 60:
        raise ConfigError(
            f"TAILPOD_HEARTBEAT_TIMEOUT={value:g} s is too short for a heartbeat sent over SSH",
            hint="use at least 60 s (the default is 1800)",
        )
    return value


def api_url_for(settings: Settings, provider: str) -> str:
    """The provider API the pod should call: the one tailpod uses (the sandbox's in tests)."""
    return providers_mod.api_url(settings, provider_name(provider))


def arm_request(
    settings: Settings,
    provider: str,
    ttl_at: float,
    layout: DeadmanLayout,
    *,
    environ_from: str = CONTAINER_ENVIRON,
    **options: Any,
) -> dict[str, Any]:
    """The agent's `deadman arm` input (docs/agent.md), heartbeat timeout and API URL from
    settings; `options` are the verb's other keys (poll, dry_run, …). Never a credential."""
    heartbeat_timeout_s = heartbeat_timeout_for(settings)
    if ttl_at <= 0 and heartbeat_timeout_s <= 0:
        raise ConfigError("the dead-man switch needs a TTL or a heartbeat timeout")
    return {
        "provider": provider_name(provider),
        "ttl_at": ttl_at,
        "heartbeat_file": layout.heartbeat,
        "heartbeat_timeout": heartbeat_timeout_s,
        "api_url": api_url_for(settings, provider),
        "log": layout.log,
        "environ_from": environ_from,
        **options,
    }


# Stage 0, in the pod's start command: the agent is not on the pod until tailpod's SSH bootstrap
# uploads it, and the laptop may die before that. The guard is tailpod/agent/bootstrap/guard.py
# (readable, tested source), minified for one provider by agent_build.guard_code with the agent's
# one termination table (tailpod/agent/bootstrap/terminate.py).
def start_guard(provider: str, ttl_at: float, heartbeat_timeout_s: float,
                api_url: str | None = None, *, layout: DeadmanLayout | None = None,
                python: str = DEFAULT_PYTHON, poll_s: float = DEFAULT_POLL_S,
                retry_s: float = 5.0) -> str:
    """A shell fragment for the pod's start command that arms the stage-0 guard in background.

    Protects the window between create and the SSH bootstrap; ends with `;` so a command can
    follow. Credentials come from the container's environment, never from this text. The code
    travels deflated and base85-wrapped: vast.ai takes at most 4048 characters of `onstart`,
    and the whole start command must fit (tests/integration/deadman/test_deadman_control.py).
    """
    layout = layout or DeadmanLayout()
    name = provider_name(provider)
    base = api_url or PROVIDERS[name]["api_url"]
    deflate = zlib.compressobj(9, zlib.DEFLATED, -15)  # raw deflate: no header, no checksum
    raw = deflate.compress(guard_code(name, poll_s, retry_s).encode()) + deflate.flush()
    packed = base64.b85encode(raw).decode()  # no quote or backslash in base85's alphabet
    code = f"import zlib,base64;exec(zlib.decompress(base64.b85decode('{packed}'),-15))"
    argv = [python, "-c", code, name, f"{ttl_at:.3f}", f"{heartbeat_timeout_s:g}",
            layout.heartbeat, base.rstrip("/")]
    # A "~/" layout follows the container's $HOME (the sandbox's pods each have their own).
    home_relative = layout.remote_dir.startswith("~/")
    mkdir = (f'"$HOME"/{shlex.quote(layout.remote_dir[2:])}' if home_relative
             else shlex.quote(layout.remote_dir))
    return (f"mkdir -p {mkdir}; "
            f"nohup {shlex.join(argv)} </dev/null >/dev/null 2>&1 &")


def guarded_start_command(start_command: list[str], provider: str, ttl_at: float,
                          heartbeat_timeout_s: float, api_url: str | None = None,
                          **kwargs: Any) -> list[str]:
    """`start_command` preceded by the stage-0 guard, as one `sh -c` argv for PodSpec."""
    guard = start_guard(provider, ttl_at, heartbeat_timeout_s, api_url, **kwargs)
    rest = f" exec {shlex.join(start_command)}" if start_command else " exec sleep infinity"
    return ["/bin/sh", "-c", guard + rest]

