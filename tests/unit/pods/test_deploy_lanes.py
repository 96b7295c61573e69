"""`benchmark --deploy` of a two-lane deployment (measure/deploy.py): the sweep runs plain, then the
deployment as the arm `deploy-lanes`, served by two synthetic lanes behind a real HAProxy on the
engine's own port; the probe's traffic reaches the proxy where it reached the engine, HAProxy's
counts land on the deployment's cell rows, and closing the sweep proves the lanes gone."""

from __future__ import annotations

import json
import socket
import threading
from pathlib import Path
from typing import Any

import pytest

from tailpod.agent_client.driver import ArmStart
from tailpod.config import load_settings
from tailpod.engines.base import EngineConfig
from tailpod.errors import ConfigError
from tailpod.ledger import Ledger, PodRecord
from tailpod.measure.deploy import DeployingHost, deploy_arm, read_deployment
from tailpod.measure.plan import Arm, Cell, SweepPlan, spec_arms
from tailpod.measure.sweep import GateResult, RunContext, RunDirectory, run_sweep
from tailpod.sandbox.synthetic_server import SyntheticConfig, SyntheticServer
from tests.helpers.probe_rows import cell_row
from tests.unit.pods.test_lanes_haproxy import _free_ports, _stream, _synthetic, pytestmark  # noqa: F401

LANES = {"kind": "lanes", "admission_limit": 2,
         "lanes": [{"name": "spec", "k": 2, "method": "ngram", "maxconn": 2},
                   {"name": "plain", "k": 0, "method": None, "maxconn": None}]}


class EngineOnPort:
    """The pod's single engine (a synthetic server) and a probe that streams to its port."""

    measured_from = "pod"

    def __init__(self, port: int) -> None:
        self.port = port
        self.server: SyntheticServer | None = None
        self.events: list[str] = []
        self.engine_stopped = False

    def restart(self, arm: Arm) -> ArmStart:
        self.events.append(f"restart {arm.label}")
        if self.server is None:
            self.server = SyntheticServer(SyntheticConfig(rate=60.0, fixed_tokens=12),
                                          port=self.port).start()
        return ArmStart(startup={"engine": "vllm", "facts": {}, "lines": []}, argv=["engine"],
                        startup_s=0.1)

    def stop_engine(self) -> None:
        self.events.append("stop engine")
        if self.server is not None:
            self.server.stop()
            self.server = None

    def run_cells(self, arm: Arm, cells: list[Cell], plan: SweepPlan,
                  run_id: str) -> list[dict[str, Any]]:
        rows = []
        for cell in cells:
            threads = [threading.Thread(target=_stream, args=(f"http://127.0.0.1:{self.port}",))
                       for _ in range(cell.concurrency)]
            for t in threads:
                t.start()
            for t in threads:
                t.join(60)
            rows.append(cell_row(cell=cell.cell_id, arm=arm.label,
                                 concurrency=cell.concurrency, rep=cell.rep, output_tok_s=1.0,
                                 failed=0))
        return rows

    def gate_reference(self, arm: Arm, plan: SweepPlan) -> dict[str, Any]:
        return {"token_ids": [[1]]}

    def gate_compare(self, arm: Arm, reference: dict[str, Any], plan: SweepPlan) -> GateResult:
        self.events.append(f"gate {arm.label}")
        return GateResult("pass", "token_ids", 1)

    def bare_decode(self, arm: Arm, plan: SweepPlan) -> dict[str, Any]:
        return {"status": "not_measured"}

    def close(self) -> None:
        self.events.append("close")
        self.stop_engine()


def test_the_lanes_deployment_is_measured_as_one_more_arm(tailpod_home: Path,
                                                          tmp_path: Path) -> None:
    port, spec_port, plain_port = _free_ports(3)
    settings = load_settings()
    ledger = Ledger(settings.state_dir)
    base = EngineConfig(engine="vllm", model="/m", port=port)
    record = ledger.put(PodRecord(run_tag="tp-pod", provider="local", engine=base.to_json()))
    inner = EngineOnPort(port)
    arm = deploy_arm(base, LANES)
    assert arm.label == "deploy-lanes" and arm.config.spec.k == 2
    host = DeployingHost(
        inner, settings, ledger, record, LANES,
        launches_for=lambda a, d: [_synthetic("spec", spec_port), _synthetic("plain", plain_port)],
        stop_engine=inner.stop_engine)
    plan = SweepPlan(arms=[*spec_arms(base, [0], "ngram", None), arm], concurrency=[1, 4],
                     reps=1, extend_k=False)
    run_dir = RunDirectory(tmp_path / "run")
    try:
        run = run_sweep(plan, run_dir, host,
                        RunContext(run_id="r1", provider="local", model="/m", engine="vllm"),
                        log=lambda *_: None)
    finally:
        host.close()
    assert inner.events[:3] == ["restart plain", "stop engine", "gate deploy-lanes"]
    entry = next(a for a in run["arms"] if a["label"] == "deploy-lanes")
    assert entry["gate"]["status"] == "pass"
    assert entry["startup"]["admission_limit"] == 2
    assert set(entry["startup"]["lanes"]) == {"spec", "plain"}
    cells = {r["concurrency"]: r for r in run_dir.read_rows()
             if r.get("kind") == "cell" and r["arm"] == "deploy-lanes"}
    # c=1: one request, on the spec lane; c=4 next: two more on spec (its limit), two overflow
    assert cells[1]["lane_counts"]["spec"]["stot"] == 1
    assert cells[1]["lane_counts"]["plain"]["stot"] == 0
    assert cells[4]["lane_counts"]["spec"]["smax"] == 2
    assert cells[4]["lane_counts"]["plain"]["stot"] >= 1
    assert cells[4]["lane_counts"]["spec"]["stot"] + cells[4]["lane_counts"]["plain"]["stot"] == 5
    for p in (port, spec_port, plain_port):
        with socket.socket() as s:
            assert s.connect_ex(("127.0.0.1", p)) != 0, f"port {p} still open"
    lanes_records = [r for r in ledger.all() if r.extra.lanes]
    assert [r.status for r in lanes_records] == ["terminated"]


def test_read_deployment_and_static_arm(tmp_path: Path) -> None:
    path = tmp_path / "decision.json"
    path.write_text(json.dumps({"deployment": {"kind": "static", "arm": "ngram-k3", "k": 3,
                                               "method": "ngram"}}))
    dep = read_deployment(path)
    arm = deploy_arm(EngineConfig(engine="vllm", model="/m"), dep)
    assert arm.label == "deploy-static" and arm.config.spec.k == 3
    assert arm.config.spec.method == "ngram"
    path.write_text(json.dumps({"deployment": {"kind": "none"}}))
    with pytest.raises(ConfigError, match="no deployment"):
        read_deployment(path)
