"""An open-loop-only run's acceptance: pooled from its open-loop cells' draft counters (the H200
run benchmarks/runs/h200_vllm_0.26.0_openloop_2026-12-02, whose report once showed none)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tailpod.results.analysis import analyze
from tailpod.results.io import load_run
from tests import paths

RUN = paths.REPO / "benchmarks/runs/h200_vllm_0.26.0_openloop_2026-12-02"


def test_open_loop_cells_give_the_arms_acceptance() -> None:
    # Expected: the cells' own counters, summed straight from rows.jsonl.
    cells = [json.loads(line) for line in (RUN / "rows.jsonl").read_text().splitlines()]
    spec = [c["acceptance"] for c in cells
            if c.get("kind") == "cell" and c["arm"] == "draft_model-k2" and c.get("acceptance")]
    assert len(spec) == 6  # 3 rates x 2 reps
    drafts = sum(a["drafts"] for a in spec)
    accepted = sum(a["accepted"] for a in spec)
    first = sum(a["native"]["num_accepted_tokens_per_pos"][0] for a in spec)
    (row,) = analyze(load_run(RUN))["acceptance"]
    assert row["arm"] == "draft_model-k2" and row["drafts"] == drafts
    assert row["accepted"] == accepted
    assert row["acceptance_length"] == pytest.approx(1 + accepted / drafts)
    assert row["per_position"][0] == pytest.approx(first / drafts)


def test_an_open_loop_run_draws_no_closed_loop_ttft_rows_and_warns_of_no_log_axis(
        tmp_path: Path) -> None:
    # Its requests carry a schedule and no concurrency: the TTFT cold/warm section (keyed by
    # concurrency) has nothing of its own, and no plot puts zeros on a log axis.
    import shutil
    import warnings

    from tailpod.results.report import write_report

    run = tmp_path / "run"
    shutil.copytree(RUN, run)
    assert analyze(load_run(run))["ttft_cache"] == []
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # matplotlib's "no positive values … log-scaled"
        report = write_report([run]).read_text()
    ttft = report.split("## TTFT, cold vs warm prefix cache", 1)[1].split("\n## ", 1)[0]
    assert "| plain |" not in ttft and "No closed-loop request rows with TTFT" in ttft
