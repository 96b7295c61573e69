"""What `decide` counts as one deployment across runs (results/decide.py `_deploys`): the same arm
label, K, method, checkpoint, engine and card. Two runs' winners that differ in any one of them
are two deployments (a mixed verdict), never "wins every band (in run-a, run-b)". And a class
where no arm met the SLO is served by no arm, in `by_class` as in the pooled verdict."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from tailpod.results import decide
from tailpod.results.analysis import analyze
from tailpod.results.io import Run
from tailpod.results.schema import CellRow
from tests.helpers.run_builder import build_run

# ngram-k2's every rep beats all of plain's at every load of both runs
LOW = {"plain": {1: [100.0, 101.0], 2: [180.0, 181.0]},
       "ngram-k2": {1: [150.0, 151.0], 2: [250.0, 251.0]}}
HIGH = {"plain": {4: [300.0, 301.0], 8: [380.0, 381.0]},
        "ngram-k2": {4: [400.0, 401.0], 8: [450.0, 451.0]}}


def _decide(*runs: Run, **kw: Any) -> dict[str, Any]:
    return decide.compute(list(runs), analyses=[analyze(r) for r in runs], **kw)


def _spec(run: Run, key: str, value: object) -> None:
    arm = run.meta.arm("ngram-k2")
    assert arm is not None
    arm.engine_config["spec"][key] = value


def _engine(run: Run) -> None:
    run.meta.engine.name = "sglang"


VARIANTS: dict[str, Callable[[], Run]] = {
    "label": lambda: build_run({"plain": HIGH["plain"], "draft-k2": HIGH["ngram-k2"]},
                               run_id="run-b"),
    "k": lambda: _with(lambda r: _spec(r, "k", 3)),
    "method": lambda: _with(lambda r: _spec(r, "method", "ngram")),
    "checkpoint": lambda: build_run(HIGH, run_id="run-b", checkpoints={"ngram-k2": "other/m"}),
    "engine": lambda: _with(_engine),
}


def _with(change: Callable[[Run], None]) -> Run:
    run = build_run(HIGH, run_id="run-b")
    change(run)
    return run


def test_the_same_arm_in_both_runs_is_one_deployment() -> None:
    d = _decide(build_run(LOW, run_id="run-a"), build_run(HIGH, run_id="run-b"))["deployment"]
    assert (d["kind"], d["reason"]) == ("static", "wins every band (in run-a, run-b)")


@pytest.mark.parametrize("differs", sorted(VARIANTS))
def test_winners_that_differ_in_one_fact_are_two_deployments(differs: str) -> None:
    dec = _decide(build_run(LOW, run_id="run-a"), VARIANTS[differs]())
    winners = {b["arm"] for b in dec["bands"] if b["prompt_class"] == decide.POOLED}
    assert len(winners) == 2 and None not in winners
    assert dec["deployment"]["kind"] == "mixed"
    assert dec["by_class"]["prose"]["kind"] == "mixed"


def _open(arm: str, rep: int, attainment: float) -> CellRow:
    return CellRow(
        run_id="run-a", arm=arm, concurrency=0, rep=rep, prompt_class="prose",
        cell=f"{arm}|rate8|r{rep}|prose", requests=50, wall_s=10.0, output_tokens=3000,
        output_tok_s=300.0, arrival={"process": "poisson", "rate": 8.0, "burstiness": 1.0,
                                     "seed": rep, "requests": 50},
        slo={"ttft_ms": 500.0}, slo_percentile=90.0, slo_attainment=attainment,
        goodput_tok_s=30.0)


def test_a_class_where_no_arm_met_the_slo_is_served_by_none() -> None:
    run = build_run({"plain": {1: [100.0]}, "ngram-k2": {1: [100.0]}})
    run.cells = [_open(arm, rep, 0.10) for arm in ("plain", "ngram-k2") for rep in (0, 1)]
    dec = _decide(run, objective="goodput")
    assert [b["arm"] for b in dec["bands"]] == [None, None]
    assert dec["by_class"] == {"prose": {"kind": "none", "arm": None,
                                         "reason": "no arm meets the SLO"}}


# plain and mtp-k2 cross between c=4 (speedup 450/360 = 1.25) and c=8 (560/640 = 0.875):
# c = 2 ** (2 + 0.25 / 0.375) = 6.35, so two lanes admitting 6 (tests/unit/results/test_decide.py)
CROSSING = {"plain": {1: [100.0, 102.0, 98.0], 4: [360.0, 370.0, 350.0],
                      8: [640.0, 650.0, 630.0]},
            "mtp-k2": {1: [180.0, 182.0, 178.0], 4: [450.0, 460.0, 440.0],
                       8: [560.0, 570.0, 550.0]}}


def test_a_class_served_by_two_lanes_names_them_and_the_admission_limit() -> None:
    dec = _decide(build_run(CROSSING))
    assert dec["deployment"]["kind"] == "lanes"
    assert dec["by_class"] == {"prose": {
        "kind": "lanes", "arm": None, "reason": "mtp-k2 wins c ≤ 4, plain wins from c = 8",
        "lanes": ["mtp-k2", "plain"], "admission_limit": 6}}


def test_a_class_one_arm_wins_names_it_with_the_reason() -> None:
    dec = _decide(build_run(LOW))
    assert dec["by_class"] == {"prose": {"kind": "static", "arm": "ngram-k2",
                                         "reason": "wins every band"}}


def test_a_session_trace_cell_is_the_session_class_by_its_format_alone() -> None:
    # a replay written without the `sessions` summary is still known by its trace format
    run = build_run({"plain": {1: [50.0]}, "ngram-k2": {1: [75.0]}})
    arrival = {"process": "trace", "rate": None,
               "trace": {"path": "/p/s.jsonl", "format": "aiperf-multi-turn", "speed": 1.0}}
    run.cells = [c.model_copy(update={"arrival": arrival}) for c in run.cells]
    assert all(c.sessions is None for c in run.cells)
    dec = _decide(run)
    assert {b["prompt_class"] for b in dec["bands"]} == {decide.POOLED, decide.SESSION_CLASS}
    assert dec["by_class"][decide.SESSION_CLASS]["arm"] == "ngram-k2"
