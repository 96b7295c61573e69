"""HAProxy on the pod, for two lanes behind one endpoint (pods/lanes.py builds the config).

`prepare` finds HAProxy, installing the distribution's package when it is absent (HAProxy is
packaged by Debian and Ubuntu: https://packages.debian.org/stable/haproxy,
https://packages.ubuntu.com/haproxy), writes the config and has HAProxy check it; the proxy then
starts like any engine (engine.py). `show_stat` reads the per-server counters from its stats
socket. Stdlib only. A pod that cannot install it (no apt-get, apt-get failing, or a sandbox pod,
whose apt-get and sudo refuse: tailpod/sandbox/shims.py) is refused with that cause.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
from pathlib import Path
from typing import Any

from .start_error import EngineStartError

CANDIDATES = ("/usr/sbin/haproxy", "/usr/local/sbin/haproxy")
APT_TIMEOUT_S = 600.0
CANNOT_INSTALL = "haproxy is not installed and this pod cannot install it"


def find_haproxy() -> str | None:
    return shutil.which("haproxy") or next((p for p in CANDIDATES if Path(p).exists()), None)


def install_haproxy(timeout_s: float = APT_TIMEOUT_S) -> list[str]:
    """apt-get the distribution's haproxy (Debian/Ubuntu images); the commands' last lines."""
    if shutil.which("apt-get") is None:
        raise EngineStartError(f"{CANNOT_INSTALL}: this image has no apt-get "
                               "(the lanes need a Debian or Ubuntu image, or haproxy in it)", [])
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    sudo = [] if os.geteuid() == 0 else ["sudo", "-n"]
    tail: list[str] = []
    for argv in ([*sudo, "apt-get", "update"],
                 [*sudo, "apt-get", "install", "-y", "--no-install-recommends", "haproxy"]):
        try:
            res = subprocess.run(argv, capture_output=True, text=True, timeout=timeout_s, env=env)
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise EngineStartError(f"{CANNOT_INSTALL}: {' '.join(argv)}: {exc}", []) from None
        tail = (res.stdout + res.stderr).splitlines()[-8:]
        if res.returncode != 0:
            raise EngineStartError(f"{CANNOT_INSTALL}: {' '.join(argv)} exited {res.returncode}",
                                   tail)
    return tail


def version(binary: str) -> str | None:
    try:
        out = subprocess.run([binary, "-v"], capture_output=True, text=True, timeout=10).stdout
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.splitlines()[0] if out else None


def check_config(binary: str, cfg_path: Path) -> None:
    res = subprocess.run([binary, "-c", "-f", str(cfg_path)], capture_output=True, text=True,
                         timeout=30)
    if res.returncode != 0:
        raise EngineStartError(f"haproxy rejected {cfg_path}",
                               (res.stdout + res.stderr).splitlines()[-8:])


def prepare(config_text: str, state_dir: Path, install: bool = True) -> dict[str, Any]:
    """HAProxy found (or installed), the config written to `state_dir`/haproxy.cfg and checked."""
    binary = find_haproxy()
    installed = False
    if binary is None and install:
        install_haproxy()
        binary, installed = find_haproxy(), True
    if binary is None:
        raise EngineStartError("haproxy is not installed", [])
    state_dir.mkdir(parents=True, exist_ok=True)
    cfg_path = state_dir / "haproxy.cfg"
    cfg_path.write_text(config_text, encoding="utf-8")
    check_config(binary, cfg_path)
    return {"binary": binary, "version": version(binary), "config": str(cfg_path),
            "installed_now": installed}


def show_stat(sock_path: str, timeout: float = 5.0) -> str:
    """The stats socket's `show stat` CSV, as HAProxy wrote it."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.settimeout(timeout)
        s.connect(str(sock_path))
        s.sendall(b"show stat\n")
        chunks = []
        while True:
            data = s.recv(65536)
            if not data:
                break
            chunks.append(data)
    return b"".join(chunks).decode("utf-8", "replace")
