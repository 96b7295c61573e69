"""`benchmark --run-id RUN` resumed on another pod than the one the run began on (a spot pod was
preempted, issue 40): the plain reference and the gates of the arms still to measure are cleared
so the sweep takes them again on the new pod before any of its numbers; once, not at every later
resume on that pod; a resume on the same pod keeps its gates."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tailpod.engines.base import EngineConfig
from tailpod.ledger import PodRecord
from tailpod.measure.benchmark import resume_on_new_pod
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


def test_a_sweep_cut_by_a_preemption_resumes_on_the_new_pod_with_no_cell_mixing_pods(
        tmp_path: Path) -> None:
    """Four cells (plain c=1,2; ngram-k1 c=1,2); the pod is preempted during the fourth, after one
    of its requests was written. The resume on the new pod drops that request, takes the gate
    again, measures the cut cell there, and every cell's rows name one pod."""
    from tailpod.errors import TailpodError
    from tailpod.measure.benchmark import pod_stamped
    from tailpod.measure.sweep import run_sweep
    from tests.helpers.probe_rows import request_row
    from tests.unit.measure.test_sweep import ScriptedHost, ctx, make_plan

    class Preempted(ScriptedHost):
        def run_cells(self, arm: Any, cells: Any, plan: Any, run_id: str) -> Any:
            if self.cells_run >= 3:
                raise TailpodError("the pod stopped answering over SSH (connection reset)")
            return super().run_cells(arm, cells, plan, run_id)

    plan = make_plan([0, 1], extend=False)
    run_dir = RunDirectory(tmp_path / "run")
    first = RunContext(**{**ctx().__dict__, "run_tag": "tp-a"})
    with pytest.raises(TailpodError, match="connection reset"):
        run_sweep(plan, run_dir, pod_stamped(Preempted({0: 10, 1: 15}), _record("tp-a")), first,
                  log=lambda *_: None)
    cut = "ngram-k1|c2|r0|prose"
    run_dir.append_rows([{**request_row(cell=cut, arm="ngram-k1", completion_tokens=8),
                          "pod": {"run_tag": "tp-a"}}])  # half a cell on the lost pod

    new = ScriptedHost({0: 10, 1: 15})
    assert resume_on_new_pod(run_dir, plan, _record("tp-b")) == ["ngram-k1"]
    run_sweep(plan, run_dir, pod_stamped(new, _record("tp-b")), first, log=lambda *_: None)
    rows = run_dir.read_rows()
    cells = [r for r in rows if r.get("kind") == "cell"]
    assert sorted(r["cell"] for r in cells) == sorted(
        ["plain|c1|r0|prose", "plain|c2|r0|prose", "ngram-k1|c1|r0|prose", cut])
    by_pod = {r["cell"]: r["pod"]["run_tag"] for r in cells}
    assert by_pod[cut] == "tp-b" and list(by_pod.values()).count("tp-a") == 3
    for row in rows:  # no request row of the cut cell from the lost pod is counted
        if row.get("kind") == "request":
            assert row["pod"]["run_tag"] == by_pod[row["cell"]]
    assert [e for e in new.events if e.startswith("cell")] == [f"cell {cut}"]
    assert new.events.index("reference plain") < new.events.index("gate ngram-k1") \
        < new.events.index(f"cell {cut}")  # gated again on the new pod before its numbers
