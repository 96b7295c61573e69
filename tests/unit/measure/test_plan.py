from __future__ import annotations

import json
from pathlib import Path

from tailpod.engines.base import EngineConfig
from tailpod.measure.plan import (
    Cell,
    Restart,
    SweepPlan,
    best_k_needs_extension,
    finished_cells,
    pending,
    schedule,
    spec_arms,
)

BASE = EngineConfig(engine="vllm", model="/m")


def plan(interleave: bool = False, reps: int = 2) -> SweepPlan:
    return SweepPlan(
        arms=spec_arms(BASE, [0, 1, 2], "ngram", None),
        concurrency=[1, 4],
        reps=reps,
        interleave_arms=interleave,
    )


def test_arms_are_labelled_and_plain_first() -> None:
    arms = spec_arms(BASE, [3, 0, 1, 3], "mtp", None)
    assert [a.label for a in arms] == ["plain", "mtp-k1", "mtp-k3"]
    assert arms[0].config.spec.method is None and arms[2].config.spec.k == 3


def test_default_order_restarts_once_per_arm_and_alternates_levels() -> None:
    steps = schedule(plan())
    assert [s.arm for s in steps if isinstance(s, Restart)] == ["plain", "ngram-k1", "ngram-k2"]
    first_arm = [s for s in steps[1:5] if isinstance(s, Cell)]
    assert [(c.rep, c.concurrency) for c in first_arm] == [(0, 1), (0, 4), (1, 4), (1, 1)]


def test_interleaved_order_rotates_arms_between_reps() -> None:
    restarts = [s.arm for s in schedule(plan(interleave=True, reps=3)) if isinstance(s, Restart)]
    assert restarts == [
        "plain",
        "ngram-k1",
        "ngram-k2",
        "ngram-k1",
        "ngram-k2",
        "plain",
        "ngram-k2",
        "plain",
        "ngram-k1",
    ]


def test_resume_skips_finished_cells_and_their_needless_restarts(tmp_path: Path) -> None:
    p = plan()
    rows = tmp_path / "rows.jsonl"
    done = [s for s in schedule(p) if isinstance(s, Cell) and s.arm == "plain"]
    with rows.open("w") as fh:
        for cell in done:
            fh.write(json.dumps({"kind": "request", "cell": cell.cell_id}) + "\n")
            fh.write(json.dumps({"kind": "cell", "cell": cell.cell_id}) + "\n")
        fh.write('{"kind": "cell", "cell": "ngram-k1|c1|r0|pro')  # torn last line from a crash
    finished = finished_cells(rows)
    assert finished == {c.cell_id for c in done}
    remaining = pending(p, finished)
    assert Restart("plain") not in remaining
    assert remaining[0] == Restart("ngram-k1")
    assert len([s for s in remaining if isinstance(s, Cell)]) == 8


def test_best_k_extension() -> None:
    assert best_k_needs_extension({0: 100, 1: 150, 2: 170}, max_k=8) == 3  # peak at the edge
    assert (
        best_k_needs_extension({0: 100, 1: 150, 2: 170, 3: 160}, max_k=8) is None
    )  # shown to stop
    assert best_k_needs_extension({0: 100, 1: 150, 2: 170}, max_k=2) is None  # bounded
    assert best_k_needs_extension({0: 100}, max_k=8) is None
    assert best_k_needs_extension({0: 100, 1: 90, 2: 90}, max_k=8) is None  # tie → smaller K wins


def test_void_largest_k_stops_the_extension() -> None:
    # K=2 ran but was void (absent from the throughput figures): K=1 is not "the largest measured".
    assert best_k_needs_extension({0: 100, 1: 150}, max_k=8, measured_ks={0, 1, 2}) is None
