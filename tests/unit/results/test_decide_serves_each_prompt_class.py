"""`decide` takes structured and tool workloads as classes of their own (issue 39 item 6): a
speculative arm that the structure gate voids on `structured` cannot win that class, nor the
pooled view that includes it, but still wins the prose class it is faster on; the deployment
names which arm serves which class (decision.json `by_class`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tailpod.results import decide
from tailpod.results.analysis import analyze
from tailpod.results.deployment import Decision
from tailpod.results.io import Run, load_run, write_run
from tailpod.results.schema import CellRow, RequestRow
from tests.helpers.run_builder import build_run

# the speculative arm is 50 % faster in every cell of both classes: only the gate keeps it out
SWEEP = {"plain": {1: [100.0, 101.0, 99.0]}, "mtp-k2": {1: [150.0, 151.0, 149.0]}}


def _structured_rows(arm: str, json_ok: bool) -> list[RequestRow]:
    head = {"run_id": "run-a", "arm": arm, "concurrency": 1, "rep": 0,
            "prompt_class": "structured", "cell": f"{arm}|c1|r0|structured"}
    return [RequestRow(**head, index=i, ok=True, cache="cold", completion_tokens=40, ttft_s=0.1,
                       e2e_s=0.5, t_start=1000.0 + i, measured_from="pod", finish_reason="stop",
                       json_ok=json_ok, schema_ok=json_ok, chunk_gap_max_s=0.01)
            for i in range(4)]


def _run(tmp_path: Path, spec_json_ok: bool) -> Run:
    run = build_run(SWEEP)
    structured: list[CellRow] = [c.model_copy(update={
        "prompt_class": "structured", "cell": c.cell.replace("|prose", "|structured")})
        for c in run.cells]
    run.cells = [*run.cells, *structured]
    run.meta = run.meta.model_copy(update={"plan": run.meta.plan.model_copy(
        update={"prompt_classes": ["prose", "structured"]})})
    run.requests = [*_structured_rows("plain", True), *_structured_rows("mtp-k2", spec_json_ok)]
    return load_run(write_run(run, tmp_path / "run"))


def _compute(run: Run) -> dict[str, Any]:
    return decide.compute([run], analyses=[analyze(run)])


def _winner(dec: dict[str, Any], pc: str) -> str | None:
    (band,) = [b for b in dec["bands"] if b["prompt_class"] == pc]
    return band["arm"]


def test_an_arm_void_on_structured_serves_prose_and_plain_serves_structured(
    tmp_path: Path,
) -> None:
    run = _run(tmp_path, spec_json_ok=False)
    dec = _compute(run)
    assert _winner(dec, "prose") == "mtp-k2"
    assert _winner(dec, "structured") == "plain"
    assert _winner(dec, decide.POOLED) == "plain"  # the pool holds the class it is void in
    structured = next(b for b in dec["bands"] if b["prompt_class"] == "structured")
    assert structured["compared"] == ["plain"]
    why = structured["void_here"]["mtp-k2"]
    assert why.startswith("structure gate failed on structured: ")
    assert "parse as JSON less often than plain (0/4 vs 4/4)" in why
    serves = dec["by_class"]
    assert serves["prose"]["arm"] == "mtp-k2" and serves["prose"]["kind"] == "static"
    assert serves["structured"]["arm"] == "plain" and serves["structured"]["kind"] == "static"
    assert serves["structured"]["excluded"] == {"mtp-k2": why}
    Decision.model_validate(dec)  # decision.json still reads back
    text = "\n".join(decide.render(dec))
    assert "prose → mtp-k2" in text and "structured → plain" in text


def test_an_arm_void_under_the_token_gate_stays_out_of_every_class(make_run: Any) -> None:
    run = make_run(SWEEP, void={"mtp-k2": "token mismatch at prompt 1"})
    dec = _compute(run)
    assert {b["arm"] for b in dec["bands"]} == {"plain"}
    assert dec["by_class"]["prose"]["arm"] == "plain"


def test_a_well_behaved_arm_wins_both_classes(tmp_path: Path) -> None:
    dec = _compute(_run(tmp_path, spec_json_ok=True))
    assert _winner(dec, "prose") == _winner(dec, "structured") == "mtp-k2"
    assert {pc: s["arm"] for pc, s in dec["by_class"].items()} == {
        "prose": "mtp-k2", "structured": "mtp-k2"}
