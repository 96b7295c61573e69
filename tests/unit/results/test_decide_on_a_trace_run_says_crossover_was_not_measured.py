"""`decide` on a session-trace run (sandbox, CPU vLLM: ngram-k2 75.9 vs plain 49.3 tok/s) printed
"Crossover ngram-k2 vs plain: no measured speedup" right above "Deployment: static ngram-k2 (wins
every band)": read as "speculation did not pay", which the same page contradicts. A run that
varied no concurrency (a trace replay or an open-loop ladder) has no crossover or knee to find;
`decide` says so, as the report's "Crossover and knee" section does."""

from __future__ import annotations

from typing import Any

from tailpod.results import decide
from tailpod.results.analysis import analyze
from tailpod.results.io import Run
from tests.helpers.run_builder import build_run

SWEEP = {"plain": {1: [50.0]}, "ngram-k2": {1: [75.0]}}


def _as(run: Run, arrival: dict[str, Any]) -> Run:
    run.cells = [c.model_copy(update={"arrival": arrival}) for c in run.cells]
    return run


def _text(run: Run) -> str:
    return "\n".join(decide.render(decide.compute([run], analyses=[analyze(run)])))


def test_a_trace_run_says_crossover_and_knee_were_not_measured() -> None:
    run = _as(build_run(SWEEP), {"process": "trace", "rate": None,
                                 "trace": {"path": "/p/trace-0123456789abcdef.jsonl",
                                           "format": "tailpod", "speed": 1.0}})
    text = _text(run)
    assert "**Deployment: static ngram-k2**" in text
    assert "no measured speedup" not in text and "- Knee" not in text
    assert "- Crossover and knee: not measured" in text


def test_a_closed_loop_run_still_lists_crossover_and_knee() -> None:
    text = _text(build_run(SWEEP))
    assert "- Crossover ngram-k2 vs plain: spec ahead at every measured concurrency" in text
    assert "- Knee plain:" in text
    assert "not measured" not in text.split("- Crossover")[1].split("\n")[0]


def test_beside_a_closed_loop_run_only_the_trace_runs_arms_are_not_measured() -> None:
    closed = build_run(SWEEP, run_id="closed")
    traced = _as(build_run(SWEEP, run_id="traced"),
                 {"process": "trace", "rate": None,
                  "trace": {"path": "/p/trace-0123456789abcdef.jsonl", "format": "tailpod"}})
    text = "\n".join(decide.render(decide.compute(
        [closed, traced], analyses=[analyze(closed), analyze(traced)])))
    assert "- Crossover closed/ngram-k2 vs plain: spec ahead" in text
    assert "traced/ngram-k2 vs plain" not in text and "no measured speedup" not in text
    assert "- Crossover and knee of traced/ngram-k2, traced/plain: not measured" in text
