"""`benchmark --run-id RUN` resumed on another pod than the one the run began on (a spot pod was
preempted, issue 40): the plain reference and the gates of the arms still to measure are cleared
so the sweep takes them again on the new pod before any of its numbers; once, not at every later
resume on that pod; a resume on the same pod keeps its gates."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tailpod.cli.benchmark import resume_on_new_pod
from tailpod.engines.base import EngineConfig
from tailpod.ledger import PodRecord
from tailpod.measure.plan import SweepPlan, spec_arms
from tailpod.measure.sweep import GateResult, RunContext, RunDirectory, _arm_entry, new_run

PASSED = GateResult("pass", method="ngram", prompts=4).to_json()


def _run(tmp_path: Path) -> tuple[RunDirectory, SweepPlan]:
    plan = SweepPlan(arms=spec_arms(EngineConfig(engine="vllm", model="org/tiny"), [0, 2],
                                    "ngram", None), concurrency=[1], reps=1, extend_k=False)
    run_dir = RunDirectory(tmp_path / "run")
    run = new_run(RunContext(run_id="run", provider="vastai", model="org/tiny", engine="vllm",
                             run_tag="tp-old"), plan, "pod")
    for arm in plan.arms:
        _arm_entry(run, arm)
    run["arms"][1]["gate"] = PASSED
    run["gate_reference"] = {"tokens": [[1, 2, 3]]}
    run_dir.save(run)
    return run_dir, plan


def _record(tag: str) -> PodRecord:
    return PodRecord(run_tag=tag, provider="vastai", pod_id="7", status="running")


def _gates(run: dict[str, Any]) -> list[Any]:
    return [a.get("gate") for a in run["arms"]]


def test_a_resume_on_a_new_pod_takes_the_gate_again_there_once(tmp_path: Path) -> None:
    run_dir, plan = _run(tmp_path)
    assert resume_on_new_pod(run_dir, plan, _record("tp-new")) == ["ngram-k2"]
    run = run_dir.load()
    assert run is not None
    assert _gates(run) == [None, None] and run.get("gate_reference") is None
    assert "resumed on tp-new after tp-old: the gate is taken again there" in run["notes"]
    # gated again on tp-new by the sweep; a later resume there keeps that gate
    run["arms"][1]["gate"] = PASSED
    run_dir.save(run)
    assert resume_on_new_pod(run_dir, plan, _record("tp-new")) == []
    assert _gates(run_dir.load() or {}) == [None, PASSED]


def test_a_resume_on_the_same_pod_keeps_its_gate(tmp_path: Path) -> None:
    run_dir, plan = _run(tmp_path)
    assert resume_on_new_pod(run_dir, plan, _record("tp-old")) == []
    run = run_dir.load()
    assert run is not None and _gates(run) == [None, PASSED]
    assert run["gate_reference"] == {"tokens": [[1, 2, 3]]}
