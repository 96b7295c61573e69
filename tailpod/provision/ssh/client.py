"""One SSH session to a pod: connect (waiting while it boots), upload, run with live output, fetch.

The TCP connection is opened to `target.host:target.port` (a tailnet address, a provider's SSH
endpoint, or a sandbox sshd), while the host key is pinned under `target.name` — the name the user
knows the pod by — so a tailnet name keeps its pin even if its address is looked up differently.
"""

from __future__ import annotations

import codecs
import collections
import contextlib
import logging
import os
import posixpath
import select
import socket
import stat
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import paramiko
from tenacity import (
    RetryCallState,
    Retrying,
    retry_if_exception,
    stop_after_delay,
    wait_exponential,
)

from tailpod.config import Settings
from tailpod.provision.ssh.errors import SshAuthRefused, SshError, SshUnreachable
from tailpod.provision.ssh.keys import load_private_key, resolve_key_path
from tailpod.provision.ssh.known_hosts import (
    SSH_DEFAULT_PORT,
    KnownHosts,
    PinOnFirstContact,
    changed_key_error,
    fingerprint,
    host_key_entry,
    known_hosts_path,
)
from tailpod.secrets import redact

# paramiko logs a failed handshake (no banner, a dropped connection) with its traceback at ERROR;
# with no handler anywhere Python's last-resort handler prints that on stderr, beside tailpod's
# own one-line error (issue 38). A handler here keeps it off stderr; `--verbose` logging that
# configures the root logger still receives it.
logging.getLogger("paramiko").addHandler(logging.NullHandler())

LineCallback = Callable[[str], None]
EventCallback = Callable[[str], None]


def boot_wait_seconds(
    image_gb: float | None, base_s: float = 120.0, per_gb_s: float = 15.0, cap_s: float = 1800.0
) -> float:
    """How long to wait for a pod's sshd: a cold pull of a 16 GB image alone took ~165 s (vs
    33 s cached: a RunPod user's measurement in Crazytieguy/alignment-hive issue #98, not
    re-checked), and RunPod
    publishes the SSH port only once the container runs (dstackai/dstack issue #1145), so the
    wait grows with the image instead of being one fixed number."""
    size = max(0.0, image_gb or 0.0)
    return min(cap_s, base_s + per_gb_s * size)


@dataclass(frozen=True)
class SshTarget:
    """Where a pod's sshd is and which name its host key is pinned under."""

    host: str
    port: int = SSH_DEFAULT_PORT
    user: str = "root"
    name: str | None = None  # defaults to host

    @property
    def pin_name(self) -> str:
        return self.name or self.host

    @property
    def known_hosts_entry(self) -> str:
        return host_key_entry(self.pin_name, self.port)

    def describe(self) -> str:
        via = f" via {self.host}:{self.port}" if self.name and self.name != self.host else ""
        plain_port = self.port == SSH_DEFAULT_PORT
        where = self.pin_name if via or plain_port else f"{self.host}:{self.port}"
        return f"{self.user}@{where}{via}"

    def to_record(self) -> dict[str, Any]:
        """What PodRecord.ssh stores, so `tailpod ssh` can reconnect later."""
        return {"host": self.host, "port": self.port, "user": self.user, "name": self.pin_name}

    @classmethod
    def from_record(cls, data: dict[str, Any]) -> SshTarget:
        return cls(
            host=str(data["host"]),
            port=int(data.get("port") or SSH_DEFAULT_PORT),
            user=str(data.get("user") or "root"),
            name=data.get("name") or None,
        )


@dataclass
class CommandResult:
    command: str
    exit_status: int
    duration_s: float
    tail: list[str] = field(default_factory=list)  # last lines, already redacted

    @property
    def ok(self) -> bool:
        return self.exit_status == 0

    def check(self, what: str = "the command") -> CommandResult:
        if not self.ok:
            last = self.tail[-1] if self.tail else "no output"
            raise SshError(f"{what} exited with status {self.exit_status}: {last[:200]}")
        return self


class _Retryable(Exception):
    """A connection attempt failed in a way a booting pod produces; try again."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def _reason(exc: BaseException) -> str:
    if isinstance(exc, ConnectionRefusedError):
        return "connection refused"
    if isinstance(exc, (socket.timeout, TimeoutError)):
        return "timed out"
    if isinstance(exc, socket.gaierror):
        return "name does not resolve"
    if isinstance(exc, EOFError):
        return "connection closed during handshake"
    if isinstance(exc, OSError) and exc.strerror:
        return exc.strerror.lower()
    if "protocol banner" in str(exc):  # paramiko's words for a port that never spoke SSH
        return "the port accepted the connection but no SSH server answered (no banner)"
    text = str(exc).splitlines()[0] if str(exc) else exc.__class__.__name__
    return text[:120]


class SshSession:
    """An open, authenticated connection. Use as a context manager or call close()."""

    def __init__(self, client: paramiko.SSHClient, target: SshTarget) -> None:
        self.client = client
        self.target = target
        self._sftp: paramiko.SFTPClient | None = None

    # -- connecting ---------------------------------------------------------------------------

    @classmethod
    def connect(
        cls,
        target: SshTarget,
        key: paramiko.PKey,
        known_hosts: Path,
        *,
        wait_s: float = 60.0,
        connect_timeout_s: float = 10.0,
        keepalive_s: int = 15,
        on_event: EventCallback | None = None,
    ) -> SshSession:
        """Connect, retrying refused/timed-out/half-open attempts until `wait_s` has passed.

        Authentication failures and host-key mismatches are never retried.
        """
        pins = KnownHosts(known_hosts)

        started = time.monotonic()

        def left() -> float:
            return max(0.0, wait_s - (time.monotonic() - started))

        def attempt() -> paramiko.SSHClient:
            # One attempt (connect, banner, auth) never runs past the wait: a caller's deadline
            # (`down --timeout` over SSH) holds, where a fixed 10 s per attempt overran it.
            return _connect_once(target, key, pins, max(0.5, min(connect_timeout_s, left())),
                                 on_event)

        backoff = wait_exponential(multiplier=1, min=1, max=10)

        def before_sleep(state: RetryCallState) -> None:
            if on_event is None or state.outcome is None:
                return
            exc = state.outcome.exception()
            left = max(0.0, wait_s - (state.seconds_since_start or 0.0))
            reason = exc.reason if isinstance(exc, _Retryable) else str(exc)
            on_event(f"waiting for SSH on {target.describe()}: {reason} ({left:.0f} s left)")

        retrying = Retrying(
            stop=stop_after_delay(wait_s),
            wait=lambda state: min(backoff(state), left()),  # no sleep past the wait
            retry=retry_if_exception(lambda e: isinstance(e, _Retryable)),
            before_sleep=before_sleep,
            reraise=True,
        )
        try:
            client = retrying(attempt)
        except _Retryable as exc:
            raise SshUnreachable(
                f"cannot reach {target.describe()} over SSH within {wait_s:.0f} s: {exc.reason}",
                hint="check the pod is running and its SSH endpoint/tailnet name is right",
            ) from None
        transport = client.get_transport()
        if transport is not None:
            transport.set_keepalive(keepalive_s)
        return cls(client, target)

    # -- running commands ---------------------------------------------------------------------

    def run(
        self,
        command: str,
        on_line: LineCallback | None = None,
        *,
        timeout_s: float | None = None,
        combine_stderr: bool = True,
        keep_lines: int = 200,
        stdin: bytes | None = None,
        stdout_sink: bytearray | None = None,
    ) -> CommandResult:
        """Run `command` on the pod, passing each output line (redacted) to `on_line` as it
        arrives, and return its exit status. A timeout closes the channel and raises SshError.

        `stdin` is written to the command and then closed (inputs that must stay out of argv);
        with `stdout_sink`, stdout is collected there whole instead of being split into lines
        (a result the caller parses), and only stderr reaches `on_line`."""
        transport = self._transport()
        started = time.monotonic()
        deadline = started + timeout_s if timeout_s else None
        tail: collections.deque[str] = collections.deque(maxlen=keep_lines)
        out = _LineSplitter(on_line, tail)
        err = _LineSplitter(on_line, tail)
        chan = transport.open_session(timeout=30)
        try:
            chan.set_combine_stderr(combine_stderr and stdout_sink is None)
            chan.exec_command(command)
            if stdin is not None:
                chan.sendall(stdin)
                chan.shutdown_write()
            while True:
                with contextlib.suppress(OSError, ValueError):
                    select.select([chan], [], [], 0.2)
                while chan.recv_ready():
                    chunk = chan.recv(65536)
                    if stdout_sink is not None:
                        stdout_sink.extend(chunk)
                    else:
                        out.feed(chunk)
                while chan.recv_stderr_ready():
                    err.feed(chan.recv_stderr(65536))
                if chan.exit_status_ready() and not chan.recv_ready() and not (
                    chan.recv_stderr_ready()
                ):
                    break
                if chan.closed or not transport.is_active():
                    raise SshError(
                        f"connection to {self.target.describe()} was lost while running a command"
                    )
                if deadline is not None and time.monotonic() > deadline:
                    raise SshError(
                        f"command on {self.target.describe()} did not finish within "
                        f"{timeout_s:.0f} s; it was stopped"
                    )
            out.flush()
            err.flush()
            status = chan.recv_exit_status()
            if status == -1 and not transport.is_active():
                # paramiko's -1: the channel closed with no exit status, here because the whole
                # connection went (the pod, its sshd or the network): say so, not "exit -1"
                # (adversary-2026-12 #28). A command killed by a signal also reads -1, but over
                # a connection that is still up.
                raise SshError(
                    f"connection to {self.target.describe()} was lost while running a command"
                )
        finally:
            chan.close()
        return CommandResult(command, status, time.monotonic() - started, list(tail))

    # -- files --------------------------------------------------------------------------------

    def upload(self, local: Path, remote: str, mode: int | None = None) -> list[str]:
        """Copy a local file or directory tree to `remote` (absolute, or relative to the login
        directory), creating parent directories. File modes are kept unless `mode` is given."""
        local = Path(local)
        if not local.exists():
            raise SshError(f"cannot upload {local}: it does not exist")
        written: list[str] = []
        if local.is_dir():
            for dirpath, _dirs, files in os.walk(local):
                rel = Path(dirpath).relative_to(local)
                rdir = posixpath.join(remote, *rel.parts) if rel.parts else remote
                self._mkdir_p(rdir)
                for name in sorted(files):
                    rpath = posixpath.join(rdir, name)
                    written.append(self._put(Path(dirpath) / name, rpath, mode))
            return written
        self._mkdir_p(posixpath.dirname(remote) or ".")
        written.append(self._put(local, remote, mode))
        return written

    def fetch(self, remote: str, local: Path) -> list[Path]:
        """Copy a remote file or directory tree back to `local`; returns the files written."""
        sftp = self.sftp()
        try:
            attrs = sftp.stat(remote)
        except OSError:
            raise SshError(f"{remote} does not exist on {self.target.describe()}") from None
        local = Path(local)
        if attrs.st_mode is not None and stat.S_ISDIR(attrs.st_mode):
            return self._fetch_dir(remote, local)
        local.parent.mkdir(parents=True, exist_ok=True)
        sftp.get(remote, str(local))
        return [local]

    def sftp(self) -> paramiko.SFTPClient:
        if self._sftp is None:
            self._sftp = self.client.open_sftp()
        return self._sftp

    def _put(self, local: Path, remote: str, mode: int | None) -> str:
        sftp = self.sftp()
        sftp.put(str(local), remote)
        sftp.chmod(remote, mode if mode is not None else stat.S_IMODE(local.stat().st_mode))
        return remote

    def _mkdir_p(self, remote_dir: str) -> None:
        sftp = self.sftp()
        parts: list[str] = []
        current = remote_dir
        while current not in ("", "/", "."):
            parts.append(current)
            current = posixpath.dirname(current)
        for path in reversed(parts):
            try:
                sftp.stat(path)
            except OSError:
                sftp.mkdir(path)

    def _fetch_dir(self, remote: str, local: Path) -> list[Path]:
        sftp = self.sftp()
        local.mkdir(parents=True, exist_ok=True)
        got: list[Path] = []
        for entry in sorted(sftp.listdir_attr(remote), key=lambda a: a.filename):
            rpath = posixpath.join(remote, entry.filename)
            lpath = local / entry.filename
            if entry.st_mode is not None and stat.S_ISDIR(entry.st_mode):
                got.extend(self._fetch_dir(rpath, lpath))
            elif entry.st_mode is not None and stat.S_ISREG(entry.st_mode):
                sftp.get(rpath, str(lpath))
                got.append(lpath)
        return got

    # -- lifecycle ----------------------------------------------------------------------------

    def _transport(self) -> paramiko.Transport:
        transport = self.client.get_transport()
        if transport is None or not transport.is_active():
            raise SshError(f"the SSH connection to {self.target.describe()} is closed")
        return transport

    def close(self) -> None:
        if self._sftp is not None:
            with contextlib.suppress(Exception):
                self._sftp.close()
            self._sftp = None
        self.client.close()

    def __enter__(self) -> SshSession:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class _LineSplitter:
    """Turns a byte stream into lines for a callback, tolerating split UTF-8 sequences."""

    def __init__(self, on_line: LineCallback | None, tail: collections.deque[str]) -> None:
        self.on_line = on_line
        self.tail = tail
        self.decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self.partial = ""

    def feed(self, data: bytes) -> None:
        text = self.partial + self.decoder.decode(data)
        *lines, self.partial = text.split("\n")
        for line in lines:
            self._emit(line)

    def flush(self) -> None:
        rest = self.partial + self.decoder.decode(b"", final=True)
        self.partial = ""
        if rest:
            self._emit(rest)

    def _emit(self, line: str) -> None:
        line = redact(line.rstrip("\r"))
        self.tail.append(line)
        if self.on_line is not None:
            self.on_line(line)


def _connect_once(
    target: SshTarget,
    key: paramiko.PKey,
    pins: KnownHosts,
    timeout_s: float,
    on_event: EventCallback | None,
) -> paramiko.SSHClient:
    try:
        sock = socket.create_connection((target.host, target.port), timeout=timeout_s)
    except OSError as exc:  # refused, timed out, unreachable, name not (yet) resolvable
        raise _Retryable(_reason(exc)) from None

    client = paramiko.SSHClient()
    if pins.path.is_file():
        client.get_host_keys().load(str(pins.path))

    def on_pin(entry: str, fp: str) -> None:
        if on_event is not None:
            on_event(f"pinned host key {fp} for {entry} in {pins.path}")

    client.set_missing_host_key_policy(PinOnFirstContact(pins, on_pin))
    try:
        client.connect(
            hostname=target.pin_name,
            port=target.port,
            username=target.user,
            pkey=key,
            sock=sock,
            timeout=timeout_s,
            banner_timeout=timeout_s,
            auth_timeout=timeout_s,
            allow_agent=False,
            look_for_keys=False,
        )
    except paramiko.BadHostKeyException as exc:
        client.close()
        raise changed_key_error(
            target.known_hosts_entry, exc.expected_key, exc.key, pins.path
        ) from None
    except paramiko.AuthenticationException:
        client.close()
        raise SshAuthRefused(
            f"{target.describe()} refused SSH key {key.get_name()} {fingerprint(key)} "
            f"for user {target.user}",
            hint="is the matching public key installed on the pod (PUBLIC_KEY / authorized_keys)?",
        ) from None
    except SshError:
        client.close()
        raise
    except (paramiko.SSHException, EOFError, OSError) as exc:
        # A pod whose port is open before sshd is ready drops the connection mid-handshake.
        client.close()
        raise _Retryable(_reason(exc)) from None
    return client


def open_ssh(
    settings: Settings,
    target: SshTarget,
    *,
    wait_s: float = 60.0,
    on_event: EventCallback | None = None,
) -> SshSession:
    """Connect to `target` with the user's key from settings and tailpod's known_hosts."""
    key = load_private_key(resolve_key_path(settings.ssh_key), settings.ssh_key_passphrase)
    return SshSession.connect(
        target, key, known_hosts_path(settings.home), wait_s=wait_s, on_event=on_event
    )
