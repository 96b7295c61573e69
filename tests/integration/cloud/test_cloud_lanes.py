"""`up --lanes` on a rented pod, on the sandbox cloud: a real RunPod-emulated pod with its own sshd,
the tailnet emulator, the dead-man switch armed as for one engine; on it, through its agent, the
spec lane, the plain lane after it, the gate, and HAProxy in front on the engine port. `status`
shows both lanes and the proxy with HAProxy's counts; `down` writes lanes.json's final counts,
stops all three on the pod, then terminates the pod with its billing proof. The lanes are
synthetic servers (the CPU engine's run of the same path is the demo's e2e test)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from tailpod.agent.bootstrap import haproxy
from tailpod.cli.demo_world import DEMO_GPUS, DEMO_IMAGE, demo_model, sandbox_settings
from tailpod.cli.main import app
from tailpod.config import load_settings
from tailpod.engines.base import EngineConfig
from tailpod.ledger import Ledger, PodRecord
from tailpod.pods import cloud as cloud_pods
from tailpod.pods import cloud_lanes, lanes
from tailpod.provision.teardown import PROOF_FILE, run_dir_for
from tailpod.sandbox.sshd import sshd_available
from tailpod.sandbox.tailscale import DEFAULT_API_TOKEN, DEFAULT_AUTH_KEY
from tests.unit.pods.test_lanes_haproxy import _free_ports, _listening, _pod_lane, _stream

pytestmark = [
    pytest.mark.skipif(not sshd_available(), reason="OpenSSH sshd is not installed"),
    pytest.mark.skipif(haproxy.find_haproxy() is None, reason="haproxy is not installed"),
]


def test_lanes_on_a_sandbox_pod_up_status_down(tailpod_home: Path, tmp_path: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cloud_pods, "RUNNING_POLL_S", 0.2)
    front, spec_port, plain_port = _free_ports(3)
    base = load_settings(overrides={"home": tailpod_home, "results_dir": tmp_path / "results",
                                    "port": front})
    with sandbox_settings(base) as (settings, sandbox):
        for key, value in {**sandbox.env(), "TAILPOD_HOME": str(tailpod_home),
                           "TAILPOD_RESULTS_DIR": str(tmp_path / "results"),
                           "TAILSCALE_API_KEY": DEFAULT_API_TOKEN,
                           "TAILSCALE_AUTH_KEY": DEFAULT_AUTH_KEY,
                           "TAILPOD_SSH_KEY": str(settings.ssh_key), "TAILPOD_PROVIDER": "runpod",
                           "TAILPOD_IMAGE": DEMO_IMAGE, "TAILPOD_GPUS": DEMO_GPUS[1],
                           "TAILPOD_MAX_PRICE": "3.5", "TAILPOD_TTL_HOURS": "1"}.items():
            monkeypatch.setenv(key, value)
        # The CLI's own path, with synthetic servers where the CPU engine's lanes would start
        # (their argv, budgets and ports are pod_launches's; the engine's run is the demo's test).
        launches = [_pod_lane("spec", spec_port), _pod_lane("plain", plain_port)]
        for launch in launches:  # what each lane serves, checked before the rental (check_arms)
            launch.engine_config = EngineConfig(engine="vllm", model=str(
                demo_model(tailpod_home)), port=launch.port).to_json()
        asked: list[Any] = []
        monkeypatch.setattr(cloud_lanes, "pod_launches",
                            lambda *a, **k: asked.append((a, k)) or launches)
        up = CliRunner().invoke(app, ["up", "--model", str(demo_model(tailpod_home)),
                                      "--port", str(front), "--lanes", "spec:2,plain",
                                      "--admission-limit", "1", "--json"])
        assert up.exit_code == 0, up.output[-3000:]
        record = PodRecord.from_json(json.loads(up.stdout))
        tag = record.run_tag
        try:
            ((_settings, cfg, specs, _frac, _kv), _kw) = asked[0]
            assert cfg.port == front and [(x.name, x.k) for x in specs] == [("spec", 2),
                                                                             ("plain", 0)]
            info = record.extra.lanes
            assert record.status == "running" and record.extra.deadman["pid"]
            assert record.endpoint and record.endpoint.endswith(f":{front}")  # the proxy's port
            assert info["on_pod"] and info["gate"]["status"] == "pass"
            assert len(sandbox.billing_now()) == 1
            _stream(f"http://127.0.0.1:{front}")  # the sandbox pod's loopback is this machine's
            _stream(f"http://127.0.0.1:{front}")
            status = CliRunner().invoke(app, ["status", tag, "--json", "--no-beat"])
            assert status.exit_code == 0, status.output
            (row,) = json.loads(status.stdout)["pods"]
            assert row["lanes"]["proxy"]["alive"] is True
            assert {n: (r["healthy"], r["requests"]) for n, r in
                    row["lanes"]["lanes"].items()} == {"spec": (True, 2), "plain": (True, 0)}
        finally:
            down = CliRunner().invoke(app, ["down", tag, "--json"])
        assert down.exit_code == 0, down.output
        assert _listening(front, spec_port, plain_port) == []
        final = Ledger(settings.state_dir).get(tag)
        assert final is not None and final.status == "terminated"
        assert {p["lane"]: p["stopped"] for p in final.extra.lanes_down} == {
            "spec": True, "plain": True, "proxy": True}
        saved = json.loads((run_dir_for(settings, tag) / lanes.LANES_FILE).read_text())
        assert saved["counts_final"] is True
        assert {n: r["requests"] for n, r in saved["lanes"].items()} == {"spec": 2, "plain": 0}
        for secret in (DEFAULT_AUTH_KEY, DEFAULT_API_TOKEN, sandbox.runpod_key):
            assert secret not in up.output + status.output + down.output
            assert secret not in (run_dir_for(settings, tag) / lanes.LANES_FILE).read_text()
        proof: dict[str, Any] = json.loads((run_dir_for(settings, tag) / PROOF_FILE).read_text())
        assert proof["proven"] is True
        assert sandbox.billing_now() == []


def test_a_refused_spec_lane_tears_the_pod_down_with_its_proof(
        tailpod_home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from tailpod.errors import TailpodError

    monkeypatch.setattr(cloud_pods, "RUNNING_POLL_S", 0.2)
    front, spec_port, plain_port = _free_ports(3)
    base = load_settings(overrides={"home": tailpod_home, "results_dir": tmp_path / "results",
                                    "port": front})
    with sandbox_settings(base) as (settings, sandbox):
        ledger = Ledger(settings.state_dir)
        spec = _pod_lane("spec", spec_port, "--diverge-position", "2")
        with pytest.raises(TailpodError) as caught:
            cloud_pods.up_cloud(
                settings, EngineConfig(engine="vllm", model="org/m", port=front), ledger,
                lambda _line: None, preflight=False,
                start=lambda agent, s, c, say: cloud_lanes.start_lanes_on_pod(
                    agent, s, c, [spec, _pod_lane("plain", plain_port)], 1, say))
        text = caught.value.message
        assert "the spec lane is refused" in text and "at token 2" in text
        assert "billing proven stopped" in text
        assert _listening(front, spec_port, plain_port) == []
        assert sandbox.billing_now() == []
        (record,) = ledger.all()
        assert record.status == "terminated"
