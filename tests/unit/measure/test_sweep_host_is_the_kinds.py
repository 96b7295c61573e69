"""The sweep's host is chosen by asking the pod's kind (issue 37 item 11): a kind that keeps a
session to its pod (a rented pod, your own box) hands it over and the sweep measures through it;
this machine's kind keeps none, and the sweep runs its agent as a child process. measure/ holds
no branch on where the engine runs and opens no SSH session of its own."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import tailpod.pods.cloud as cloud
import tailpod.pods.kinds as kinds
from tailpod.agent_client.driver import PodAgent, SubprocessTransport
from tailpod.config import load_settings
from tailpod.ledger import Ledger, PodRecord
from tailpod.measure.hosts import LocalSweepHost, RemoteSweepHost, sweep_host


def _refuse(*_args: Any, **_kwargs: Any) -> PodAgent:
    raise AssertionError("an SSH session was opened around the kind")


@pytest.mark.parametrize("provider", ["runpod", "ssh"])
def test_a_pods_sweep_measures_through_the_session_its_kind_opens(
        tailpod_home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        provider: str) -> None:
    settings = load_settings()
    ledger = Ledger(settings.state_dir)
    record = ledger.put(PodRecord(run_tag="tp-p", provider=provider, status="running",
                                  ssh={"host": "203.0.113.7", "port": 40022, "user": "root"}))
    session = PodAgent(SubprocessTransport(tmp_path / "agent"))
    asked: list[tuple[Any, ...]] = []
    said: list[str] = []

    def pod_session(s: Any, rec: PodRecord, wait_s: float, say: Any = None) -> PodAgent:
        asked.append((s, rec.run_tag, wait_s))
        say("connecting")
        return session

    kind = kinds.kind_for(provider)
    monkeypatch.setattr(kind, "pod_session", pod_session)
    monkeypatch.setattr(cloud, "open_pod_agent", _refuse)
    host = sweep_host(settings, ledger, record, lambda _f, line: said.append(line))
    try:
        assert isinstance(host, RemoteSweepHost)
        assert host.pod is session and host.pod_session is session and host.measurer is session
        assert asked == [(settings, "tp-p", 60)] and said == ["connecting"]
    finally:
        host.close()


def test_this_machines_sweep_runs_its_agent_here_and_keeps_no_session(
        tailpod_home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    settings = load_settings()
    ledger = Ledger(settings.state_dir)
    record = ledger.put(PodRecord(run_tag="tp-l", provider="local", status="running"))
    monkeypatch.setattr(cloud, "open_pod_agent", _refuse)
    host = sweep_host(settings, ledger, record)
    try:
        assert isinstance(host, LocalSweepHost) and host.pod_session is None
    finally:
        host.close()
