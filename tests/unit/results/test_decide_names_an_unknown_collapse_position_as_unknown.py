"""A soak collapse whose context position is not known (the soak's requests carry no token
counts) is named "context position unknown" in decide's warning, never "None"
(results/decide.py `_soak_collapses`)."""

from __future__ import annotations

from tailpod.results import decide
from tailpod.results.analysis import analyze
from tailpod.results.schema import CellRow, RequestRow
from tailpod.results.sections.soak import WINDOW_S
from tests.helpers.run_builder import build_run


def test_a_collapse_without_token_counts_names_its_position_unknown() -> None:
    run = build_run({"plain": {1: [100.0, 101.0, 99.0]}, "mtp-k2": {1: [150.0, 151.0, 149.0]}})
    head = {"run_id": "run-a", "arm": "mtp-k2", "concurrency": 1, "rep": 0,
            "prompt_class": "prose", "cell": "mtp-k2|soak|c1|r0|prose"}
    accepted = [40, 40, 40, 8]  # 1.0 accepted a step, then 0.2 in minute 4
    run.soak_requests = [
        RequestRow(**head, index=4 * m + i, ok=True, t_start=100.0 + m * WINDOW_S + i,
                   spec_acceptance={"steps": 10, "accepted": acc // 4})
        for m, acc in enumerate(accepted) for i in range(4)]
    run.soak_cells = [CellRow(**head, requests=16, wall_s=4 * WINDOW_S, output_tokens=160,
                              output_tok_s=1.0, soak_s=4 * WINDOW_S)]
    dec = decide.compute([run], analyses=[analyze(run)])
    (warning,) = [w for w in dec["warnings"] if w.startswith("mtp-k2 takes no part")]
    assert warning.startswith("mtp-k2 takes no part: its acceptance collapsed in its soak "
                              "(minute 4, context position unknown: ")
    # decision.json's arm entry records the same words
    where = dec["arms"]["mtp-k2"]["soak_collapse"]
    assert where.startswith("minute 4, context position unknown: ")
    assert warning == f"mtp-k2 takes no part: its acceptance collapsed in its soak ({where})"
