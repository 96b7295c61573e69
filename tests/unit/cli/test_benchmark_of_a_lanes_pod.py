"""`benchmark` of a pod that `up --lanes` left serving two lanes behind HAProxy is recorded as the
lanes it is (issue 38 item 6, adversary F7 scenario 7): one arm `deploy-lanes` whose start is
HAProxy's in front of the spec lane's, with the admission limit and both lanes' facts, never arm
`plain` with the spec lane's argv; no engine is restarted; and a sweep of other arms is refused
(exit 2) before the SSH wait, since it would replace the lanes."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from tailpod.cli.main import app
from tailpod.config import load_settings
from tailpod.engines.base import EngineConfig, SpecArm
from tailpod.ledger import Ledger, PodExtra, PodRecord
from tailpod.measure.plan import Arm, Cell, SweepPlan
from tests.unit.measure.test_sweep import ScriptedHost

TAG = "tp-lanes-pod"
PLAIN = EngineConfig(engine="vllm", model="/m")
SPEC = EngineConfig(engine="vllm", model="/m", spec=SpecArm(k=2, method="ngram"))
SPEC_ARGV = ["vllm", "serve", "/m", "--speculative-config", '{"method": "ngram", "k": 2}']


def _lane(cfg: EngineConfig, port: int, argv: list[str]) -> dict[str, Any]:
    return {"port": port, "argv": argv, "engine_config": cfg.to_json(), "startup_s": 1.5,
            "startup": {"engine": "vllm", "facts": {"kv_tokens": 1000}, "lines": []},
            "budget": {"kv_gib": 1.0}}


class WholeRows(ScriptedHost):
    """The scripted host, with cell rows whole enough for the summary table to load."""

    def run_cells(self, arm: Arm, cells: list[Cell], plan: SweepPlan,
                  run_id: str) -> list[dict[str, Any]]:
        return [{"kind": "cell", "schema_version": 1, "run_id": run_id, "arm": arm.label, "cell": c.cell_id,
                 "concurrency": c.concurrency, "rep": c.rep, "prompt_class": c.prompt_class,
                 "requests": 8, "failed": 0, "wall_s": 1.0, "output_tokens": 100,
                 "output_tok_s": 100.0} for c in cells]


@pytest.fixture()
def lanes_pod(tailpod_home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TAILPOD_RESULTS_DIR", str(tmp_path / "results"))
    settings = load_settings()
    lanes = {"admission_limit": 2, "front_port": 8000,
             "haproxy": {"binary": "haproxy", "config": str(tmp_path / "haproxy.cfg"),
                         "stats_socket": str(tmp_path / "absent.sock")},
             "lanes": {"spec": _lane(SPEC, 8001, SPEC_ARGV),
                       "plain": _lane(PLAIN, 8002, ["vllm", "serve", "/m"])}}
    # `up --lanes` records the proxy as the pod, its engine config the plain one
    Ledger(settings.state_dir).put(PodRecord(
        run_tag=TAG, provider="local", status="running", pod_id=f"local:{TAG}",
        engine=PLAIN.to_json(), extra=PodExtra(lanes=lanes)))


def test_a_benchmark_of_a_lanes_pod_is_recorded_as_the_lanes(
        lanes_pod: None, tailpod_home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    host = WholeRows({0: 10.0, 2: 15.0})
    monkeypatch.setattr("tailpod.measure.hosts.sweep_host", lambda *_a, **_k: host)
    result = CliRunner().invoke(app, ["benchmark", TAG, "--concurrency", "1", "--reps", "1",
                                      "--run-id", "lanes-run"])
    assert result.exit_code == 0, result.output
    run_dir = load_settings().results_dir / "lanes-run"
    run = json.loads((run_dir / "run.json").read_text())
    assert [a["label"] for a in run["arms"]] == ["deploy-lanes"]
    arm = run["arms"][0]
    assert arm["argv"] == ["haproxy", "-f", str(Path(arm["argv"][2])), "--", *SPEC_ARGV]
    assert arm["startup"]["admission_limit"] == 2
    assert set(arm["startup"]["lanes"]) == {"spec", "plain"}
    rows = [json.loads(line) for line in (run_dir / "rows.jsonl").read_text().splitlines()]
    assert {r["arm"] for r in rows} == {"deploy-lanes"}
    assert not any(e.startswith("restart") for e in host.events)  # the lanes were not replaced


def test_a_sweep_of_other_arms_on_a_lanes_pod_is_refused_before_the_ssh_wait(
        lanes_pod: None, monkeypatch: pytest.MonkeyPatch) -> None:
    reached: list[str] = []

    def ssh_wait(*_a: object, **_k: object) -> None:
        reached.append("ssh")
        raise AssertionError("the SSH wait was reached")

    monkeypatch.setattr("tailpod.measure.hosts.sweep_host", ssh_wait)
    result = CliRunner().invoke(app, ["benchmark", TAG, "--spec-k", "0,2"])
    assert result.exit_code == 2, result.output
    assert "serves two lanes" in result.output and reached == []
