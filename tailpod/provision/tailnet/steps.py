"""Settings-level calls for `check-requirements`, `up` and `down` (what the lead wires in)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from tailpod.config import Settings
from tailpod.errors import ConfigError
from tailpod.provision.base import ProofCheck
from tailpod.provision.ssh.client import SshTarget
from tailpod.provision.ssh.client_config import ssh_endpoint
from tailpod.provision.ssh.keys import resolve_key_path
from tailpod.provision.ssh.known_hosts import KnownHosts, known_hosts_path
from tailpod.provision.ssh.user_config import remove_ssh_config_entry, write_ssh_config_entry
from tailpod.provision.tailnet.api import TailscaleAPI
from tailpod.provision.tailnet.devices import (
    PROOF_NAME,
    TailnetDevice,
    remove_devices,
    tailnet_hostname,
    wait_for_device,
)
from tailpod.provision.tailnet.keys import AuthKeyCheck, check_auth_key
from tailpod.secrets import Secret

EventCallback = Callable[[str], None]


def api_from_settings(settings: Settings) -> TailscaleAPI:
    if not settings.tailscale_api_key:
        raise ConfigError(
            "TAILSCALE_API_KEY is not set",
            hint="tailpod needs an API access token (tskey-api-...) to check the auth key and "
            "remove the pod's device on down",
        )
    return TailscaleAPI(
        settings.tailscale_url, settings.tailscale_api_key, settings.tailscale_tailnet
    )


def check_tailnet_requirements(
    settings: Settings, *, allow_nonephemeral: bool = False
) -> AuthKeyCheck:
    """Preflight: the auth key exists, is usable and covers the tags the pod will advertise."""
    if not settings.tailscale_auth_key:
        raise ConfigError(
            "TAILSCALE_AUTH_KEY is not set",
            hint="create an ephemeral, pre-approved, tagged auth key (tskey-auth-...)",
        )
    with api_from_settings(settings) as api:
        return check_auth_key(
            api,
            settings.tailscale_auth_key,
            settings.tailscale_tags,
            allow_nonephemeral=allow_nonephemeral,
        )


# A per-pod auth key lives long enough for the pod to boot and join, and no longer.
POD_KEY_EXPIRY_S = 1800


def mint_pod_auth_key(settings: Settings, run_tag: str) -> tuple[str, Secret]:
    """A single-use, pre-approved, ephemeral auth key for one pod, with a short expiry and the
    pod's tags, so the pod's environment (readable through the provider's API for the pod's
    life, e.g. RunPod `GET /v2/pods` `env`) never holds a reusable key. Returns (key id, key)."""
    with api_from_settings(settings) as api:
        meta, secret = api.create_auth_key(
            list(settings.tailscale_tags), ephemeral=True, preauthorized=True, reusable=False,
            expiry_seconds=POD_KEY_EXPIRY_S, description=f"tailpod {run_tag}")
    return str(meta.get("id") or ""), secret


def revoke_pod_auth_key(settings: Settings, key_id: str) -> None:
    """Delete the pod's key once its device joined (single use, it is spent anyway)."""
    with api_from_settings(settings) as api:
        api.delete_key(key_id)


def wait_for_pod_device(
    settings: Settings,
    run_tag: str,
    timeout_s: float = 180.0,
    poll_s: float = 3.0,
    on_event: EventCallback | None = None,
) -> TailnetDevice:
    """After the pod ran its join step: its device, listed and connected (record `.to_record()`)."""
    with api_from_settings(settings) as api:
        return wait_for_device(api, tailnet_hostname(run_tag), timeout_s, poll_s, on_event)


def tailnet_ssh_target(
    settings: Settings, device: TailnetDevice | dict[str, Any], user: str = "root"
) -> SshTarget:
    """SSH target for a pod over the tailnet. The host key is pinned under the MagicDNS name; the
    connection goes to the 100.x address on port 22, or where TAILPOD_SSH_CONFIG maps it."""
    if isinstance(device, dict):
        name = str(device.get("name") or device.get("hostname") or "")
        address = device.get("address")
    else:
        name, address = device.name or device.hostname, device.address
    if not name:
        raise ConfigError("the tailnet record has no device name")
    host, port = ssh_endpoint(settings.ssh_config, str(address or ""), name)
    return SshTarget(host=host, port=port, user=user, name=name)


def tailnet_down_proof(settings: Settings, run_tag: str) -> ProofCheck:
    """Delete the pod's device (if still listed) and check it is gone: one check for `down`."""
    hostname = tailnet_hostname(run_tag)
    if not settings.tailscale_api_key:
        return ProofCheck(
            PROOF_NAME,
            False,
            f"TAILSCALE_API_KEY is unset, so {hostname} could not be deleted or checked "
            "(ephemeral nodes vanish on their own, but with no guaranteed timing)",
        )
    with api_from_settings(settings) as api:
        return remove_devices(api, hostname)


def remember_pod_ssh(settings: Settings, run_tag: str,
                     ssh_record: dict[str, Any]) -> tuple[Path, str]:
    """After a pod is up (`up`, or the replacement `benchmark --resume-on-preemption` rents): its
    `Host tailpod-<run_tag>` entry in tailpod's ssh_config, pinned to the host key `up` pinned.
    Returns the file and the `Include` line for ~/.ssh/config."""
    target = SshTarget.from_record(ssh_record)
    return write_ssh_config_entry(
        settings.home, run_tag, target.host, target.port, target.user,
        resolve_key_path(settings.ssh_key), host_key_alias=target.pin_name)


def forget_pod_ssh(settings: Settings, run_tag: str, ssh_record: dict[str, Any] | None) -> None:
    """After `down`: drop the pod's pinned host key and its ssh_config entry, so an address a
    provider later reuses for another pod is not refused as a changed key."""
    if ssh_record and ssh_record.get("host"):
        target = SshTarget.from_record(ssh_record)
        KnownHosts(known_hosts_path(settings.home)).forget(target.known_hosts_entry)
    remove_ssh_config_entry(settings.home, run_tag)
