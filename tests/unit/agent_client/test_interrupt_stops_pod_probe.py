"""Ctrl-C of a benchmark stops the pod-side probe (issue 38 item 6, adversary F7, scenario 4:
`probe run` sent 368 requests after the interrupt). Over SSH a closed channel does not stop a
command that is not writing, so the driver learns each probe call's process group on the pod
and kills it before the KeyboardInterrupt reaches `handle_errors` (exit 130)."""

from __future__ import annotations

from typing import Any

import pytest

from tailpod.agent_client.driver import PodAgent, SshTransport


class Result:
    exit_status = 0
    tail: list[str] = []


class InterruptedSession:
    """An SSH session whose first command says its process group and a progress line, then is
    interrupted (Ctrl-C); every command is recorded."""

    def __init__(self) -> None:
        self.commands: list[str] = []

    def run(self, command: str, on_line: Any = None, **_kw: Any) -> Result:
        self.commands.append(command)
        if len(self.commands) == 1:
            on_line("tailpod-agent-pgid 4242")
            on_line("cell 1/1: sending")
            raise KeyboardInterrupt
        return Result()

    def close(self) -> None:
        pass


def _agent(session: InterruptedSession, monkeypatch: pytest.MonkeyPatch,
           said: list[str]) -> PodAgent:
    agent = PodAgent(SshTransport(session, state_dir="/pod/.tailpod"), say=said.append)
    monkeypatch.setattr(agent, "ensure_agent", lambda: "/pod/.tailpod/agent.pyz")
    return agent


def test_ctrl_c_of_probe_run_kills_its_process_group_on_the_pod(
        monkeypatch: pytest.MonkeyPatch) -> None:
    session, said = InterruptedSession(), []
    agent = _agent(session, monkeypatch, said)
    with pytest.raises(KeyboardInterrupt):
        agent.probe_run({"base_url": "http://127.0.0.1:8000"}, [{"cell_id": "x"}])
    assert len(session.commands) == 2
    assert "probe run" in session.commands[0].replace("'", "")
    # the second command stops that group: TERM, then KILL for what is left
    assert "kill -s TERM -- -4242" in session.commands[1]
    assert "kill -s KILL -- -4242" in session.commands[1]
    assert agent.transport.stopped_groups == [4242]  # type: ignore[attr-defined]
    assert said == ["cell 1/1: sending"]  # the group's line is the driver's, not progress


def test_an_engine_start_interrupted_is_left_to_down(monkeypatch: pytest.MonkeyPatch) -> None:
    """Only the probe verbs are stopped: an engine start runs in its own session on the pod
    (agent/bootstrap/engine.py) and is the ledger's to settle with `down`."""
    session, said = InterruptedSession(), []
    agent = _agent(session, monkeypatch, said)
    with pytest.raises(KeyboardInterrupt):
        agent.call("engine status", payload={})
    assert len(session.commands) == 1
    assert "tailpod-agent-pgid" not in session.commands[0]


# `--provider local`: the agent is a child of this process. A SIGINT sent to tailpod alone (not
# to the terminal's whole group: `kill -INT`, a CI runner) left its probe and load workers
# sending; the transport starts a probe call in its own process group and stops that group.
LOCAL_PROBE = r"""
import subprocess, sys, time
pids = sys.argv[4]  # argv: script - probe run PIDS
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
open(pids, "w").write(f"{__import__('os').getpid()} {child.pid}")
print("started", file=sys.stderr, flush=True)
time.sleep(30)
"""


def _alive(pid: int) -> bool:
    from pathlib import Path

    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state not in ("Z", "X")


def test_ctrl_c_of_a_local_probe_call_stops_the_probe_and_its_workers(tmp_path: Any) -> None:
    import _thread
    import contextlib
    import os
    import signal
    import sys
    import time

    from tailpod.agent_client.driver import SubprocessTransport

    script, pids = tmp_path / "probe.py", tmp_path / "pids"
    script.write_text(LOCAL_PROBE)

    def interrupt_once_started(line: str) -> None:  # called on the transport's reader thread
        if line == "started":
            _thread.interrupt_main()

    started: list[int] = []
    try:
        with pytest.raises(KeyboardInterrupt):
            SubprocessTransport(tmp_path).execute(
                [sys.executable, str(script), "-", "probe", "run", str(pids)], b"{}",
                interrupt_once_started, 60)
        started = [int(p) for p in pids.read_text().split()]
        deadline = time.monotonic() + 5
        while any(_alive(p) for p in started) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert [p for p in started if _alive(p)] == [], "the local probe kept running"
    finally:
        for pid in started:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
