"""Real OpenSSH sshd processes that play the part of a sandbox pod's SSH endpoint.

Each host is an unprivileged-port `sshd -D -e` bound to 127.0.0.1 with its own generated host key
and config file, running as the current user; it lets only the given public key in. Everything the
SSH layer does against a rented pod (pinning, auth, SFTP, streamed commands) is exercised against
this real server, not a Python imitation.
"""

from __future__ import annotations

import contextlib
import getpass
import os
import secrets
import shutil
import signal
import socket
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import paramiko

from tailpod.errors import TailpodError
from tailpod.provision.ssh.known_hosts import fingerprint
from tailpod.sandbox.podhost import container_path, free_port

if TYPE_CHECKING:
    from tailpod.sandbox.model import SandboxPod

SSHD = "/usr/sbin/sshd"
SSH_KEYGEN = "ssh-keygen"
# sshd refuses to start as root without its privilege-separation directory; Debian creates it in
# the service unit, which containers and CI runners do not run.
PRIVSEP_DIR = Path("/run/sshd")


def sshd_available() -> bool:
    return os.access(SSHD, os.X_OK) and shutil.which(SSH_KEYGEN) is not None


@dataclass
class SshdHost:
    host: str
    port: int
    host_key_fingerprint: str
    user: str
    workdir: Path
    process: subprocess.Popen[bytes] = field(repr=False)
    host_public_key: str = ""

    @property
    def log_path(self) -> Path:
        return self.workdir / "sshd.log"

    def running(self) -> bool:
        return self.process.poll() is None

    def stop(self, timeout_s: float = 5.0) -> None:
        """Stop the listener and the per-connection processes it forked (a torn-down pod)."""
        if self.process.poll() is None:
            for child in _children(self.process.pid):
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(child, signal.SIGTERM)
            self.process.terminate()
            try:
                self.process.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=timeout_s)

    def __enter__(self) -> SshdHost:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def start_sshd_host(
    workdir: Path,
    authorized_public_key: str,
    *,
    port: int | None = None,
    host: str = "127.0.0.1",
    host_key_type: str = "ed25519",
    ready_timeout_s: float = 10.0,
    session_env: dict[str, str] | None = None,
) -> SshdHost:
    """Start sshd on `host:port` (a free port when None) letting in `authorized_public_key`.

    A fresh host key is generated in `workdir` unless one is already there, so restarting with a
    new `workdir` on the same port models a pod that was replaced.
    """
    if not sshd_available():
        raise TailpodError(
            f"{SSHD} is not installed",
            hint="install OpenSSH's server (Debian: apt-get install -y openssh-server)",
        )
    workdir = Path(workdir).resolve()
    workdir.mkdir(parents=True, exist_ok=True, mode=0o700)
    key_path = workdir / f"ssh_host_{host_key_type}_key"
    if not key_path.exists():
        subprocess.run(
            [SSH_KEYGEN, "-q", "-t", host_key_type, "-N", "", "-C", "tailpod-sandbox-pod",
             "-f", str(key_path)],
            check=True, capture_output=True, timeout=30,
        )  # fmt: skip
    host_key = paramiko.PKey.from_path(str(key_path), None)
    authorized = workdir / "authorized_keys"
    authorized.write_text(authorized_public_key.strip() + "\n", encoding="utf-8")
    authorized.chmod(0o600)

    if os.geteuid() == 0:
        PRIVSEP_DIR.mkdir(mode=0o755, exist_ok=True)
    chosen_port = port or free_port(host)
    config = workdir / "sshd_config"
    _write_config(
        config, workdir, key_path, authorized, host, chosen_port, True, session_env or {}
    )
    if not _config_ok(config):
        # sshd older than 9.8 does not know PerSourcePenalties; it also has no penalties to disable.
        _write_config(
            config, workdir, key_path, authorized, host, chosen_port, False, session_env or {}
        )

    log = open(workdir / "sshd.log", "ab")  # noqa: SIM115 - the child keeps writing to it
    try:
        process = subprocess.Popen(
            [SSHD, "-D", "-e", "-f", str(config)],
            stdin=subprocess.DEVNULL, stdout=log, stderr=log, start_new_session=True,
        )  # fmt: skip
    finally:
        log.close()
    sshd = SshdHost(
        host=host,
        port=chosen_port,
        host_key_fingerprint=fingerprint(host_key),
        user=getpass.getuser(),
        workdir=workdir,
        process=process,
        host_public_key=f"{host_key.get_name()} {host_key.get_base64()}",
    )
    _wait_for_banner(sshd, ready_timeout_s)
    return sshd


def _write_config(
    path: Path,
    workdir: Path,
    host_key: Path,
    authorized: Path,
    host: str,
    port: int,
    penalties_off: bool,
    session_env: dict[str, str],
) -> None:
    lines = [
        f"ListenAddress {host}:{port}",
        "AddressFamily inet",
        f"HostKey {host_key}",
        f"PidFile {workdir / 'sshd.pid'}",
        f"AuthorizedKeysFile {authorized}",
        "PubkeyAuthentication yes",
        "PasswordAuthentication no",
        "KbdInteractiveAuthentication no",
        # tests and sandboxes run as root; a rented pod logs in as root too
        "PermitRootLogin prohibit-password",
        "StrictModes no",
        "UsePAM no",
        "Subsystem sftp internal-sftp",
        "LoginGraceTime 30",
        "ClientAliveInterval 15",
        "LogLevel VERBOSE",
    ]
    if session_env:
        # Like a container's environment, seen by every session of this pod (never secrets here).
        # sshd keeps only the first SetEnv line, so every assignment goes on that one line.
        pairs = " ".join(f'"{k}={v}"' for k, v in sorted(session_env.items()))
        lines.append(f"SetEnv {pairs}")
    if penalties_off:
        # Tests connect with wrong keys on purpose; 9.8+ would then lock 127.0.0.1 out for a while.
        lines.append("PerSourcePenalties no")
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    path.chmod(0o600)


def _config_ok(config: Path) -> bool:
    result = subprocess.run(
        [SSHD, "-t", "-f", str(config)], capture_output=True, timeout=30, check=False
    )
    return result.returncode == 0


def _wait_for_banner(sshd: SshdHost, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if not sshd.running():
            break
        try:
            with socket.create_connection((sshd.host, sshd.port), timeout=1.0) as sock:
                if sock.recv(64).startswith(b"SSH-"):
                    return
        except OSError:
            time.sleep(0.1)
    sshd.stop()
    tail = sshd.log_path.read_text(errors="replace").strip().splitlines()[-3:]
    raise TailpodError(f"sandbox sshd on {sshd.host}:{sshd.port} did not start: {' | '.join(tail)}")


def _children(pid: int) -> list[int]:
    """Direct children of `pid` (Linux /proc), i.e. sshd's per-connection processes."""
    found: list[int] = []
    if not Path("/proc").is_dir():
        return found
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat_text = (entry / "stat").read_text()
        except OSError:
            continue
        # the command name is in parentheses and may contain spaces; fields follow the last ')'
        fields = stat_text.rsplit(")", 1)[-1].split()
        if len(fields) > 1 and fields[1] == str(pid):
            found.append(int(entry.name))
    return found


class SshdPodHost:
    """A sandbox PodHost whose pods are real SSH hosts, and tailnet members through the stand-in.

    Wraps the sandbox cloud's ProcessPodHost (which runs the pod's start command). On start it
    launches an sshd for the pod that lets in the pod's PUBLIC_KEY (RunPod's convention; also
    SSH_PUBLIC_KEY, or keys the provider API attached in `pod.meta["ssh_public_keys"]`) on the
    public port mapped for 22 (or a private loopback port when 22 is not published: then the pod is
    reachable over the tailnet only). If the pod carries TS_AUTHKEY and a Tailscale emulator URL is
    configured, it registers the pod with the emulator instead of `tailscale up` (the stand-in).
    On stop the sshd dies and the device is marked disconnected; `down` must delete it.
    """

    def __init__(self, workdir: Path, tailscale_url: str | None = None,
                 hf_url: str | None = None, **process_host: object):
        from tailpod.sandbox.podhost import ProcessPodHost

        self.inner = ProcessPodHost(Path(workdir), **process_host)  # type: ignore[arg-type]
        self.workdir = Path(workdir)
        self.tailscale_url = tailscale_url
        self.hf_url = hf_url  # the Hub stand-in: where the pod's engine downloads models from
        self.sshd: dict[str, SshdHost] = {}
        self.devices: dict[str, str] = {}  # pod key -> tailnet hostname
        # Pod ids repeat across sandboxes (vast.ai ids count up from the same number) and a
        # terminate kills by marker machine-wide: scope the marker to this host, so another
        # sandbox on the same machine never kills this one's pods.
        self.marker_scope = secrets.token_hex(4)

    def container_marker(self, pod: SandboxPod) -> str:
        """CONTAINER_MARKER's value in this pod's processes: unique on this machine."""
        return f"{pod.key}@{self.marker_scope}"

    def allocate_ports(self, pod: SandboxPod) -> dict[int, int]:
        return self.inner.allocate_ports(pod)

    def start(self, pod: SandboxPod) -> None:
        from tailpod.sandbox.podhost import container_argv

        container_argv(pod)
        if pod.meta.get("crashing"):
            # The image's entrypoint rejects the start command: the script that would start sshd
            # and join the tailnet never runs, so neither happens here either.
            self.inner.start(pod)
            return
        from tailpod.sandbox.shims import SSHD_UP, TAILNET, record

        home = self.inner.pod_dir(pod)
        record(home, SSHD_UP, None)
        record(home, TAILNET, None)
        keys = _authorized_keys(pod)
        if keys:
            port = pod.port_map.get(22) or free_port()
            workdir = home / "sshd"
            try:
                self.sshd[pod.key] = start_sshd_host(
                    workdir, keys, port=port, session_env=container_session_env(self, pod)
                )
                record(home, SSHD_UP, f"{self.sshd[pod.key].host}:{port}")
            except TailpodError as exc:
                pod.container_error = f"sshd did not start: {exc.message}"
                # what the pod's start script prints when sshd fails (bootstrap/pod_start.py)
                self.inner.record(pod, f"tailpod-start: {pod.container_error}")
        auth_key = pod.env.get("TS_AUTHKEY")
        sshd = self.sshd.get(pod.key)
        if auth_key and self.tailscale_url and sshd is not None:
            # What the pod's tailscaled would do: join with the pod's auth key. The emulator learns
            # where the pod's sshd listens and writes it into the SSH client config it keeps
            # (TAILPOD_SSH_CONFIG). The start script's `tailscale up` stand-in reports the outcome.
            from tailpod.sandbox.tailscale import register_device_standin
            from tailpod.secrets import Secret

            hostname = sandbox_pod_hostname(pod)
            tags = [t for t in pod.env.get("TAILPOD_TAILSCALE_TAGS", "").split(",") if t]
            try:
                device = register_device_standin(
                    self.tailscale_url, Secret(auth_key), hostname, sshd.host, sshd.port, tags
                )
                self.devices[pod.key] = hostname
                ipv4 = next((a for a in device.get("addresses", []) if "." in str(a)), "")
                record(home, TAILNET, f"joined {ipv4}")
            except TailpodError as exc:
                # like a failing `tailscale up`: the pod runs, but never shows up in the tailnet
                pod.container_error = f"tailnet join failed: {exc.message}"
                self.inner.record(pod, f"tailpod-start: {pod.container_error}")
                record(home, TAILNET, f"refused {exc.message}")
        self.inner.start(pod)

    def stop(self, pod: SandboxPod) -> None:
        sshd = self.sshd.pop(pod.key, None)
        if sshd is not None:
            sshd.stop()
        self.inner.stop(pod)
        # A terminated container takes every process in it along, including what SSH sessions
        # started (the engine): find them by the container marker in their environment.
        kill_container_processes(self.container_marker(pod))
        hostname = self.devices.pop(pod.key, None)
        if hostname and self.tailscale_url:
            with contextlib.suppress(Exception):
                import httpx

                httpx.post(
                    self.tailscale_url.rstrip("/") + "/sandbox/standin/disconnect",
                    json={"hostname": hostname},
                    timeout=5.0,
                )

    def __getattr__(self, name: str) -> object:
        # anything else the sandbox cloud asks of its pod host (running_pids, pod_dir, ...)
        return getattr(self.inner, name)


CONTAINER_MARKER = "TAILPOD_SANDBOX_POD"


def container_session_env(host: SshdPodHost, pod: SandboxPod) -> dict[str, str]:
    """What an SSH session on a sandbox pod sees, as on a real pod: the pod's home (where its start
    script kept the environment), a marker that ties every process it starts to the pod, and the
    container's PATH, stand-ins first (shims.py): without them the agent's HAProxy install ran
    the host's own apt-get, as root (issue 38)."""
    env = {
        CONTAINER_MARKER: host.container_marker(pod),
        "TAILPOD_POD_HOME": str(host.inner.pod_dir(pod)),
        "PATH": container_path(host.inner.shim_dir),
    }
    if host.hf_url:
        env["HF_ENDPOINT"] = host.hf_url  # huggingface_hub's endpoint: the sandbox has no Internet
    return env


def _session_of(pid: str) -> int | None:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return int(stat.rsplit(")", 1)[1].split()[3])  # field 6 of /proc/pid/stat: the session id


def kill_container_processes(pod_key: str) -> list[int]:
    """SIGKILL every process of this pod: those whose environment carries the container marker,
    and everything in their sessions. The session matters because vLLM's EngineCore and workers
    rename themselves (setproctitle), which overwrites the environment /proc shows."""
    marker = f"{CONTAINER_MARKER}={pod_key}".encode()
    me = os.getpid()
    pids = [e.name for e in Path("/proc").iterdir() if e.name.isdigit() and int(e.name) != me]
    sessions: set[int] = set()
    for pid in pids:
        try:
            environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
        except OSError:
            continue
        if marker in environ:
            sid = _session_of(pid)
            if sid is not None:
                sessions.add(sid)
    sessions.discard(_session_of(str(me)) or -1)  # never this process's own session
    killed = []
    for pid in pids:
        if _session_of(pid) in sessions:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(int(pid), signal.SIGKILL)
                killed.append(int(pid))
    return killed


def sandbox_pod_hostname(pod: SandboxPod) -> str:
    """The tailnet hostname a sandbox pod joins as: tailpod-<run tag>."""
    from tailpod.provision.tailnet.devices import tailnet_hostname

    run_tag = pod.env.get("TAILPOD_RUN_TAG") or pod.name
    return run_tag if run_tag.startswith("tailpod-") else tailnet_hostname(run_tag)


def _authorized_keys(pod: SandboxPod) -> str:
    lines = [pod.env.get("PUBLIC_KEY", ""), pod.env.get("SSH_PUBLIC_KEY", "")]
    extra = pod.meta.get("ssh_public_keys") or []
    if isinstance(extra, str):
        extra = [extra]
    lines.extend(str(k) for k in extra)
    return "\n".join(line.strip() for line in lines if line and line.strip())
