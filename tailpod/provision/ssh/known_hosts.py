"""tailpod's own known-hosts file and the trust-on-first-use policy that writes it.

A pod's host key is pinned the first time tailpod talks to it and checked on every later contact.
paramiko only consults the missing-host-key policy when the file has *no* entry for the name, so a
changed key can never reach the pinning code: paramiko raises BadHostKeyException, which the SSH
layer turns into a TailpodError. The file is in OpenSSH format so the system `ssh` can use it too
(`-o UserKnownHostsFile=... -o HostKeyAlias=...`).
"""

from __future__ import annotations

import base64
import contextlib
import fcntl
import hashlib
import os
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import paramiko

from tailpod.provision.ssh.errors import HostKeyChanged

SSH_DEFAULT_PORT = 22
_process_lock = threading.Lock()


def known_hosts_path(home: Path) -> Path:
    return Path(home) / "known_hosts"


def host_key_entry(name: str, port: int) -> str:
    """The known_hosts name for (name, port), spelled the way OpenSSH and paramiko spell it."""
    return name if port == SSH_DEFAULT_PORT else f"[{name}]:{port}"


def fingerprint(key: paramiko.PKey) -> str:
    """OpenSSH-style SHA256 fingerprint, e.g. SHA256:abc... (no padding)."""
    digest = hashlib.sha256(key.asbytes()).digest()
    return "SHA256:" + base64.b64encode(digest).decode().rstrip("=")


class KnownHosts:
    """The pinned host keys under TAILPOD_HOME, safe for concurrent tailpod processes."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self._lock_path = self.path.with_name(self.path.name + ".lock")

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        self.path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        with _process_lock, open(self._lock_path, "a+") as lock:
            fcntl.flock(lock.fileno(), fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(lock.fileno(), fcntl.LOCK_UN)

    def load(self) -> paramiko.HostKeys:
        keys = paramiko.HostKeys()
        if self.path.is_file():
            keys.load(str(self.path))
        return keys

    def lookup(self, entry: str) -> dict[str, paramiko.PKey]:
        found = self.load().lookup(entry)
        return dict(found) if found is not None else {}

    def pin(self, entry: str, key: paramiko.PKey) -> bool:
        """Record `key` for `entry` if nothing is pinned there yet.

        Returns True when it pinned, False when this exact key was already pinned (another process
        won the race). Raises HostKeyChanged when a different key is already pinned.
        """
        with self._locked():
            existing = self.lookup(entry)
            if existing:
                if any(k == key for k in existing.values()):
                    return False
                pinned = next(iter(existing.values()))
                raise changed_key_error(entry, pinned, key, self.path)
            line = f"{entry} {key.get_name()} {key.get_base64()}\n"
            fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
            try:
                os.write(fd, line.encode())
                os.fsync(fd)
            finally:
                os.close(fd)
            return True

    def forget(self, entry: str) -> int:
        """Drop every key pinned for `entry` (after `down`, so a reused address is not refused)."""
        with self._locked():
            if not self.path.is_file():
                return 0
            kept: list[str] = []
            dropped = 0
            for line in self.path.read_text(encoding="utf-8").splitlines(keepends=True):
                names = line.split(" ", 1)[0].split(",") if line.strip() else []
                if entry in names and not line.lstrip().startswith("#"):
                    dropped += 1
                    continue
                kept.append(line)
            if dropped:
                tmp = self.path.with_name(self.path.name + ".tmp")
                fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
                with os.fdopen(fd, "w", encoding="utf-8") as fh:
                    fh.writelines(kept)
                    fh.flush()
                    os.fsync(fh.fileno())
                os.replace(tmp, self.path)
            return dropped


def changed_key_error(
    entry: str, pinned: paramiko.PKey, offered: paramiko.PKey, path: Path
) -> HostKeyChanged:
    return HostKeyChanged(
        f"host key for {entry} changed (pinned {fingerprint(pinned)}, offered "
        f"{fingerprint(offered)}); refusing to connect",
        hint=f"if the pod was really replaced, remove {entry} from {path} "
        "(`down` does this for pods it tears down)",
    )


class PinOnFirstContact(paramiko.MissingHostKeyPolicy):
    """Accept an unknown host key once, pin it in tailpod's known_hosts, and report it.

    paramiko calls this only for a name with no pinned key at all; a name with a pinned key that
    does not match never gets here (BadHostKeyException), so this can never overwrite a pin.
    """

    def __init__(
        self, known_hosts: KnownHosts, on_pin: Callable[[str, str], None] | None = None
    ) -> None:
        self.known_hosts = known_hosts
        self.on_pin = on_pin

    def missing_host_key(
        self, client: paramiko.SSHClient, hostname: str, key: paramiko.PKey
    ) -> None:
        # Another tailpod process may have pinned this name since the client loaded the file;
        # pin() re-reads under the lock and raises if that pin disagrees.
        newly = self.known_hosts.pin(hostname, key)
        client.get_host_keys().add(hostname, key.get_name(), key)
        if newly and self.on_pin is not None:
            self.on_pin(hostname, fingerprint(key))
