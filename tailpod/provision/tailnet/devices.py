"""The pod's device in the tailnet: wait for it after `tailscale up`, delete it on `down`.

A pod is found by its hostname, `tailpod-<run tag>`, which `tailscale up --hostname` sets. There is
no `online` field in the public API; `connectedToControl` is what says the node is up.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from tailpod.errors import ProviderError
from tailpod.provision.base import ProofCheck
from tailpod.provision.tailnet.api import TailnetError, TailnetNotFound, TailscaleAPI
from tailpod.provision.tailnet.keys import parse_time

EventCallback = Callable[[str], None]
PROOF_NAME = "tailnet device removed"


def tailnet_hostname(run_tag: str) -> str:
    """`tailpod-<run tag>` as a valid DNS label (lowercase, [a-z0-9-], at most 63 chars)."""
    label = re.sub(r"[^a-z0-9]+", "-", f"tailpod-{run_tag}".lower()).strip("-")
    return label[:63].rstrip("-")


@dataclass(frozen=True)
class TailnetDevice:
    device_id: str
    node_id: str
    hostname: str
    name: str  # MagicDNS name, e.g. tailpod-tp-x.tail1234.ts.net
    address: str | None  # the 100.x IPv4 address
    addresses: tuple[str, ...] = ()
    connected: bool = False
    ephemeral: bool | None = None
    tags: tuple[str, ...] = field(default_factory=tuple)

    @property
    def api_id(self) -> str:
        """The id for /device/{id}: nodeId preferred, legacy numeric id otherwise."""
        return self.node_id or self.device_id

    def to_record(self) -> dict[str, Any]:
        """What PodRecord.tailnet stores."""
        return {
            "hostname": self.hostname,
            "name": self.name,
            "address": self.address,
            "node_id": self.node_id,
            "device_id": self.device_id,
            "ephemeral": self.ephemeral,
            "tags": list(self.tags),
        }

    @classmethod
    def from_api(cls, data: dict[str, Any]) -> TailnetDevice:
        addresses = tuple(str(a) for a in data.get("addresses") or [])
        v4 = next((a for a in addresses if a.count(".") == 3), None)
        return cls(
            device_id=str(data.get("id") or ""),
            node_id=str(data.get("nodeId") or ""),
            hostname=str(data.get("hostname") or ""),
            name=str(data.get("name") or "").rstrip("."),
            address=v4,
            addresses=addresses,
            connected=bool(data.get("connectedToControl")),
            ephemeral=data.get("isEphemeral"),
            tags=tuple(data.get("tags") or ()),
        )


def find_devices(api: TailscaleAPI, hostname: str) -> list[TailnetDevice]:
    """Every device whose hostname is `hostname`, newest first."""
    wanted = hostname.lower()
    raw = [d for d in api.list_devices() if str(d.get("hostname") or "").lower() == wanted]
    oldest = dt.datetime.min.replace(tzinfo=dt.timezone.utc)
    raw.sort(key=lambda d: parse_time(d.get("created")) or oldest, reverse=True)
    return [TailnetDevice.from_api(d) for d in raw]


def wait_for_device(
    api: TailscaleAPI,
    hostname: str,
    timeout_s: float = 180.0,
    poll_s: float = 3.0,
    on_event: EventCallback | None = None,
) -> TailnetDevice:
    """Poll until a device named `hostname` is listed and connected to control, or time out."""
    deadline = time.monotonic() + timeout_s
    state = "not listed"
    while True:
        devices = find_devices(api, hostname)
        connected = [d for d in devices if d.connected]
        if connected:
            device = connected[0]
            if on_event is not None:
                on_event(f"{hostname} joined the tailnet as {device.name} ({device.address})")
            return device
        state = "listed but not connected to control" if devices else "not listed"
        if time.monotonic() >= deadline:
            break
        time.sleep(min(poll_s, max(0.0, deadline - time.monotonic())))
    raise TailnetError(
        f"the pod did not join the tailnet as {hostname} within {timeout_s:.0f} s ({state})",
        hint="read the pod's tailscale-join log; is the auth key still valid and are its tags "
        "allowed by your tailnet policy?",
    )


def remove_devices(api: TailscaleAPI, hostname: str) -> ProofCheck:
    """Delete every device named `hostname`, then check the tailnet no longer lists one.

    The result is one check for `down`'s billing-stopped proof: a stray tagged node does not bill
    by itself, but it keeps a dead pod's name and address in the user's tailnet.
    """
    try:
        devices = find_devices(api, hostname)
        for device in devices:
            with contextlib.suppress(TailnetNotFound):  # an ephemeral node may have gone itself
                api.delete_device(device.api_id)
        left = find_devices(api, hostname)
    except ProviderError as exc:  # TailnetError, or AuthError for a rejected token
        return ProofCheck(PROOF_NAME, False, f"could not check the tailnet for {hostname}: {exc}")
    if left:
        ids = ", ".join(d.api_id for d in left)
        return ProofCheck(PROOF_NAME, False, f"{hostname} is still listed in the tailnet ({ids})")
    if devices:
        return ProofCheck(
            PROOF_NAME, True, f"deleted {len(devices)} device(s) named {hostname}; none listed now"
        )
    return ProofCheck(PROOF_NAME, True, f"no device named {hostname} is listed in the tailnet")
