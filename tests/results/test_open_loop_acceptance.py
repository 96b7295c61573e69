"""An open-loop-only run's acceptance: pooled from its open-loop cells' draft counters (the H200
run benchmarks/runs/h200_vllm_0.26.0_openloop_2026-12-02, whose report once showed none)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tailpod.results.analysis import analyze
from tailpod.results.io import load_run

RUN = Path(__file__).resolve().parents[2] / "benchmarks/runs/h200_vllm_0.26.0_openloop_2026-12-02"


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
