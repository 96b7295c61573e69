"""Check 8: the SSH key tailpod hands to pods is present and loads (with its passphrase)."""

from __future__ import annotations

import stat
from pathlib import Path

import paramiko

from tailpod.preflight.base import Context, Findings, Outcome
from tailpod.preflight.cloud import remote_provider
from tailpod.provision.providers import SSH_BOX, canonical_name
from tailpod.provision.ssh.keys import load_private_key, resolve_key_path


def check_ssh(ctx: Context) -> Outcome:
    if canonical_name(ctx.settings.provider) != SSH_BOX:  # your own box is reached over SSH too
        remote_provider(ctx)  # the local provider needs no SSH
    settings = ctx.settings
    path = resolve_key_path(settings.ssh_key)
    key = load_private_key(path, settings.ssh_key_passphrase)
    found = Findings()
    protected = "passphrase-protected" if _encrypted(path) else "no passphrase"
    found.ok(f"{key.get_name()} key {path} ({protected})")
    mode = stat.S_IMODE(path.stat().st_mode)
    if mode & 0o077:
        found.warn(f"{path} is readable by other users (mode {mode:04o}); OpenSSH refuses such a "
                   "key, so `tailpod ssh` would fail", f"chmod 600 {path}")
    return found.outcome({"path": str(path), "type": key.get_name(),
                          "passphrase": protected != "no passphrase"})


def _encrypted(path: Path) -> bool:
    """Whether loading needed the passphrase (load_private_key already succeeded)."""
    try:
        paramiko.PKey.from_path(str(path), None)
    except (TypeError, paramiko.PasswordRequiredException):
        return True
    except Exception:
        return False
    return False
