"""SSH to pods: pinned host keys, waiting while a pod boots, live command output, file transfer."""

from tailpod.provision.ssh.client import (
    CommandResult,
    SshSession,
    SshTarget,
    boot_wait_seconds,
    open_ssh,
)
from tailpod.provision.ssh.errors import HostKeyChanged, SshAuthRefused, SshError, SshUnreachable
from tailpod.provision.ssh.keys import load_private_key, public_key_line, resolve_key_path
from tailpod.provision.ssh.known_hosts import (
    KnownHosts,
    PinOnFirstContact,
    fingerprint,
    host_key_entry,
    known_hosts_path,
)
from tailpod.provision.ssh.user_config import (
    openai_base_url,
    remove_ssh_config_entry,
    ssh_command,
    ssh_host_alias,
    write_ssh_config_entry,
)

__all__ = [
    "CommandResult",
    "HostKeyChanged",
    "KnownHosts",
    "PinOnFirstContact",
    "SshAuthRefused",
    "SshError",
    "SshSession",
    "SshTarget",
    "SshUnreachable",
    "boot_wait_seconds",
    "fingerprint",
    "host_key_entry",
    "known_hosts_path",
    "load_private_key",
    "open_ssh",
    "openai_base_url",
    "public_key_line",
    "remove_ssh_config_entry",
    "resolve_key_path",
    "ssh_command",
    "ssh_host_alias",
    "write_ssh_config_entry",
]
