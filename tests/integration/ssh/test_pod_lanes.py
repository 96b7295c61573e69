"""Two lanes on a pod (pods/cloud_lanes.py), through the pod agent over real SSH: the spec lane,
then the plain lane, the token-identity gate, then HAProxy prepared by the agent and started on
the pod's engine port; `status` reads both lanes, the proxy and HAProxy's counters through the
agent; `down`'s settle step writes the final counts and stops all three. A diverging spec lane is
refused with nothing left listening. The lanes are synthetic servers (each request ~0.2 s)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tailpod.agent.bootstrap import haproxy
from tailpod.config import Settings, load_settings
from tailpod.engines.base import EngineConfig
from tailpod.ledger import Ledger, PodRecord
from tailpod.pods import cloud_lanes, lanes
from tailpod.provision.ssh import SshTarget
from tailpod.provision.teardown import run_dir_for
from tailpod.sandbox.sshd import SshdHost
from tests.unit.pods.test_lanes_haproxy import _free_ports, _listening, _pod_lane, _stream

from .conftest import open_agent

pytestmark = [pytest.mark.sshd,
              pytest.mark.skipif(haproxy.find_haproxy() is None, reason="haproxy not installed")]


@pytest.fixture()
def settings(tmp_path: Path, user_key: Path, monkeypatch: pytest.MonkeyPatch) -> Settings:
    monkeypatch.chdir(tmp_path)  # lanes.json lands in the run directory under tmp_path
    env = {"TAILPOD_HOME": str(tmp_path / "home"), "TAILPOD_SSH_KEY": str(user_key)}
    return load_settings(env=env, dotenv_path=tmp_path / "absent.env")


def test_lanes_on_a_pod_gate_serve_count_and_stop(agent_pod: tuple[SshdHost, Path],
                                                  settings: Settings) -> None:
    pod, _state = agent_pod
    front, spec_port, plain_port = _free_ports(3)
    cfg = EngineConfig(engine="vllm", model="m", port=front)
    with open_agent(settings, pod) as agent:
        started = cloud_lanes.start_lanes_on_pod(
            agent, settings, cfg, [_pod_lane("spec", spec_port), _pod_lane("plain", plain_port)], 1)
    info = started.record["lanes"]
    ledger = Ledger(settings.state_dir)
    record = PodRecord(run_tag="tp-pod-lanes", provider="runpod", status="running",
                       endpoint=f"http://127.0.0.1:{front}",
                       ssh=SshTarget(pod.host, pod.port, pod.user).to_record(),
                       extra={"lanes": info})
    ledger.put(record)
    try:
        assert info["on_pod"] and info["admission_limit"] == 1
        assert info["gate"]["status"] == "pass" and info["gate"]["method"] == "token_ids"
        assert info["lanes"]["plain"]["started_after"] == "spec lane"
        assert info["haproxy"]["version"].startswith("HAProxy version")
        assert Path(info["haproxy"]["config"]).read_text().count("balance first") == 1
        _stream(f"http://127.0.0.1:{front}")  # one request through the pod's proxy
        seen = cloud_lanes.status(settings, record)
        assert seen["proxy"]["alive"] is True
        assert {n: (r["healthy"], r["requests"]) for n, r in seen["lanes"].items()} == {
            "spec": (True, 1), "plain": (True, 0)}
        settled = cloud_lanes.settle_lanes_run(settings, ledger, record)
    finally:
        left = _listening(front, spec_port, plain_port)
        if left:  # the test's own cleanup through the agent, whatever the code under test did
            with open_agent(settings, pod) as agent:
                for name in ("spec", "plain", "proxy"):
                    agent.call("engine stop", payload={
                        "state_dir": cloud_lanes.lane_dir(agent.state_dir, name)})
    assert left == []
    assert {p["lane"]: p["stopped"] for p in settled.extra.lanes_down} == {
        "spec": True, "plain": True, "proxy": True}
    saved = json.loads((run_dir_for(settings, record.run_tag) / lanes.LANES_FILE).read_text())
    assert saved["counts_final"] is True
    assert {n: r["requests"] for n, r in saved["lanes"].items()} == {"spec": 1, "plain": 0}


def test_a_diverging_spec_lane_on_a_pod_is_refused_with_nothing_listening(
        agent_pod: tuple[SshdHost, Path], settings: Settings) -> None:
    pod, _state = agent_pod
    front, spec_port, plain_port = _free_ports(3)
    cfg = EngineConfig(engine="vllm", model="m", port=front)
    with open_agent(settings, pod) as agent, pytest.raises(lanes.LaneGateFailed) as caught:
        cloud_lanes.start_lanes_on_pod(
            agent, settings, cfg, [_pod_lane("spec", spec_port, "--diverge-position", "5"),
                                   _pod_lane("plain", plain_port)], 1)
    assert "prompt 0 differs from the plain lane at token 5" in caught.value.message
    assert _listening(front, spec_port, plain_port) == []


def test_prepare_without_haproxy_or_apt_get_says_so(tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(haproxy, "find_haproxy", lambda: None)
    monkeypatch.setattr(haproxy.shutil, "which", lambda _name: None)
    with pytest.raises(haproxy.EngineStartError, match="no apt-get"):
        haproxy.prepare("global\n", tmp_path)
    assert not (tmp_path / "haproxy.cfg").exists()
