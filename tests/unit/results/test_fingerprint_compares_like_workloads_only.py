"""`compare` of a closed-loop run with a session-trace run of the same pair on the same pod flagged
"acceptance of ngram-k2 (prose) differs … likely: no startup fact explains it" (sandbox, CPU vLLM:
2.750 vs 2.824). A trace replays other prompts (built to the logged lengths, or multi-turn with
the arm's own answers in the history), so its acceptance is another workload's, not a changed
pair: the fingerprint keys trace cells by their trace and compares them only with runs of the
same trace. docs/results.md, "Acceptance fingerprint"."""

from __future__ import annotations

from typing import Any

from tailpod.results.fingerprint import (
    FINGERPRINT_VERSION,
    check_fingerprints,
    recorded_fingerprint,
    run_fingerprint,
)
from tailpod.results.io import Run
from tests.unit.results.test_fingerprint import pair_run

TRACE = "/pod/.tailpod/trace-d7985871fae354d5.jsonl"  # content-addressed, as the sweep names it


def as_trace(run: Run, path: str = TRACE) -> Run:
    """The same run's cells as one session-trace replay each (what `--trace F` records)."""
    arrival: dict[str, Any] = {"process": "trace", "rate": None,
                               "trace": {"path": path, "format": "session", "speed": 1.0}}
    run.cells = [c.model_copy(update={"arrival": arrival}) for c in run.cells]
    return run


def checked(*runs: Run) -> dict[str, Any]:
    return check_fingerprints([run_fingerprint(r) for r in runs])


def test_a_closed_loop_run_is_not_flagged_against_a_trace_run() -> None:
    result = checked(pair_run("a", [120, 130]), as_trace(pair_run("b", [60, 62])))
    assert result == {"checks": [], "flags": []}


def test_two_runs_of_the_same_trace_are_compared() -> None:
    result = checked(as_trace(pair_run("a", [120, 130])), as_trace(pair_run("b", [60, 62])))
    (check,) = result["checks"]
    assert check["status"] == "differs" and len(result["flags"]) == 1
    assert "trace-d7985871fae354d5" in check["prompt_class"]


def test_runs_of_different_traces_are_not_compared() -> None:
    other = "/pod/.tailpod/trace-0123456789abcdef.jsonl"
    result = checked(as_trace(pair_run("a", [120, 130])), as_trace(pair_run("b", [60, 62]), other))
    assert result == {"checks": [], "flags": []}


def test_a_fingerprint_recorded_before_the_workload_key_reads_its_ladder_again() -> None:
    run = as_trace(pair_run("b", [60, 62]))
    old = run_fingerprint(run)
    assert old["version"] == FINGERPRINT_VERSION
    for arm in old["arms"]:  # what the earlier version recorded: the trace under its class alone
        arm["ladder"] = {"prose": next(iter(arm["ladder"].values()))}
    run.meta.fingerprint = old  # type: ignore[attr-defined]  # what the sweep wrote
    (arm,) = recorded_fingerprint(run)["arms"]
    assert list(arm["ladder"]) == ["prose, session trace-d7985871fae354d5"]
    # the rest is the record's: its revisions are kept
    assert arm["checkpoints"]["draft_model"]["revision"] == "sha256:aaaa"


def test_a_workload_run_with_no_draft_counted_still_differs() -> None:
    b = pair_run("b", [60, 62])
    b.cells = [c.model_copy(update={"acceptance": None}) if c.arm != "plain" else c
               for c in b.cells]
    result = checked(pair_run("a", [120, 130]), b)
    (check,) = result["checks"]
    assert check["status"] == "differs" and check["acceptance_length"] == [2.25, None]
