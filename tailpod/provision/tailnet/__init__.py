"""The tailnet: a small Tailscale API client, the pod-side join step, and the settings-level calls."""

from tailpod.provision.tailnet.api import TailnetError, TailnetNotFound, TailscaleAPI
from tailpod.provision.tailnet.devices import (
    TailnetDevice,
    find_devices,
    remove_devices,
    tailnet_hostname,
    wait_for_device,
)
from tailpod.provision.tailnet.join import AUTH_KEY_ENV, join_script, pod_env
from tailpod.provision.tailnet.keys import AuthKeyCheck, auth_key_id, check_auth_key
from tailpod.provision.tailnet.steps import (
    api_from_settings,
    check_tailnet_requirements,
    forget_pod_ssh,
    tailnet_down_proof,
    tailnet_ssh_target,
    wait_for_pod_device,
)

__all__ = [
    "AUTH_KEY_ENV",
    "AuthKeyCheck",
    "TailnetDevice",
    "TailnetError",
    "TailnetNotFound",
    "TailscaleAPI",
    "api_from_settings",
    "auth_key_id",
    "check_auth_key",
    "check_tailnet_requirements",
    "find_devices",
    "forget_pod_ssh",
    "join_script",
    "pod_env",
    "remove_devices",
    "tailnet_down_proof",
    "tailnet_hostname",
    "tailnet_ssh_target",
    "wait_for_device",
    "wait_for_pod_device",
]
