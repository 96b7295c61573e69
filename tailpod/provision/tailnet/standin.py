"""The sandbox side of the tailnet: the one stand-in, and name resolution through the emulator.

Real pods run `tailscale up` (see join.py). Sandbox pods cannot: tailscaled is not available here
and the sandbox has no real control plane. `register_device_standin` is what a sandbox pod does
instead; it goes to the local Tailscale API emulator (tailpod/sandbox/tailscale.py), which
checks the auth key like the control plane would and lists the device. Both functions refuse any
Tailscale URL that is not on the loopback interface, so they can never touch the real service.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any
from urllib.parse import urlsplit

import httpx

from tailpod.provision.tailnet.api import TailnetError
from tailpod.secrets import Secret, redact

STANDIN_PATH = "/sandbox/standin"
_LOOPBACK = {"127.0.0.1", "localhost", "::1"}
SSH_PORT = 22


def is_sandbox_url(tailscale_url: str) -> bool:
    """True when TAILPOD_TAILSCALE_URL points at a local emulator rather than Tailscale."""
    host = urlsplit(tailscale_url).hostname or ""
    return host in _LOOPBACK or host.startswith("127.")


def _require_sandbox(tailscale_url: str) -> str:
    if not is_sandbox_url(tailscale_url):
        raise TailnetError(
            f"{tailscale_url} is not a local sandbox; the tailnet stand-in only talks to the "
            "emulator on 127.0.0.1"
        )
    return tailscale_url.rstrip("/") + STANDIN_PATH


def register_device_standin(
    tailscale_url: str,
    auth_key: Secret,
    hostname: str,
    ssh_host: str,
    ssh_port: int,
    tags: Sequence[str] = (),
    timeout_s: float = 10.0,
) -> dict[str, Any]:
    """STAND-IN for `tailscale up` on a sandbox pod: register `hostname` with the emulator using
    the pod's auth key, pointing its tailnet name at the pod's real sshd `ssh_host:ssh_port`."""
    url = _require_sandbox(tailscale_url) + "/register"
    body = {
        "authKey": auth_key.reveal(),
        "hostname": hostname,
        "tags": list(tags),
        "sshHost": ssh_host,
        "sshPort": int(ssh_port),
    }
    try:
        response = httpx.post(url, json=body, timeout=timeout_s)
    except httpx.HTTPError as exc:
        raise _unreachable(tailscale_url, exc) from None
    if response.status_code != 200:
        raise TailnetError(f"sandbox tailnet refused {hostname}: {_message(response)}")
    data = response.json()
    if not isinstance(data, dict):
        raise TailnetError("sandbox tailnet returned a non-object device")
    return data


def resolve_ssh_endpoint(
    tailscale_url: str, name_or_address: str, timeout_s: float = 10.0
) -> tuple[str, int]:
    """Where to open TCP for SSH to a tailnet device.

    On a real tailnet that is the device itself on port 22 (the pod's userspace tailscaled forwards
    inbound tailnet TCP to its 127.0.0.1:22). On a sandbox it is the sshd the pod registered.
    """
    if not is_sandbox_url(tailscale_url):
        return name_or_address, SSH_PORT
    url = _require_sandbox(tailscale_url) + "/endpoints"
    try:
        response = httpx.get(url, timeout=timeout_s)
    except httpx.HTTPError as exc:
        raise _unreachable(tailscale_url, exc) from None
    if response.status_code != 200:
        raise TailnetError(f"sandbox tailnet endpoint map failed: {_message(response)}")
    wanted = name_or_address.rstrip(".").lower()
    for entry in response.json().get("endpoints", []):
        names = {
            str(entry.get("hostname", "")).lower(),
            str(entry.get("name", "")).lower(),
            str(entry.get("name", "")).split(".", 1)[0].lower(),
            *(str(a).lower() for a in entry.get("addresses", [])),
        }
        if wanted in names:
            return str(entry["sshHost"]), int(entry["sshPort"])
    raise TailnetError(f"no device named {name_or_address} in the sandbox tailnet")


def _message(response: httpx.Response) -> str:
    try:
        body = response.json()
        text = str(body.get("message")) if isinstance(body, dict) else response.text
    except ValueError:
        text = response.text
    return f"{response.status_code} {redact(text)[:160]}"


def _unreachable(tailscale_url: str, exc: Exception) -> TailnetError:
    return TailnetError(f"sandbox tailnet unreachable at {tailscale_url}: {exc.__class__.__name__}")
