"""Conveniences for the user's own tools: an `ssh` command line, an ssh_config file, a base URL.

tailpod never edits ~/.ssh/config. It writes its own file under TAILPOD_HOME and prints the one
`Include` line the user may add; every entry checks host keys against tailpod's known_hosts.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import re
from collections.abc import Iterator, Sequence
from pathlib import Path

from tailpod.provision.ssh.known_hosts import host_key_entry, known_hosts_path

CONFIG_NAME = "ssh_config"
_HEADER = ("# Written by tailpod: entries are added by `up` (and by `benchmark --resume-on-preemption`\n"
           "# for the pod it rents) and removed by `down`. Do not edit.\n")
_BLOCK = re.compile(r"# tailpod:begin (?P<tag>\S+)\n.*?# tailpod:end (?P=tag)\n", re.S)


def ssh_host_alias(run_tag: str) -> str:
    return f"tailpod-{run_tag}"


def openai_base_url(name: str, port: int) -> str:
    """The OpenAI-compatible base URL of an engine at `name:port` (e.g. over the tailnet)."""
    host = f"[{name}]" if ":" in name and not name.startswith("[") else name
    return f"http://{host}:{port}/v1"


def ssh_command(
    host: str,
    port: int,
    user: str,
    key_path: Path,
    known_hosts: Path,
    host_key_alias: str | None = None,
    extra: Sequence[str] = (),
) -> list[str]:
    """argv for the system `ssh`, checking the host key strictly against tailpod's pins."""
    alias = host_key_alias or host_key_entry(host, port)
    return [
        "ssh",
        "-i", str(key_path),
        "-p", str(port),
        "-o", "IdentitiesOnly=yes",
        "-o", f"UserKnownHostsFile={known_hosts}",
        "-o", "StrictHostKeyChecking=yes",
        "-o", f"HostKeyAlias={alias}",
        "-o", "UpdateHostKeys=no",
        "-o", "ServerAliveInterval=15",
        *extra,
        f"{user}@{host}",
    ]  # fmt: skip


def _quote(value: str) -> str:
    return f'"{value}"' if any(c.isspace() for c in value) else value


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    with open(path.with_name(path.name + ".lock"), "a+") as lock:
        fcntl.flock(lock.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock.fileno(), fcntl.LOCK_UN)


def _rewrite(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        fh.write(text)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)


def _without(text: str, run_tag: str) -> str:
    """The file's entries other than `run_tag`'s (only tailpod's own blocks are kept)."""
    return "".join(m.group(0) for m in _BLOCK.finditer(text) if m.group("tag") != run_tag)


def write_ssh_config_entry(
    home: Path,
    run_tag: str,
    host: str,
    port: int,
    user: str,
    key_path: Path,
    host_key_alias: str | None = None,
) -> tuple[Path, str]:
    """Add (or replace) the `Host tailpod-<run_tag>` entry in tailpod's own ssh config file.

    Returns the file and the `Include` line to put at the *top* of ~/.ssh/config (an Include
    after a `Host` line only applies inside that block).
    """
    path = Path(home) / CONFIG_NAME
    alias = host_key_alias or host_key_entry(host, port)
    block = "\n".join(
        [
            f"# tailpod:begin {run_tag}",
            f"Host {ssh_host_alias(run_tag)}",
            f"    HostName {host}",
            f"    Port {port}",
            f"    User {user}",
            f"    IdentityFile {_quote(str(Path(key_path).expanduser()))}",
            "    IdentitiesOnly yes",
            f"    UserKnownHostsFile {_quote(str(known_hosts_path(home)))}",
            "    StrictHostKeyChecking yes",
            f"    HostKeyAlias {alias}",
            "    UpdateHostKeys no",
            "    ServerAliveInterval 15",
            f"# tailpod:end {run_tag}",
            "",
        ]
    )
    with _locked(path):
        current = path.read_text(encoding="utf-8") if path.is_file() else ""
        _rewrite(path, _HEADER + _without(current, run_tag) + block)
    return path, f"Include {_quote(str(path.resolve()))}"


def remove_ssh_config_entry(home: Path, run_tag: str) -> bool:
    """Drop the entry for `run_tag` (after `down`). True when there was one."""
    path = Path(home) / CONFIG_NAME
    with _locked(path):
        if not path.is_file():
            return False
        current = path.read_text(encoding="utf-8")
        if not any(m.group("tag") == run_tag for m in _BLOCK.finditer(current)):
            return False
        _rewrite(path, _HEADER + _without(current, run_tag))
        return True
