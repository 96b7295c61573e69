"""The sweep orchestrator against a scripted host: order, gate, void, resume, K extension."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tailpod.agent_client.driver import ArmStart
from tailpod.engines.base import EngineConfig
from tailpod.measure.plan import Arm, Cell, SweepPlan, spec_arms
from tailpod.measure.sweep import GateResult, RunContext, RunDirectory, run_sweep
from tests.helpers.probe_rows import cell_row, request_row

BASE = EngineConfig(engine="vllm", model="/m")


class ScriptedHost:
    measured_from = "pod"

    def __init__(
        self,
        tok_s_by_k: dict[int, float],
        diverging_k: set[int] | None = None,
        crash_after_cells: int | None = None,
    ) -> None:
        self.tok_s_by_k = tok_s_by_k
        self.diverging_k = diverging_k or set()
        self.crash_after_cells = crash_after_cells
        self.events: list[str] = []
        self.cells_run = 0

    def restart(self, arm: Arm) -> ArmStart:
        self.events.append(f"restart {arm.label}")
        return ArmStart(
            startup={
                "engine": "vllm",
                "facts": {"kv_tokens": 1000 - 100 * arm.spec_k},
                "lines": ["CPU KV cache size: 1,000 tokens"],
            },
            argv=["python", "-m", "vllm"],
            startup_s=1.0,
        )

    def run_cells(
        self, arm: Arm, cells: list[Cell], plan: SweepPlan, run_id: str
    ) -> list[dict[str, Any]]:
        rows: list[dict[str, Any]] = []
        for cell in cells:
            if self.crash_after_cells is not None and self.cells_run >= self.crash_after_cells:
                raise KeyboardInterrupt
            self.cells_run += 1
            self.events.append(f"cell {cell.cell_id}")
            rows.append(
                request_row(cell=cell.cell_id, arm=arm.label, completion_tokens=8)
            )
            rows.append(
                cell_row(**{
                    "cell": cell.cell_id,
                    "arm": arm.label,
                    "concurrency": cell.concurrency,
                    "rep": cell.rep,
                    "output_tok_s": self.tok_s_by_k[arm.spec_k] * cell.concurrency,
                    "failed": 0,
                })
            )
        return rows

    def gate_reference(self, arm: Arm, plan: SweepPlan) -> dict[str, Any]:
        self.events.append(f"reference {arm.label}")
        return {"token_ids": [[1, 2, 3]]}

    def gate_compare(self, arm: Arm, reference: dict[str, Any], plan: SweepPlan) -> GateResult:
        self.events.append(f"gate {arm.label}")
        if arm.spec_k in self.diverging_k:
            return GateResult("fail", "token_ids", 1, {"prompt": 0, "position": 2})
        return GateResult("pass", "token_ids", 1)

    def bare_decode(self, arm: Arm, plan: SweepPlan) -> dict[str, Any]:
        self.events.append(f"bare {arm.label}")
        return {"status": "not_measured", "reason": "scripted"}

    def close(self) -> None:
        self.events.append("close")


def ctx() -> RunContext:
    return RunContext(run_id="r1", provider="local", model="/m", engine="vllm")


def make_plan(ks: list[int], extend: bool = True) -> SweepPlan:
    return SweepPlan(
        arms=spec_arms(BASE, ks, "ngram", None),
        concurrency=[1, 2],
        reps=1,
        extend_k=extend,
        max_k=5,
    )


def test_gate_before_spec_numbers_and_void_marks_rows(tmp_path: Path) -> None:
    host = ScriptedHost({0: 10, 1: 15, 2: 12}, diverging_k={2})
    run = run_sweep(make_plan([0, 1, 2]), RunDirectory(tmp_path), host, ctx(), log=lambda *_: None)
    first_spec_cell = next(i for i, e in enumerate(host.events) if e.startswith("cell ngram-k1"))
    assert (
        host.events.index("reference plain") < host.events.index("gate ngram-k1") < first_spec_cell
    )
    arms = {a["label"]: a for a in run["arms"]}
    assert arms["ngram-k2"]["void"] and "token 2" in arms["ngram-k2"]["void_reason"]
    assert not arms["ngram-k1"]["void"]
    rows = RunDirectory(tmp_path).read_rows()
    assert all(r.get("void") for r in rows if r["arm"] == "ngram-k2")
    assert not any(r.get("void") for r in rows if r["arm"] != "ngram-k2")
    assert arms["ngram-k1"]["startup"]["lines"]  # raw startup lines kept per arm
    assert run["finished_at"]


def test_best_k_at_the_edge_extends_until_it_stops(tmp_path: Path) -> None:
    host = ScriptedHost({0: 10, 1: 15, 2: 18, 3: 20, 4: 19, 5: 1})
    run = run_sweep(make_plan([0, 1, 2]), RunDirectory(tmp_path), host, ctx(), log=lambda *_: None)
    assert [a["label"] for a in run["arms"]] == [
        "plain",
        "ngram-k1",
        "ngram-k2",
        "ngram-k3",
        "ngram-k4",
    ]
    assert any("K=4" in n for n in run["notes"])


def test_interrupted_sweep_resumes_to_the_same_rows(tmp_path: Path) -> None:
    plan_a = make_plan([0, 1], extend=False)
    with pytest.raises(KeyboardInterrupt):
        run_sweep(
            plan_a,
            RunDirectory(tmp_path / "a"),
            ScriptedHost({0: 10, 1: 15}, crash_after_cells=3),
            ctx(),
            log=lambda *_: None,
        )
    # A torn line from the crash must not break the resume.
    with (tmp_path / "a" / "rows.jsonl").open("a") as fh:
        fh.write('{"kind": "request", "cell": "ngram-k1|c2|r0|prose", "arm": "ngram-k1"')
    resumed_host = ScriptedHost({0: 10, 1: 15})
    run_sweep(
        make_plan([0, 1], extend=False),
        RunDirectory(tmp_path / "a"),
        resumed_host,
        ctx(),
        log=lambda *_: None,
    )
    assert sum(e.startswith("cell") for e in resumed_host.events) == 1  # only the unfinished cell
    run_sweep(
        make_plan([0, 1], extend=False),
        RunDirectory(tmp_path / "b"),
        ScriptedHost({0: 10, 1: 15}),
        ctx(),
        log=lambda *_: None,
    )

    def key(path: Path) -> list[str]:
        return sorted(json.dumps(r, sort_keys=True) for r in RunDirectory(path).read_rows())

    assert key(tmp_path / "a") == key(tmp_path / "b")


class TextGateHost(ScriptedHost):
    """A host whose engine cannot give token ids for the arms in `text_k`: the gate compares
    text there, which passes while proving less."""

    def __init__(self, tok_s_by_k: dict[int, float], text_k: set[int]) -> None:
        super().__init__(tok_s_by_k)
        self.text_k = text_k

    def gate_compare(self, arm: Arm, reference: dict[str, Any], plan: SweepPlan) -> GateResult:
        if arm.spec_k in self.text_k:
            self.events.append(f"gate {arm.label}")
            return GateResult("pass", "text", 1)
        return super().gate_compare(arm, reference, plan)


def test_arms_the_gate_could_not_verify_are_marked_unverified_in_the_run(tmp_path: Path) -> None:
    host = TextGateHost({0: 10, 1: 15, 2: 18}, text_k={2})
    run = run_sweep(make_plan([0, 1, 2], extend=False), RunDirectory(tmp_path), host, ctx(),
                    log=lambda *_: None)
    arms = {a["label"]: a for a in run["arms"]}
    assert arms["ngram-k2"]["unverified"] == "gate compared text only, not token ids"
    assert not arms["ngram-k2"]["void"]  # its numbers stand, marked
    assert arms["ngram-k1"]["unverified"] is None and arms["plain"]["unverified"] is None
    rows = [r for r in RunDirectory(tmp_path).read_rows() if r.get("kind") == "cell"]
    assert all("unverified" in r["flags"] for r in rows if r["arm"] == "ngram-k2")
    assert not any("unverified" in r.get("flags", []) for r in rows if r["arm"] != "ngram-k2")


def test_an_arm_without_a_plain_arm_to_gate_against_is_unverified(tmp_path: Path) -> None:
    host = ScriptedHost({1: 15})
    run = run_sweep(make_plan([1], extend=False), RunDirectory(tmp_path), host, ctx(),
                    log=lambda *_: None)
    (arm,) = run["arms"]
    assert arm["gate"]["status"] == "skipped" and not arm["void"]
    assert arm["unverified"] and "skipped" in arm["unverified"]
