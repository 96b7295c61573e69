"""PATH stand-ins that let tailpod's unchanged pod start script run on a sandbox pod.

tailpod's start script (tailpod/pods/start_command.py) and its tailnet join step
(tailpod/provision/tailnet/join.py) are written for a real container: they start `sshd` and run
`tailscaled` and `tailscale up`, found through PATH. A sandbox pod is a process on this machine
whose host (tailpod/sandbox/sshd.py `SshdPodHost`) has already started the pod's own sshd on its
loopback port and registered the pod with the Tailscale emulator. The pod host runs the script
with these stand-ins first on PATH and with the pod's own HOME, where it leaves what it did:

- `sshd`: succeeds when the host's sshd for this pod is up (`$HOME/.sandbox/sshd`), so the
  script logs "sshd did not start" exactly when the pod is unreachable;
- `ssh-keygen`: does nothing (the pod's sshd has its own host key; /etc/ssh is this machine's);
- `tailscaled`: listens on the `--socket` path the join step waits for, and idles;
- `tailscale up` / `tailscale ip -4`: succeed with the address the emulator gave the pod
  (`$HOME/.sandbox/tailnet`), or fail with the emulator's refusal, as `tailscale up` would;
- `apt-get`, `apt` and `sudo`: refuse, changing nothing. A sandbox pod is a process on this
  machine, so a package the pod would install (the agent installs HAProxy for the lanes when it is
  absent: tailpod/agent/bootstrap/haproxy.py) would land on the developer's own machine, as root,
  over the network. The pod then meets what a real pod without a package manager meets.

The SSH sessions of a pod (tailpod/sandbox/sshd.py `container_session_env`) get the same PATH, so
what the agent runs over SSH finds the stand-ins too.

tailpod itself never asks whether it runs in the sandbox: the sandbox adapts to tailpod.
"""

from __future__ import annotations

import sys
from pathlib import Path

STATE_DIR = ".sandbox"  # under the pod's HOME: what its host did for it
SSHD_UP = "sshd"  # file present: the pod's sshd listens
TAILNET = "tailnet"  # "joined <ipv4>" or "refused <message>"

_SSHD = """#!/bin/sh
# sandbox stand-in for sshd (tailpod/sandbox/shims.py): the pod host runs this pod's sshd.
[ -f "$HOME/@STATE@/@SSHD_UP@" ] && exit 0
echo "sandbox: this pod's sshd is not running" >&2
exit 1
"""

_SSH_KEYGEN = """#!/bin/sh
# sandbox stand-in for ssh-keygen -A (tailpod/sandbox/shims.py): the pod's sshd has its own key.
exit 0
"""

_TAILSCALED = """#!@PYTHON@
# sandbox stand-in for tailscaled (tailpod/sandbox/shims.py): listen where `tailscale` expects.
import contextlib, os, signal, socket, sys
path = next((a.split("=", 1)[1] for a in sys.argv[1:] if a.startswith("--socket=")), None)
if path:
    with contextlib.suppress(OSError):
        os.unlink(path)
    server = socket.socket(socket.AF_UNIX)
    server.bind(path)
    server.listen(1)
signal.pause()
"""

_TAILSCALE = """#!/bin/sh
# sandbox stand-in for tailscale (tailpod/sandbox/shims.py): the pod host registered this pod
# with the Tailscale emulator; `up` reports how that went, `ip -4` the address it got.
state="$HOME/@STATE@/@TAILNET@"
for arg in "$@"; do
  case "$arg" in
    up)
      if [ -f "$state" ] && grep -q '^joined ' "$state"; then exit 0; fi
      if [ -f "$state" ]; then sed 's/^refused //' "$state" >&2; else
        echo "sandbox: no Tailscale emulator registered this pod" >&2; fi
      exit 1 ;;
    ip)
      [ -f "$state" ] && grep '^joined ' "$state" | cut -d' ' -f2
      exit 0 ;;
  esac
done
exit 0
"""


_REFUSE = """#!/bin/sh
# sandbox stand-in for @NAME@ (tailpod/sandbox/shims.py): a sandbox pod is a process on this
# machine; what it installs or runs as root would change the machine itself.
echo "sandbox: @NAME@ refused: this pod is a process on this machine," \\
  "which the sandbox never changes" >&2
exit @CODE@
"""
# apt-get and apt exit 100 on an error (apt-get(8), DIAGNOSTICS); sudo exits 1 when it cannot run
# the command (sudo(8), EXIT VALUE).
REFUSED = {"apt-get": 100, "apt": 100, "sudo": 1}


def install_shims(bin_dir: Path) -> Path:
    """Write the stand-ins into `bin_dir` (put it first on the pod's PATH) and return it."""
    bin_dir.mkdir(parents=True, exist_ok=True)
    scripts = {"sshd": _SSHD, "ssh-keygen": _SSH_KEYGEN, "tailscaled": _TAILSCALED,
               "tailscale": _TAILSCALE}
    scripts |= {name: _REFUSE.replace("@NAME@", name).replace("@CODE@", str(code))
                for name, code in REFUSED.items()}
    for name, text in scripts.items():
        body = (text.replace("@STATE@", STATE_DIR).replace("@SSHD_UP@", SSHD_UP)
                .replace("@TAILNET@", TAILNET).replace("@PYTHON@", sys.executable))
        path = bin_dir / name
        path.write_text(body, encoding="utf-8")
        path.chmod(0o755)
    return bin_dir


def record(pod_home: Path, name: str, text: str | None) -> None:
    """Leave (or, with None, remove) what the pod host did, where the stand-ins look."""
    path = pod_home / STATE_DIR / name
    if text is None:
        path.unlink(missing_ok=True)
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text + "\n", encoding="utf-8")
