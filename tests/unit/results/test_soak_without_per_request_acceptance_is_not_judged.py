"""A soak whose requests carry no acceptance of their own (vLLM's CPU build gives only the cell's
/metrics counters: a one-minute `benchmark --soak` on the sandbox showed `verify steps 0` in every
minute) has not been judged, and the report must not say "no collapse" for it: that is a
reassurance without evidence. Too short a soak for the minute rule (one judged minute) says so
too. docs/results.md, "Soak: acceptance over time"."""

from __future__ import annotations

from pathlib import Path

from tailpod.results.analysis import analyze
from tailpod.results.io import load_run, write_run
from tailpod.results.report import write_report
from tailpod.results.schema import CellRow, RequestRow
from tailpod.results.sections.soak import FLOOR_RUN, MIN_STEPS, WINDOW_S
from tests.helpers.run_builder import build_run

HEAD = {"run_id": "run-a", "arm": "ngram-k2", "concurrency": 1, "rep": 0,
        "prompt_class": "prose", "cell": "ngram-k2|soak|c1|r0|prose"}


def _soak(minutes: int, spec: dict[str, int] | None) -> tuple[CellRow, list[RequestRow]]:
    """A soak of `minutes`, 4 requests a minute, each with `spec` as its own acceptance."""
    reqs = [RequestRow(**HEAD, index=i, ok=True, cache="cold", prompt_tokens=50,
                       completion_tokens=16, t_start=5000.0 + (i // 4) * WINDOW_S + i % 4,
                       measured_from="pod", spec_acceptance=spec)
            for i in range(4 * minutes)]
    cell = CellRow(**HEAD, requests=len(reqs), wall_s=minutes * WINDOW_S, output_tokens=16 * len(reqs),
                   output_tok_s=1.0, soak_s=minutes * WINDOW_S)
    return cell, reqs


def _report(tmp_path: Path, cell: CellRow, reqs: list[RequestRow]) -> tuple[str, list[str]]:
    run = build_run({"plain": {1: [100.0]}, "ngram-k2": {1: [150.0]}})
    run.soak_cells, run.soak_requests = [cell], reqs
    d = write_run(run, tmp_path / "run")
    warnings = analyze(load_run(d))["warnings"]
    write_report([d])
    (line,) = [x for x in (d / "report.md").read_text().splitlines()
               if x.startswith("**ngram-k2**") and "soak of" in x]
    return line, warnings


def test_a_soak_without_any_requests_own_acceptance_says_not_judged(tmp_path: Path) -> None:
    line, warnings = _report(tmp_path, *_soak(3, None))
    assert "no collapse" not in line
    assert "not judged" in line and "own acceptance" in line
    # the spec arm's unjudged soak is a warning, as its collapse would be
    assert any(w.startswith("soak: ngram-k2 not judged") for w in warnings)


def test_a_soak_with_one_judged_minute_says_the_minute_rule_could_not_run(tmp_path: Path) -> None:
    # one minute of 4 requests x 10 steps = 40 >= MIN_STEPS: judged, but alone
    assert MIN_STEPS <= 4 * 10
    line, _ = _report(tmp_path, *_soak(1, {"steps": 10, "accepted": 8}))
    assert "no collapse" not in line
    assert f"no {FLOOR_RUN} requests in a row" in line and "1 judged minute" in line


def test_a_soak_with_judged_minutes_and_no_fall_says_no_collapse(tmp_path: Path) -> None:
    line, warnings = _report(tmp_path, *_soak(3, {"steps": 10, "accepted": 8}))
    assert line.endswith("no collapse.")
    assert not any(w.startswith("soak:") for w in warnings)
