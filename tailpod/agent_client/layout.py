"""Where tailpod keeps its files on a pod: the state directory the start command makes and the
agent uses, and the dead-man switch's files inside it. The driver, the start command and the
dead-man control all read these, so they are written once here."""

from __future__ import annotations

from dataclasses import dataclass

# The pod's state directory as the start command's shell spells it (a box over SSH sets
# TAILPOD_POD_HOME or has a HOME of its own; rented containers log SSH in as root).
POD_STATE = '"${TAILPOD_POD_HOME:-${HOME:-/root}}/.tailpod"'
DEFAULT_REMOTE_DIR = "/root/.tailpod"  # RunPod and vast.ai containers log SSH in as root


@dataclass(frozen=True)
class DeadmanLayout:
    """Where the switch's files live on the pod (absolute paths, so any shell agrees)."""

    remote_dir: str = DEFAULT_REMOTE_DIR

    @property
    def heartbeat(self) -> str:
        return f"{self.remote_dir.rstrip('/')}/heartbeat"

    @property
    def state(self) -> str:
        return self.heartbeat + ".deadman.json"

    @property
    def log(self) -> str:
        return f"{self.remote_dir.rstrip('/')}/deadman.log"
