"""`export --format llmd-report` of a session-trace run describes the session replay (its format,
the prompt classes its turns were built from) and records the concurrency the replay ran (the
most requests it had in flight), not the sweep's concurrency list the replay never used
(newcomer pass: "tailpod trace load … prompt classes prose" and plan.concurrency [1..64])."""

from __future__ import annotations

from typing import Any

from tailpod.results.llmd_report import llmd_reports
from tailpod.results.schema import RequestRow
from tests.helpers.run_builder import build_run
from tests.unit.results.test_llmd_report import _valid

SWEEP = [1, 2, 4, 8, 16, 32, 64]
# (t_start, e2e_s): [0,2] [1,3] [1.5,2.5] overlap at t=1.5..2 (3 in flight), [5,6] alone
TIMES = [(0.0, 2.0), (1.0, 2.0), (1.5, 1.0), (5.0, 1.0)]


def _session_run() -> Any:
    run = build_run({"plain": {1: [100.0]}})
    run.meta.plan.concurrency = list(SWEEP)
    run.meta.plan.trace = {"name": "trace-abc.jsonl", "format": "session", "speed": 1.0}
    (cell,) = run.cells
    cell = cell.model_copy(update={
        "concurrency": 0, "cell": "plain|trace|r0|prose",
        "arrival": {"process": "trace", "trace": {"path": "s.jsonl", "format": "session"}},
        "sessions": {"sessions": 2, "max_turns": 2, "format": "session"}})
    run.cells[:] = [cell]
    run.requests[:] = [RequestRow(
        run_id=cell.run_id, arm="plain", concurrency=0, rep=0, prompt_class="prose",
        cell=cell.cell, index=i, ok=True, cache="cold", prompt_tokens=50, completion_tokens=20,
        ttft_s=0.1, e2e_s=dur, t_start=1000.0 + start, measured_from="pod")
        for i, (start, dur) in enumerate(TIMES)]
    return run


def test_a_session_replay_is_described_as_one_with_the_concurrency_it_ran() -> None:
    (report,) = llmd_reports(_session_run()).values()
    _valid(report)
    load = report["scenario"]["load"]
    description = load["metadata"]["description"]
    assert description.startswith("tailpod session trace replay (format session)")
    assert "turns built from prompt classes prose" in description
    plan = load["native"]["config"]["plan"]
    assert plan["concurrency"] == [3]  # the most in flight, never the sweep's [1..64]
    assert plan["concurrency_source"] == "most requests in flight during the replay"
