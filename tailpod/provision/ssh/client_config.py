"""Where to open TCP for a pod: its tailnet address on port 22, unless an SSH client config says
otherwise.

`TAILPOD_SSH_CONFIG` names an optional OpenSSH client config file (ssh_config(5) syntax, read with
paramiko.SSHConfig). A `Host` block matching the pod's tailnet address or MagicDNS name may set
`HostName` and `Port`: the connection goes there, while the host key stays pinned under the
tailnet name. Use it when the pod is reached through a forwarded port or a relay that listens
elsewhere; tailpod's sandbox writes one for its emulated tailnet. Other keywords are ignored.
"""

from __future__ import annotations

from pathlib import Path

import paramiko

from tailpod.errors import ConfigError

SSH_PORT = 22


def ssh_endpoint(config_path: Path | None, address: str, name: str = "") -> tuple[str, int]:
    """(host, port) for the pod whose tailnet address is `address` (else its name `name`): the
    first of the two a `Host` block of `config_path` matches with a HostName or Port, else
    `address` (or `name`) on port 22."""
    default = address or name
    if config_path is None:
        return default, SSH_PORT
    try:
        config = paramiko.SSHConfig.from_path(str(config_path))
    except OSError as exc:
        raise ConfigError(
            f"cannot read the SSH client config {config_path}: {exc.strerror or exc}",
            hint="fix TAILPOD_SSH_CONFIG or unset it",
        ) from None
    for candidate in (address, name):
        if not candidate:
            continue
        found = config.lookup(candidate)
        if "port" in found or found.get("hostname", candidate) != candidate:
            try:
                port = int(found.get("port", SSH_PORT))
            except ValueError:
                raise ConfigError(
                    f"{config_path}: Port for {candidate} is not a number"
                ) from None
            return str(found.get("hostname", candidate)), port
    return default, SSH_PORT
