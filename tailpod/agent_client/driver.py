"""The one laptop-side driver of the pod agent (tailpod/agent/, shipped as one zipapp).

`PodAgent` runs `python3 -I <agent>.pyz <verb> …` over a transport and parses the one JSON result
envelope the agent prints as its last stdout line (docs/agent.md). Two transports:

- `SshTransport`: a cloud pod, over ONE paramiko session that every call of the pod reuses;
- `SubprocessTransport`: `--provider local`, the agent as a child process of this machine.

The zipapp is uploaded once per pod, under its content hash, and only when `test -f` says it is
not there already: a benchmark cell uploads nothing the pod already holds. Inputs go as JSON on
stdin (never argv: secrets stay out of process listings); results (rows included) come back in the
envelope; the agent's progress lines (stderr) reach the caller's `say` as they arrive.
"""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import subprocess
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from tailpod.agent_client.layout import POD_STATE, DeadmanLayout
from tailpod.engines.compile_cache import apply_cache_source
from tailpod.errors import TailpodError
from tailpod.secrets import redact

if TYPE_CHECKING:
    from tailpod.engines.base import EngineAdapter, EngineConfig, LaunchPlan, StartupFacts

Say = Callable[[str], None]
DEFAULT_TIMEOUT_S = 3600.0
# One `probe run` call measures one cell (measure/hosts.py run_cells): this is the cell's time
# limit, which an open-loop schedule or a trace must fit (measure/plan.py check_open_loop_spans).
PROBE_RUN_TIMEOUT_S = 3600.0
# Tokens per prompt of the token-identity gate (agent/probes/gate.py), the sweep's and the lanes'.
GATE_MAX_TOKENS = 48


@dataclass
class ArmStart:
    """What one engine start for an arm produced."""

    startup: dict[str, Any]  # StartupFacts.to_json(): facts plus the raw lines
    argv: list[str]
    startup_s: float
    # role (model, draft_model) → {ref, source, revision}: which checkpoint bytes were served
    checkpoints: dict[str, Any] = field(default_factory=dict)


class AgentError(TailpodError):
    """The agent answered `ok: false` (or no envelope at all): its error kind, message and the
    last lines it kept (an engine log tail, a traceback)."""

    def __init__(self, verb: str, kind: str, message: str, tail: list[str], exit_status: int):
        shown = "\n    ".join(tail[-12:])
        super().__init__(
            f"the pod agent's `{verb}` failed ({kind}): {message}" + (f"\n    {shown}" if shown else "")
        )
        self.verb = verb
        self.kind = kind
        self.detail = message
        self.tail = tail
        self.exit_status = exit_status


@dataclass
class Completed:
    """One agent process, finished: its exit status, whole stdout, and the last stderr lines."""

    exit_status: int
    stdout: str
    stderr_tail: list[str] = field(default_factory=list)


class AgentTransport(Protocol):
    """Where the agent runs. One transport per pod, kept open for every call of that pod."""

    python: str  # the interpreter that runs the zipapp there
    state_dir: str  # the pod's tailpod directory: the agent, engine record, heartbeat

    def ensure_file(self, name: str, data: bytes) -> str:
        """The path of `name` there, writing `data` only when no file by that name exists."""
        ...

    def execute(
        self, argv: list[str], stdin: bytes, on_line: Say | None, timeout_s: float | None
    ) -> Completed: ...

    def close(self) -> None: ...


# Agent verbs that load the engine (`probe run`, `probe gate`, …): a Ctrl-C here also stops
# their process group on the pod. Closing the SSH channel does not: a command that is not
# writing never notices (adversary F7: `probe run` sent 368 requests after an interrupt).
STOP_ON_INTERRUPT = ("probe",)
# The first stderr line of such a call: its process group on the pod (sshd gives every session
# its own, setsid in OpenSSH's session.c, so the group is this call's processes and no other).
PGID_MARK = "tailpod-agent-pgid"


def stoppable_command(command: str) -> str:
    """`command` preceded by a stderr line naming its process group, then exec'd in place."""
    return (f'read -r _ _ _ _ g _ 2>/dev/null </proc/$$/stat && echo "{PGID_MARK} $g" >&2; '
            f"exec {command}")


def stop_group_command(pgid: int) -> str:
    """TERM to the group, then KILL to whatever is left of it a second later."""
    return (f"kill -s TERM -- -{pgid} 2>/dev/null; sleep 1; "
            f"kill -s KILL -- -{pgid} 2>/dev/null; true")


class SshTransport:
    """A cloud pod over one SSH session (tailpod.provision.ssh.SshSession), reused by every call.

    `uploads` lists every file this transport wrote to the pod: a benchmark cell adds nothing.
    `stopped_groups` lists the pod-side process groups a Ctrl-C stopped.
    """

    python = "python3"

    def __init__(self, session: Any, state_dir: str | None = None) -> None:

        self.session = session
        self.uploads: list[str] = []
        self.stopped_groups: list[int] = []
        if state_dir is None:
            found = session.run(f'sh -c \'d={POD_STATE}; mkdir -p "$d"; printf %s "$d"\'')
            found.check("finding the pod's state directory")
            state_dir = found.tail[-1].strip() if found.tail else ""
        if not state_dir.startswith("/"):
            raise TailpodError(f"unexpected pod state directory {state_dir!r}")
        self.state_dir = state_dir

    def ensure_file(self, name: str, data: bytes) -> str:
        remote = f"{self.state_dir}/{name}"
        if self.session.run(f"test -f {shlex.quote(remote)}").ok:
            return remote
        partial = f"{remote}.part-{os.getpid()}"
        sftp = self.session.sftp()
        with sftp.open(partial, "wb") as fh:
            fh.write(data)
        sftp.chmod(partial, 0o600)
        sftp.posix_rename(partial, remote)  # never a half-written agent under the final name
        self.uploads.append(remote)
        return remote

    def execute(
        self, argv: list[str], stdin: bytes, on_line: Say | None, timeout_s: float | None
    ) -> Completed:
        sink = bytearray()
        command = " ".join(shlex.quote(a) for a in argv)
        pgid: list[int] = []
        say = on_line
        if len(argv) > 3 and argv[3] in STOP_ON_INTERRUPT:
            command = stoppable_command(command)

            def say(line: str) -> None:
                mark, _, value = line.partition(" ")
                if mark == PGID_MARK and value.strip().isdigit() and not pgid:
                    pgid.append(int(value))
                elif on_line is not None:
                    on_line(line)

        try:
            result = self.session.run(
                command,
                say,
                timeout_s=timeout_s,
                combine_stderr=False,
                stdin=stdin,
                stdout_sink=sink,
            )
        except KeyboardInterrupt:
            if pgid:
                self.stop_group(pgid[0])
            raise
        tail = [line for line in result.tail if not line.startswith(PGID_MARK + " ")]
        return Completed(result.exit_status, sink.decode("utf-8", errors="replace"), tail)

    def stop_group(self, pgid: int) -> None:
        """Stop an interrupted call's processes on the pod (best effort: a lost connection
        cannot be used; the pod's dead-man switch still ends a pod nobody heartbeats)."""
        with contextlib.suppress(Exception):
            self.session.run(stop_group_command(pgid), timeout_s=20)
            self.stopped_groups.append(pgid)

    def close(self) -> None:
        self.session.close()


def stop_local_group(proc: subprocess.Popen[bytes], grace_s: float = 1.0) -> None:
    """TERM to the child's own process group, KILL to what is left after `grace_s`."""
    import signal

    for sig in (signal.SIGTERM, signal.SIGKILL):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, sig)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=grace_s)


class SubprocessTransport:
    """`--provider local`: the agent runs as a child of this machine, from a local cache dir."""

    def __init__(
        self, state_dir: Path, python: str | None = None, env: dict[str, str] | None = None
    ) -> None:
        self.state_dir = str(state_dir)
        self.python = python or sys.executable
        self.env = env  # None: this process's environment

    def ensure_file(self, name: str, data: bytes) -> str:
        path = Path(self.state_dir) / name
        if not path.is_file():
            path.parent.mkdir(parents=True, exist_ok=True)
            partial = path.with_name(f"{name}.part-{os.getpid()}")
            partial.write_bytes(data)
            partial.replace(path)
        return str(path)

    def execute(
        self, argv: list[str], stdin: bytes, on_line: Say | None, timeout_s: float | None
    ) -> Completed:
        # A probe call gets its own process group, stopped whole on Ctrl-C or timeout (its load
        # workers included): a SIGINT sent to tailpod alone would not reach it otherwise.
        stoppable = len(argv) > 3 and argv[3] in STOP_ON_INTERRUPT
        proc = subprocess.Popen(
            argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            env=self.env, start_new_session=stoppable,
        )
        tail: list[str] = []

        def pump() -> None:
            assert proc.stderr is not None
            for raw in proc.stderr:
                line = redact(raw.decode("utf-8", errors="replace").rstrip("\r\n"))
                tail.append(line)
                del tail[:-200]
                if on_line is not None:
                    on_line(line)

        out: list[bytes] = []

        def feed() -> None:
            assert proc.stdin is not None
            with contextlib.suppress(BrokenPipeError):  # the agent may exit before reading all
                proc.stdin.write(stdin)
            with contextlib.suppress(BrokenPipeError):
                proc.stdin.close()

        def drain() -> None:
            assert proc.stdout is not None
            out.append(proc.stdout.read())

        # Each pipe has its own thread. `communicate()` must not be used here: it selects on
        # stderr too, and when `pump` has already taken the lines the selector saw, its blocking
        # read waits for stderr while the agent blocks writing a large stdout envelope (a
        # deadlock seen with `probe logprobs`).
        threads = [threading.Thread(target=f, daemon=True) for f in (pump, feed, drain)]
        try:
            # the threads start inside the try: a Ctrl-C that lands while they start (the agent
            # already running) stops its group too
            for thread in threads:
                thread.start()
            proc.wait(timeout=timeout_s)
        except KeyboardInterrupt:
            if stoppable:
                stop_local_group(proc)
            raise
        except subprocess.TimeoutExpired:
            if stoppable:
                stop_local_group(proc)
            proc.kill()
            proc.wait()
            raise TailpodError(
                f"the pod agent ({' '.join(argv[2:4])}) did not finish within {timeout_s:.0f} s;"
                " it was stopped"
            ) from None
        for thread in threads:
            thread.join(timeout=5)
        return Completed(proc.returncode, b"".join(out).decode("utf-8", errors="replace"), tail)

    def close(self) -> None:
        return None


def parse_envelope(verb: str, done: Completed) -> dict[str, Any]:
    """The result of the agent's envelope (its last non-empty stdout line), or AgentError."""
    lines = [line for line in done.stdout.splitlines() if line.strip()]
    envelope: Any = None
    if lines:
        try:
            envelope = json.loads(lines[-1])
        except ValueError:
            envelope = None
    if not isinstance(envelope, dict) or "ok" not in envelope:
        raise AgentError(
            verb, "no-envelope",
            f"no result envelope (exit {done.exit_status})", done.stderr_tail[-12:],
            done.exit_status,
        )  # fmt: skip
    if not envelope.get("ok"):
        error = envelope.get("error") or {}
        raise AgentError(
            verb,
            str(error.get("kind") or "failed"),
            str(error.get("message") or "no message"),
            [str(t) for t in error.get("tail") or []],
            done.exit_status,
        )
    result: dict[str, Any] = envelope.get("result") or {}
    return result


class PodAgent:
    """The pod agent, driven over one transport. Every verb is one call that returns its result."""

    def __init__(self, transport: AgentTransport, say: Say | None = None) -> None:
        self.transport = transport
        self.say = say
        self._agent: str | None = None

    def ensure_agent(self) -> str:
        """The agent's path there: uploaded once per pod, named by its content hash."""
        if self._agent is None:
            from tailpod.agent_client.build import build_agent

            built = build_agent()
            self._agent = self.transport.ensure_file(built.name, built.path.read_bytes())
        return self._agent

    def call(
        self,
        verb: str,
        args: list[str] | None = None,
        payload: dict[str, Any] | None = None,
        *,
        timeout_s: float | None = DEFAULT_TIMEOUT_S,
        say: Say | None = None,
    ) -> dict[str, Any]:
        """Run `<verb> [args]` with `payload` as JSON on stdin; the envelope's result."""
        argv = [self.transport.python, "-I", self.ensure_agent(), *verb.split(), *(args or [])]
        stdin = json.dumps(payload if payload is not None else {}).encode("utf-8")
        done = self.transport.execute(argv, stdin, say or self.say, timeout_s)
        return parse_envelope(verb, done)

    def close(self) -> None:
        self.transport.close()

    def __enter__(self) -> PodAgent:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- the verbs (docs/agent.md) -----------------------------------------------------------

    @property
    def state_dir(self) -> str:
        return self.transport.state_dir

    def version(self) -> dict[str, Any]:
        return self.call("version")

    def engine_start(
        self,
        adapter: EngineAdapter,
        plan: LaunchPlan,
        cfg: EngineConfig,
        *,
        timeout_s: float,
        env_file: str | None = None,
        overlay: dict[str, Any] | None = None,
        relaunch: bool = False,
        say: Say | None = None,
    ) -> EngineStarted:
        """Start (or, between arms, relaunch) the engine there; its start facts, returned."""
        payload = {
            "plan": {
                "argv": plan.argv,
                "env": plan.env,
                "host": cfg.host,
                "port": cfg.port,
                "label": cfg.spec.label(),
                "health_path": plan.health_path,
                "checkpoints": {"model": cfg.model, "draft_model": cfg.spec.draft_model},
                "overlay": overlay,
            },
            "state_dir": self.state_dir,
            "timeout": float(timeout_s),
            "env_file": env_file,
        }
        verb = "engine relaunch" if relaunch else "engine start"
        record = self.call(verb, payload=payload, timeout_s=timeout_s + 120, say=say)
        facts = apply_cache_source(adapter.parse_startup(str(record.get("log_text") or "")),
                                   record.get("inductor_cache"))
        return EngineStarted(record=record, facts=facts, argv=list(plan.argv))

    def engine_stop(self) -> bool:
        result = self.call("engine stop", payload={"state_dir": self.state_dir}, timeout_s=180)
        return bool(result.get("stopped"))

    def engine_status(self) -> dict[str, Any]:
        return self.call("engine status", payload={"state_dir": self.state_dir}, timeout_s=60)

    def probe_run(
        self, options: dict[str, Any], cells: list[dict[str, Any]],
        timeout_s: float = PROBE_RUN_TIMEOUT_S,
    ) -> list[dict[str, Any]]:
        """Exactly these cells, measured there; their rows (format v1), with the given rep and
        cell id already written in."""
        result = self.call(
            "probe run", payload={"options": options, "cells": cells}, timeout_s=timeout_s
        )
        rows: list[dict[str, Any]] = result.get("rows") or []
        return rows

    def gate(self, request: dict[str, Any], timeout_s: float = 900) -> dict[str, Any]:
        """`probe gate`: a saved reference (`save: true`) or a verdict against one."""
        return self.call("probe gate", payload=request, timeout_s=timeout_s)

    def logprobs(self, request: dict[str, Any], timeout_s: float = 7200) -> dict[str, Any]:
        return self.call("probe logprobs", payload=request, timeout_s=timeout_s)

    def metrics(self, request: dict[str, Any]) -> dict[str, Any]:
        return self.call("probe metrics", payload=request, timeout_s=120)

    @property
    def deadman_layout(self) -> DeadmanLayout:
        """Where the switch keeps its heartbeat, state and log: the pod's state directory."""

        return DeadmanLayout(remote_dir=self.state_dir)

    def _heartbeat_file(self) -> str:
        return self.deadman_layout.heartbeat

    def deadman_arm(self, request: dict[str, Any]) -> dict[str, Any]:
        """Arm the switch (idempotent, also a heartbeat); `request` from
        deadman_control.arm_request, without credentials: the pod reads those itself."""
        return self.call("deadman arm", payload=request, timeout_s=120)

    def deadman_heartbeat(self) -> dict[str, Any]:
        return self.call(
            "deadman heartbeat", payload={"heartbeat_file": self._heartbeat_file()}, timeout_s=60
        )

    def deadman_status(self) -> dict[str, Any]:
        return self.call(
            "deadman status", payload={"heartbeat_file": self._heartbeat_file()}, timeout_s=60
        )


@dataclass
class EngineStarted:
    """What one `engine start`/`engine relaunch` returned: the agent's engine record (machine
    facts, engine version, checkpoint identities, startup seconds) and the parsed startup facts."""

    record: dict[str, Any]
    facts: StartupFacts
    argv: list[str]

    @property
    def startup_s(self) -> float:
        return float(self.record.get("startup_s") or 0.0)

    @property
    def checkpoints(self) -> dict[str, Any]:
        found: dict[str, Any] = self.record.get("checkpoints") or {}
        return found

    def arm_start(self) -> ArmStart:
        """The sweep's view of this start (run.json arms[])."""
        return ArmStart(
            startup=self.facts.to_json(),
            argv=self.argv,
            startup_s=self.startup_s,
            checkpoints=self.checkpoints,
        )

    def ledger_arm(self) -> dict[str, Any]:
        """The ledger's entry for this arm (`extra.arms[label]`), kept for status and recovery."""
        return {
            "startup": self.facts.to_json(),
            "startup_s": self.record.get("startup_s"),
            "argv": self.argv,
            "checkpoints": self.checkpoints,
        }
