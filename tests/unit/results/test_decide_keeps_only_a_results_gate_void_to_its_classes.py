"""Which void arms `decide` lets compete outside the classes they failed (results/decide.py
`_results_gate_voids`): only an arm void because a results-side gate (structure, session) failed
it. An arm void for any other cause (thin evidence, a failed token-identity gate) stays out of
every class, even when it failed the structure gate too and whatever its recorded reason says;
and an arm whose run was not gated on read is decided as recorded."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tailpod.results import decide
from tailpod.results.analysis import analyze
from tailpod.results.io import Run, load_run, write_run
from tailpod.results.schema import Gate, RequestRow
from tests.helpers.run_builder import build_run

WHY = ("structure gate failed on structured: outputs parse as JSON less often than plain "
       "(0/2 vs 2/2)")


def _run() -> Run:
    """Prose and structured cells (the same figures: mtp-k2 150, ngram-k3 140, plain 100 tok/s);
    in the structured class both speculative arms' JSON never parses where plain's always does."""
    run = build_run({"plain": {1: [100.0, 101.0, 99.0]}, "mtp-k2": {1: [150.0, 151.0, 149.0]},
                     "ngram-k3": {1: [140.0, 141.0, 139.0]}})
    run.cells += [c.model_copy(update={"prompt_class": "structured",
                                       "cell": c.cell.replace("|prose", "|structured")})
                  for c in run.cells]
    run.requests = [
        RequestRow(run_id="run-a", arm=arm, concurrency=1, rep=0, prompt_class="structured",
                   cell=f"{arm}|c1|r0|structured", index=i, ok=True, t_start=float(i),
                   finish_reason="stop", json_ok=arm == "plain")
        for arm in ("plain", "mtp-k2", "ngram-k3") for i in range(2)]
    return run


def _decide(run: Run) -> dict[str, Any]:
    return decide.compute([run], analyses=[analyze(run)])


def _serves(dec: dict[str, Any]) -> dict[str, tuple[str | None, dict[str, str]]]:
    return {pc: (sv["arm"], sv.get("excluded", {})) for pc, sv in dec["by_class"].items()}


def test_arms_the_structure_gate_voided_compete_where_they_behaved(tmp_path: Path) -> None:
    run = load_run(write_run(_run(), tmp_path / "run"))
    assert _serves(_decide(run)) == {
        "prose": ("mtp-k2", {}),
        "structured": ("plain", {"mtp-k2": WHY, "ngram-k3": WHY})}


def test_an_arm_void_for_thin_evidence_stays_out_of_every_class(tmp_path: Path) -> None:
    run = _run()
    arm = run.meta.arm("mtp-k2")
    assert arm is not None
    arm.void, arm.void_reason = True, "thin evidence: 2 requests a cell"
    loaded = load_run(write_run(run, tmp_path / "run"))
    # ngram-k3, after mtp-k2 in label order, still competes where it behaved
    assert _serves(_decide(loaded)) == {
        "prose": ("ngram-k3", {}),
        "structured": ("plain", {"ngram-k3": WHY})}


def test_an_arm_whose_token_gate_failed_stays_out_whatever_its_reason_says(
    tmp_path: Path
) -> None:
    run = _run()
    arm = run.meta.arm("mtp-k2")
    assert arm is not None
    # a run.json written back after a read, say: the recorded reason is the structure gate's
    arm.gate = Gate(status="fail", method="token_ids", prompts=6)
    arm.void, arm.void_reason = True, WHY
    loaded = load_run(write_run(run, tmp_path / "run"))
    assert _serves(_decide(loaded)) == {
        "prose": ("ngram-k3", {}),
        "structured": ("plain", {"ngram-k3": WHY})}


def test_a_run_not_gated_on_read_is_decided_as_recorded() -> None:
    # a Run built in memory (not through load_run): its arms are not void, whatever the rows say
    assert _serves(_decide(_run())) == {"prose": ("mtp-k2", {}), "structured": ("mtp-k2", {})}


def test_a_session_replay_built_from_a_failed_class_is_out_of_the_session_class(
    tmp_path: Path
) -> None:
    run = _run()
    arrival = {"process": "trace", "rate": None,
               "trace": {"path": "/p/s.jsonl", "format": "session", "speed": 1.0}}
    # each arm replayed the sessions from structured turns, the speculative arms faster
    run.cells += [c.model_copy(update={"arrival": arrival, "prompt_class": "structured",
                                       "cell": c.cell.replace("|c1|", "|trace|")
                                       .replace("|prose", "|structured")})
                  for c in run.cells if c.prompt_class == "prose"]
    loaded = load_run(write_run(run, tmp_path / "run"))
    assert _serves(_decide(loaded)) == {
        "prose": ("mtp-k2", {}),
        "session": ("plain", {"mtp-k2": WHY, "ngram-k3": WHY}),
        "structured": ("plain", {"mtp-k2": WHY, "ngram-k3": WHY})}
