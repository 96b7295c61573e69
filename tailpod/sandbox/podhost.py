"""What a sandbox pod *is* on this machine: its start command run as a local process.

The default host runs the pod's process in its own process group (so terminate can kill the
whole tree) and gives each requested TCP port a loopback public port, passed to the process as
`RUNPOD_TCP_PORT_<n>` / `VAST_TCP_PORT_<n>`. Nothing listens on those ports unless the command
does, or unless a richer host (the SSH helper's sshd-per-pod) is plugged in through `PodHost`.

The process is what Docker would run: the image's ENTRYPOINT + CMD, with the start command
replacing CMD (and, in RunPod's JSON form, the entrypoint too) - see `images.py`. An engine
ENTRYPOINT handed a shell command rejects it and exits, and a container that exits is restarted
(RunPod restarts exited containers), so the old args form crash-loops here as it would there.
"""

from __future__ import annotations

import contextlib
import os
import random
import signal
import socket
import subprocess
import threading
from pathlib import Path
from typing import Protocol

from tailpod.sandbox.images import compose, entrypoint_verdict, image_config
from tailpod.sandbox.model import SandboxPod
from tailpod.sandbox.shims import install_shims

RESTART_LIMIT = 20  # a crash-looping container is restarted this often at most (bounds the test)


def container_argv(pod: SandboxPod) -> list[str]:
    """The pod's process argv; records `argv`, and `crashing` when an engine entrypoint will
    reject its arguments (known before it runs: the stand-in's answer is fixed)."""
    runtype = str(pod.meta.get("runtype") or "")
    if pod.provider == "vast" and runtype and "args" not in runtype:
        # ssh/jupyter runtypes replace the image's entrypoint with vast's, which runs `onstart`
        # in a shell (vast-cli `create instance --help`; docs/providers.md).
        argv = ["/bin/sh", "-c", str(pod.command)] if pod.command else ["sleep", "infinity"]
    else:
        argv = compose(image_config(pod.image), pod.command,
                       json_form=bool(pod.meta.get("json_start_form", True)))
    verdict = entrypoint_verdict(argv)
    pod.meta["argv"] = argv
    pod.meta["crashing"] = bool(verdict and "unrecognized arguments" in verdict)
    if verdict is not None:
        # The engine program itself cannot run here; this prints what it would, and exits.
        argv = ["/bin/sh", "-c", 'printf "%s\\n" "$0" >&2; exit 2', verdict]
    return argv


class PodHost(Protocol):
    """Hook points for making sandbox pods real hosts (sshd, tailscaled, an engine)."""

    def allocate_ports(self, pod: SandboxPod) -> dict[int, int]:
        """Public loopback port for each private TCP port the pod publishes."""
        ...

    def start(self, pod: SandboxPod) -> None:
        """Bring the pod's container up (called when the pod becomes ready)."""
        ...

    def stop(self, pod: SandboxPod) -> None:
        """Tear everything of the pod down; must be idempotent."""
        ...


EPHEMERAL_RANGE_FILE = Path("/proc/sys/net/ipv4/ip_local_port_range")
LOWEST_CHOSEN_PORT = 10000


def _bindable(host: str, port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind((host, port))
        except OSError:
            return False
    return True


def free_port(host: str = "127.0.0.1", consecutive: int = 1) -> int:
    """The first of `consecutive` ports on `host` that are free now, for a server that binds
    later (a pod's engine, sshd). Chosen below the kernel's ephemeral range: bind(0) and every
    outgoing connection take their ports from that range, so on a busy machine one of them could
    take the port between this choice and the server's bind (EADDRINUSE). Where the range cannot
    be read, the kernel's own choice (bind to port 0) for a single port."""
    try:
        low = int(EPHEMERAL_RANGE_FILE.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        low = 0
    top = low - consecutive
    if top > LOWEST_CHOSEN_PORT:
        rng = random.SystemRandom()
        for _ in range(200):
            first = rng.randrange(LOWEST_CHOSEN_PORT, top)
            if all(_bindable(host, first + i) for i in range(consecutive)):
                return first
    if consecutive == 1:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            sock.bind((host, 0))
            return int(sock.getsockname()[1])
    raise OSError(f"no {consecutive} consecutive free ports on {host}")


def container_path(shim_dir: Path) -> str:
    """A sandbox pod's PATH, for its process and its SSH sessions alike: the stand-ins first
    (shims.py), then this machine's PATH."""
    return f"{shim_dir}:{os.environ.get('PATH', '/usr/bin:/bin')}"


class ProcessPodHost:
    """Runs the start command as a subprocess; `run_commands=False` keeps pods as pure records."""

    def __init__(self, workdir: Path, run_commands: bool = True, kill_grace_s: float = 2.0,
                 restart_delay_s: float = 0.3) -> None:
        self.workdir = Path(workdir)
        self.run_commands = run_commands
        self.kill_grace_s = kill_grace_s
        self.restart_delay_s = restart_delay_s
        self._procs: dict[str, subprocess.Popen[bytes]] = {}
        self._stopped: set[str] = set()
        self._lock = threading.Lock()
        # sshd/tailscale stand-ins the pod's start script finds first on its PATH (shims.py)
        self.shim_dir = install_shims(self.workdir / "shims")

    def allocate_ports(self, pod: SandboxPod) -> dict[int, int]:
        return {private: free_port() for private in pod.tcp_ports()}

    def env(self, pod: SandboxPod) -> dict[str, str]:
        """The environment the pod's container runs with (what its `env` would print)."""
        return self._env(pod)

    def _env(self, pod: SandboxPod) -> dict[str, str]:
        env = {
            "PATH": container_path(self.shim_dir),
            "HOME": str(self.pod_dir(pod)),
            "LANG": "C.UTF-8",
        }
        prefix = "RUNPOD_TCP_PORT_" if pod.provider == "runpod" else "VAST_TCP_PORT_"
        for private, public in pod.port_map.items():
            env[f"{prefix}{private}"] = str(public)
        pod_key = pod.meta.get("pod_key")
        if pod.provider == "runpod":
            env["RUNPOD_POD_ID"] = pod.pod_id
            env["RUNPOD_PUBLIC_IP"] = "127.0.0.1"
            if pod_key:
                env["RUNPOD_API_KEY"] = pod_key  # pod-scoped, as RunPod injects it
        else:
            env["CONTAINER_ID"] = pod.pod_id
            env["PUBLIC_IPADDR"] = "127.0.0.1"
            if pod_key:
                env["CONTAINER_API_KEY"] = pod_key  # the instance-restricted key
        env.update(pod.env)
        return env

    def pod_dir(self, pod: SandboxPod) -> Path:
        return self.workdir / "pods" / f"{pod.provider}-{pod.pod_id}"

    def container_log(self, pod: SandboxPod) -> Path:
        return self.pod_dir(pod) / "container.log"

    def record(self, pod: SandboxPod, line: str) -> None:
        """A line in the container's log, as the process would have written it to stderr."""
        self.pod_dir(pod).mkdir(parents=True, exist_ok=True)
        with open(self.container_log(pod), "a", encoding="utf-8") as fh:
            fh.write(line.rstrip("\n") + "\n")

    def start(self, pod: SandboxPod) -> None:
        if not self.run_commands or (not pod.command and not image_config(pod.image).cmd
                                     and not image_config(pod.image).entrypoint):
            return
        with self._lock:
            self._stopped.discard(pod.key)
        self._spawn(pod)

    def _spawn(self, pod: SandboxPod) -> None:
        pod_dir = self.pod_dir(pod)
        pod_dir.mkdir(parents=True, exist_ok=True)
        argv = container_argv(pod)
        log = open(self.container_log(pod), "ab")  # noqa: SIM115 - handed to the child
        try:
            proc = subprocess.Popen(
                argv,
                cwd=pod_dir,
                env=self._env(pod),
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # own process group: terminate kills the whole tree
            )
        except OSError as exc:
            pod.container_error = f"start command failed: {exc.__class__.__name__}"
            self.record(pod, f"exec {argv[0]}: {exc.strerror or exc.__class__.__name__}")
            return
        finally:
            log.close()
        with self._lock:
            stopped = pod.key in self._stopped
            if not stopped:
                pod.pid = proc.pid
                self._procs[pod.key] = proc
        if stopped:
            # stop() ran while this restart was starting: the pod is gone, so is its process
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            return
        threading.Thread(target=self._watch, args=(pod, proc), daemon=True).start()

    def _watch(self, pod: SandboxPod, proc: subprocess.Popen[bytes]) -> None:
        """Restart the container when its process exits, as RunPod does, a bounded number of
        times; `exits` counts the non-zero ones (the emulator reports ERROR from it)."""
        code = proc.wait()
        with self._lock:
            if pod.key in self._stopped or self._procs.get(pod.key) is not proc:
                return
        if code != 0:
            pod.meta["exits"] = int(pod.meta.get("exits", 0)) + 1
        pod.meta["restarts"] = int(pod.meta.get("restarts", 0)) + 1
        if pod.status != "running" or pod.meta["restarts"] > RESTART_LIMIT:
            return
        threading.Event().wait(self.restart_delay_s)
        with self._lock:
            if pod.key in self._stopped:
                return
        if pod.status == "running":
            self._spawn(pod)

    def stop(self, pod: SandboxPod) -> None:
        with self._lock:
            self._stopped.add(pod.key)
            proc = self._procs.pop(pod.key, None)
        if proc is None or proc.poll() is not None:
            return
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=self.kill_grace_s)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signal.SIGKILL)
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=self.kill_grace_s)

    def running_pids(self) -> list[int]:
        with self._lock:
            return [p.pid for p in self._procs.values() if p.poll() is None]
