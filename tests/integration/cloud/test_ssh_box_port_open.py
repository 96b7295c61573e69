"""`--provider ssh`: a port still open on the box is never proven closed.

A mutant making `SshBoxProvider.port_open` always answer "closed" survived every non-e2e test
(issue 26): the only test that reached it needed a real sshd and engine. Here the pod agent runs
as a local child process (`SubprocessTransport`, as `--provider local` drives it), so the box's
port check is the real one, made by a real `python3 -c` against a real loopback listener that
the test leaves up. Whether the port accepts connections is settled by the test's own socket.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tailpod.agent.bootstrap.engine import STATE_FILE
from tailpod.agent_client.driver import PodAgent, SubprocessTransport
from tailpod.cli.main import app
from tailpod.config import load_settings
from tailpod.ledger import Ledger, PodRecord
from tailpod.provision.ssh_box import BoxAddress
from tailpod.provision.ssh_box.provider import RUN_MARKER, SshBoxProvider

runner = CliRunner()
TAG = "tp-box-port"
POD_ID = BoxAddress("root", "127.0.0.1", 22).pod_id(TAG)


def _dead_pgid() -> int:
    """A process group that existed and is gone: the engine was stopped."""
    proc = subprocess.Popen(["true"], start_new_session=True)
    proc.wait(timeout=30)
    return proc.pid


@pytest.fixture()
def bound() -> Iterator[socket.socket]:
    """A loopback port bound but not listening yet (connections refused until `listen()`)."""
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    try:
        yield sock
    finally:
        sock.close()


def _accepts(port: int) -> bool:
    """The test's own answer, independent of tailpod's check."""
    with socket.socket() as s:
        s.settimeout(2)
        return s.connect_ex(("127.0.0.1", port)) == 0


def _box_state(state_dir: Path, port: int) -> None:
    """The agent's record of a stopped engine that served on `port`, and the run's marker."""
    state_dir.mkdir(parents=True, exist_ok=True)
    pgid = _dead_pgid()
    (state_dir / STATE_FILE).write_text(json.dumps(
        {"pid": pgid, "pgid": pgid, "host": "127.0.0.1", "port": port,
         "health_path": "/health"}))
    (state_dir / RUN_MARKER).write_text(TAG)


def _local_agents(monkeypatch: pytest.MonkeyPatch, state_dir: Path) -> None:
    """Every agent the provider opens runs here as a child, with no credential in its env."""
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "LANG": "C.UTF-8"}
    monkeypatch.setattr(SshBoxProvider, "agent", lambda self, box: PodAgent(
        SubprocessTransport(state_dir, python=sys.executable, env=env)))


def test_the_box_proof_fails_while_the_engine_port_accepts_connections(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, bound: socket.socket
) -> None:
    state_dir = tmp_path / "box-state"
    port = bound.getsockname()[1]
    _box_state(state_dir, port)
    _local_agents(monkeypatch, state_dir)
    provider = SshBoxProvider(load_settings(env={}, dotenv_path=tmp_path / "absent.env"))

    bound.listen()
    assert _accepts(port)
    evidence = provider.billing_evidence(TAG, POD_ID, 0.0)
    checks = {c.name: c for c in evidence.checks}
    assert checks["engine stopped"].passed  # the recorded process group is gone...
    assert not checks["port closed"].passed  # ...but its port still answers: not proven
    assert checks["port closed"].detail == f"127.0.0.1:{port} on 127.0.0.1 accepts connections"

    bound.close()  # the control: once nothing listens, the same check passes
    assert not _accepts(port)
    evidence = provider.billing_evidence(TAG, POD_ID, 0.0)
    checks = {c.name: c for c in evidence.checks}
    assert checks["port closed"].passed
    assert checks["port closed"].detail == f"127.0.0.1:{port} on 127.0.0.1 refuses connections"


def test_down_of_a_box_whose_port_stays_open_exits_3_and_does_not_reassure(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, bound: socket.socket
) -> None:
    """The engine stops cleanly, then something answers on its port again before the proof (a
    straggler of the engine, another server): `down` must say so and exit 3, not prove it."""
    state_dir = tmp_path / "box-state"
    port = bound.getsockname()[1]
    _box_state(state_dir, port)
    _local_agents(monkeypatch, state_dir)
    for name, value in {"TAILPOD_HOME": str(tmp_path / "home"),
                        "TAILPOD_ENV_FILE": os.devnull,
                        "TAILPOD_RESULTS_DIR": str(tmp_path / "results")}.items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("TAILPOD_SSH_HOST", raising=False)
    Ledger(tmp_path / "home").put(PodRecord(run_tag=TAG, provider="ssh", status="running",
                                            pod_id=POD_ID,
                                            ssh={"host": "127.0.0.1", "port": 22}))
    terminate = SshBoxProvider.terminate
    stopped: list[str] = []

    def terminate_then_listen(self: SshBoxProvider, pod_id: str) -> None:
        terminate(self, pod_id)  # the real stop, while nothing listens
        stopped.append(pod_id)
        bound.listen()

    monkeypatch.setattr(SshBoxProvider, "terminate", terminate_then_listen)

    result = runner.invoke(app, ["down", TAG, "--timeout", "60"], env={"COLUMNS": "250"})

    assert stopped == [POD_ID]
    assert not (state_dir / RUN_MARKER).exists()  # the real terminate ran to its end
    assert _accepts(port)
    assert result.exit_code == 3, result.output
    flat = " ".join(result.output.split())
    assert "billing proven stopped" not in flat and "billing is NOT proven stopped" in flat
    # The table folds a cell to the width it gets (under xdist, not the terminal's): the check's
    # own words are read from the proof, and found in the output with whitespace removed.
    proof = json.loads((tmp_path / "results" / TAG / "billing-proof.json").read_text())
    assert proof["proven"] is False
    failed = {c["name"]: c["detail"] for c in proof["checks"] if not c["passed"]}
    said = f"127.0.0.1:{port} on 127.0.0.1 accepts connections"
    assert failed == {"port closed": said}
    assert "".join(said.split()) in "".join(result.output.split()).replace("│", "")
