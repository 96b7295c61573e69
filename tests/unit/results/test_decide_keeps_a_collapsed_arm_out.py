"""An arm whose acceptance collapsed in its soak (`benchmark --soak`, the soak section's rule)
wins nothing in `decide` (issue 39 item 7: the drift flag fails the arm): its short cells
overstate what it serves for long. The warning names the minute and the context position."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tailpod.agent.probes.load import RunOptions, run_cells
from tailpod.agent.probes.rows import CellPlan
from tailpod.results import decide
from tailpod.results.analysis import analyze
from tailpod.results.io import Run, load_run, write_run
from tailpod.results.schema import ROW_ADAPTER, CellRow, RequestRow
from tailpod.results.sections.soak import WINDOW_S
from tailpod.sandbox.synthetic_server import SyntheticConfig, SyntheticServer
from tests.helpers.run_builder import build_run

SWEEP = {"plain": {1: [100.0, 101.0, 99.0]}, "mtp-k2": {1: [150.0, 151.0, 149.0]}}


def _soak(arm: str, accepted_per_minute: list[int]) -> tuple[CellRow, list[RequestRow]]:
    """A soak cell of `arm`: four requests a minute, 40 verify steps a minute between them."""
    head = {"run_id": "run-a", "arm": arm, "concurrency": 1, "rep": 0,
            "prompt_class": "prose", "cell": f"{arm}|soak|c1|r0|prose"}
    reqs = [RequestRow(**head, index=4 * m + i, ok=True, cache="cold", prompt_tokens=1000 * (m + 1),
                       completion_tokens=10, t_start=100.0 + m * WINDOW_S + i,
                       measured_from="pod", spec_acceptance={"steps": 10, "accepted": acc // 4})
            for m, acc in enumerate(accepted_per_minute) for i in range(4)]
    cell = CellRow(**head, requests=len(reqs), wall_s=len(accepted_per_minute) * WINDOW_S,
                   output_tokens=40 * len(accepted_per_minute), output_tok_s=1.0,
                   soak_s=len(accepted_per_minute) * WINDOW_S)
    return cell, reqs


def _decide(run: Run) -> dict[str, Any]:
    return decide.compute([run], analyses=[analyze(run)])


def test_an_arm_whose_soak_collapsed_wins_no_band() -> None:
    run = build_run(SWEEP)
    cell, reqs = _soak("mtp-k2", [40, 40, 40, 8])  # 1.0 accepted/step, then 0.2 in minute 4
    run.soak_cells, run.soak_requests = [cell], reqs
    dec = _decide(run)
    assert {b["arm"] for b in dec["bands"]} == {"plain"}
    assert dec["arms"]["mtp-k2"]["void"] is True
    assert any(w.startswith("mtp-k2 takes no part: its acceptance collapsed in its soak "
                            "(minute 4, context position 4010: ") for w in dec["warnings"])


def test_a_soak_that_held_leaves_the_arm_in() -> None:
    run = build_run(SWEEP)
    cell, reqs = _soak("mtp-k2", [40, 40, 40, 36])
    run.soak_cells, run.soak_requests = [cell], reqs
    dec = _decide(run)
    assert {b["arm"] for b in dec["bands"]} == {"mtp-k2"}
    assert "soak_collapse" not in dec["arms"]["mtp-k2"]


def test_the_stand_ins_planted_drift_keeps_the_arm_out_of_every_class(tmp_path: Path) -> None:
    """The misbehaviour as the stand-in server plants it (acceptance lost, engine-wide, from a
    context position on: vllm-project/vllm#52873), measured by the pod's probe as a soak cell,
    written and read back as `report` and `decide` read it."""
    server = SyntheticServer(SyntheticConfig(rate=4000.0, ttft_s=0.002, tokens_per_chunk=(3,),
                                             spec_k=2, per_request_spec="vllm",
                                             drift_position=40)).start()
    try:
        opts = RunOptions(base_url=server.base_url, warmup=0, max_tokens=32)
        _, raw = run_cells(opts, [CellPlan("mtp-k2", 1, 0, "prose", "cold", soak_s=1.0)])
    finally:
        server.stop()
    rows = [ROW_ADAPTER.validate_python(r) for r in raw]
    run = build_run(SWEEP)
    run.soak_cells = [r for r in rows if isinstance(r, CellRow)]
    run.soak_requests = [r for r in rows if isinstance(r, RequestRow)]
    dec = _decide(load_run(write_run(run, tmp_path / "run")))
    assert {b["arm"] for b in dec["bands"]} == {"plain"}  # prose and the pooled view alike
    assert dec["by_class"]["prose"]["arm"] == "plain"
    assert dec["arms"]["mtp-k2"]["void"] is True
    assert any(w.startswith("mtp-k2 takes no part: its acceptance collapsed in its soak "
                            "(minute 1, context position ") for w in dec["warnings"])
