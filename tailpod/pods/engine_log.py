"""A pod's engine log, read where its kind's engine writes it (`tailpod logs TAG`): this machine's
engine logs to a file here; a pod's (a rented pod, your own box) to a file on the pod, read
through the pod agent's transport over one SSH session. The kinds hand these out
(`PodKind.engine_log`, pods/kinds.py and pods/ssh_box.py), so the verb never asks where the
engine runs."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

from tailpod.agent.bootstrap import engine
from tailpod.agent_client.driver import PodAgent
from tailpod.config import Settings
from tailpod.errors import TailpodError
from tailpod.ledger import PodRecord
from tailpod.pods import cloud
from tailpod.provision.local import provider as local_provider

Say = Callable[[str], None]  # one progress line (the SSH connect's events)


class EngineLog(Protocol):
    """What `tailpod logs` reads: the log's size, its text from a byte offset, and the end."""

    def size(self) -> int: ...

    def read_from(self, offset: int) -> tuple[str, int]: ...

    def close(self) -> None: ...


def engine_log_path(status: dict[str, Any]) -> str:
    """The engine log's path in the agent's `engine status` answer (its engine record)."""
    state = status.get("state") or {}
    path = state.get("log") if isinstance(state, dict) else None
    if not path:
        raise TailpodError("the pod agent has no engine record: no engine was started there",
                           hint="tailpod up starts one; --container shows the container log")
    return str(path)


class LocalEngineLog:
    """The engine of `--provider local`: its log is a file on this machine."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def read_from(self, offset: int) -> tuple[str, int]:
        try:
            with open(self.path, "rb") as fh:
                fh.seek(offset)
                data = fh.read()
        except OSError as exc:
            raise TailpodError(f"cannot read the engine log {self.path}: "
                               f"{exc.__class__.__name__}") from None
        return data.decode("utf-8", errors="replace"), offset + len(data)

    def size(self) -> int:
        try:
            return self.path.stat().st_size
        except OSError:
            return 0

    def close(self) -> None:
        pass


class AgentEngineLog:
    """A pod's engine log through its agent's transport (one SSH session for a pod)."""

    def __init__(self, agent: PodAgent) -> None:
        self.agent = agent
        self.path = engine_log_path(agent.engine_status())

    def _run(self, argv: list[str]) -> str:
        done = self.agent.transport.execute(argv, b"", None, 60)
        if done.exit_status != 0:
            raise TailpodError(f"reading {self.path} on the pod failed (exit {done.exit_status})",
                               hint="; ".join(done.stderr_tail[-2:]) or None)
        return str(done.stdout)

    def size(self) -> int:
        text = self._run(["wc", "-c", self.path]).split()
        return int(text[0]) if text and text[0].isdigit() else 0

    def read_from(self, offset: int) -> tuple[str, int]:
        text = self._run(["tail", "-c", f"+{offset + 1}", self.path])
        return text, offset + len(text.encode("utf-8", errors="replace"))

    def close(self) -> None:
        self.agent.close()


def local_engine_log(settings: Settings, record: PodRecord) -> LocalEngineLog:
    """This machine's engine log: the file its engine record names."""
    home = local_provider.LocalProvider(settings.state_dir)
    state = engine.read_state(home.state_dir(record.run_tag))
    return LocalEngineLog(Path(engine_log_path({"state": state})))


def agent_engine_log(settings: Settings, record: PodRecord, say: Say) -> AgentEngineLog:
    """A pod's engine log through its agent, over SSH to the pod's recorded address (the tailnet
    when it joined); the session is closed with the reader."""
    agent = cloud.open_pod_agent(settings, cloud.target_for_record(settings, record), 30, say=say)
    try:
        return AgentEngineLog(agent)
    except BaseException:
        agent.close()
        raise
