"""`tailpod logs TAG` asks the pod's kind for its engine log (issue 37 item 11: the CLI no longer
branches on where the engine runs): this machine's kind reads the file its engine writes, a pod's
kind (a rented pod, your own box) reads it through the pod agent over one SSH session to the
pod's recorded address (over the tailnet when it joined)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

import tailpod.pods.cloud as cloud
from tailpod.agent_client.driver import PodAgent, SubprocessTransport
from tailpod.config import load_settings
from tailpod.ledger import PodRecord
from tailpod.pods.kinds import kind_for
from tailpod.provision.ssh.client import SshTarget

TEXT = "".join(f"INFO line {i:03d} of the engine\n" for i in range(50))


def _engine_state(state_dir: Path, log: Path) -> None:
    state_dir.mkdir(parents=True, exist_ok=True)
    (state_dir / "engine.json").write_text(json.dumps({
        "pid": 999999, "pgid": 999999, "start_time": 0, "log": str(log), "log_offset": 0,
        "host": "127.0.0.1", "port": 1, "label": "plain", "health_path": "/health"}))


def test_this_machines_kind_reads_the_file_its_engine_writes(
        tailpod_home: Path, tmp_path: Path) -> None:
    settings = load_settings()
    log = tmp_path / "engine-plain.log"
    log.write_text(TEXT)
    _engine_state(settings.state_dir / "local" / "tp-l", log)
    record = PodRecord(run_tag="tp-l", provider="local", status="running", pod_id="local:tp-l")
    reader = kind_for("local").engine_log(settings, record, say=lambda _line: None)
    try:
        size = len(TEXT.encode())
        assert reader.size() == size
        assert reader.read_from(size - 30) == (TEXT[-30:], size)
    finally:
        reader.close()


@pytest.mark.parametrize("provider", ["runpod", "vastai", "ssh"])
def test_a_pods_kind_reads_it_through_the_agent_over_the_recorded_address(
        tailpod_home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        provider: str) -> None:
    settings = load_settings()
    state = tmp_path / "agent-state"  # the pod's agent state, here played by a child process
    log = state / "engine-plain.log"
    state.mkdir()
    log.write_text(TEXT)
    _engine_state(state, log)
    opened: list[tuple[Any, ...]] = []

    def open_pod_agent(s: Any, target: SshTarget, wait_s: float, say: Any = None) -> PodAgent:
        opened.append((s, target, wait_s))
        return PodAgent(SubprocessTransport(state))

    monkeypatch.setattr(cloud, "open_pod_agent", open_pod_agent)
    ssh = {"host": "203.0.113.7", "port": 40022, "user": "root"}
    record = PodRecord(run_tag="tp-p", provider=provider, status="running", ssh=ssh)
    reader = kind_for(provider).engine_log(settings, record, say=lambda _line: None)
    try:
        size = len(TEXT.encode())
        assert reader.size() == size
        assert reader.read_from(size - 30) == (TEXT[-30:], size)
    finally:
        reader.close()
    assert opened == [(settings, SshTarget.from_record(ssh), 30)]
