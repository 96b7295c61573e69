"""`benchmark --soak` (issue 39 item 4): each arm's soak cell is one closed loop run for a time;
the soak section buckets its requests' own acceptance per minute and flags a collapse with the
minute and the context position. The stand-in server's drift mode (acceptance lost from a
context position on, engine-wide: vllm-project/vllm#52873) must fire the flag, and the same
server without it must not."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tailpod.agent.probes.load import RunOptions, run_cells
from tailpod.agent.probes.prompt_classes import load_prompt_classes, prompt_text
from tailpod.agent.probes.rows import CellPlan
from tailpod.results.analysis import analyze
from tailpod.results.io import load_run, write_run
from tailpod.results.report import write_report
from tailpod.results.schema import ROW_ADAPTER, CellRow, RequestRow
from tailpod.results.sections.soak import FLOOR_RUN, MIN_STEPS, WINDOW_S, soak_row
from tailpod.sandbox.synthetic_server import SyntheticConfig, SyntheticServer
from tests.helpers.run_builder import build_run

MAX_TOKENS = 32
SOAK_S = 1.0


def _soak(**config: Any) -> tuple[CellRow, list[RequestRow]]:
    """One soak cell of `mtp-k2` at c=1 over prose, measured by the probe against the stand-in."""
    base: dict[str, Any] = {"rate": 4000.0, "ttft_s": 0.002, "tokens_per_chunk": (3,),
                            "spec_k": 2, "per_request_spec": "vllm"}
    server = SyntheticServer(SyntheticConfig(**{**base, **config})).start()
    try:
        opts = RunOptions(base_url=server.base_url, warmup=0, max_tokens=MAX_TOKENS)
        plan = CellPlan("mtp-k2", 1, 0, "prose", "cold", soak_s=SOAK_S)
        _, raw = run_cells(opts, [plan])
    finally:
        server.stop()
    rows = [ROW_ADAPTER.validate_python(r) for r in raw]
    (cell,) = [r for r in rows if isinstance(r, CellRow)]
    return cell, [r for r in rows if isinstance(r, RequestRow)]


def _prompt_words() -> list[int]:
    """The stand-in's prompt_tokens of each prose prompt: its words, as the server counts them."""
    prompts = load_prompt_classes(None, ["prose"])["prose"]["prompts"]
    return [len(prompt_text(p["messages"]).split()) for p in prompts]


def test_the_soak_cell_runs_for_its_time_not_a_count() -> None:
    cell, reqs = _soak()
    assert cell.soak_s == SOAK_S and cell.cell == "mtp-k2|soak|c1|r0|prose"
    sent = sorted(r.t_start for r in reqs)
    # every request went out inside the soak's time, and the loop kept sending through it
    assert sent[-1] - sent[0] < SOAK_S and len(reqs) > 2 * FLOOR_RUN
    # the wall runs from the first request sent (just after the soak's clock starts) to the last
    # stream's end (just after it ran out)
    assert cell.wall_s >= SOAK_S - 0.05 and cell.requests == len(reqs)


def test_drift_fires_the_flag_with_its_minute_and_position() -> None:
    words = _prompt_words()
    # prompt 1 is the first whose context reaches this position (prompt + the last chunk's
    # start, 31); from it on, engine-wide, no draft is accepted
    drift = words[1] + MAX_TOKENS - 1
    assert words[0] + MAX_TOKENS - 1 < drift
    cell, reqs = _soak(drift_position=drift)
    row = soak_row(cell, reqs)
    c = row["collapse"]
    assert c is not None and c["rule"] == "floor_run"
    assert c["minute"] == 1 and 0 < c["at_s"] < SOAK_S
    # the run at the floor starts with the third request (the second crossed the position
    # part-way and still accepted drafts before it); by then requests 0-2 had been sent
    assert c["position"] == max(w + MAX_TOKENS for w in words[:3])
    assert c["position"] >= drift
    assert row["minutes"][0]["position_max"] == max(words) + MAX_TOKENS


def test_no_drift_no_flag() -> None:
    cell, reqs = _soak()
    row = soak_row(cell, reqs)
    assert row["collapse"] is None
    # 32 tokens: the prefill token, then ten steps of 3 (two drafts accepted) and one of 1
    assert row["minutes"][0]["accepted_per_step"] == pytest.approx(20 / 11)


def _constructed(per_minute: list[tuple[int, int]], requests_per_minute: int = 4
                 ) -> tuple[CellRow, list[RequestRow]]:
    """A soak cell whose minute m has requests splitting (steps, accepted) of per_minute[m]."""
    head = {"run_id": "run-a", "arm": "mtp-k2", "concurrency": 1, "rep": 0,
            "prompt_class": "prose", "cell": "mtp-k2|soak|c1|r0|prose"}
    reqs = []
    for m, (steps, accepted) in enumerate(per_minute):
        for i in range(requests_per_minute):
            reqs.append(RequestRow(
                **head, index=len(reqs), ok=True, cache="cold", prompt_tokens=100 * (m + 1),
                completion_tokens=10, t_start=5000.0 + m * WINDOW_S + i, measured_from="pod",
                spec_acceptance={"steps": steps // requests_per_minute,
                                 "accepted": accepted // requests_per_minute}))
    cell = CellRow(**head, requests=len(reqs), wall_s=len(per_minute) * WINDOW_S,
                   output_tokens=10 * len(reqs), output_tok_s=1.0, soak_s=300.0)
    return cell, reqs


def test_a_minute_below_half_the_first_minutes_is_flagged() -> None:
    # accepted/step 1.0, 1.2, 0.8 (median 1.0), then 0.6 (kept), then 0.4 (< 0.5): minute 5
    cell, reqs = _constructed([(40, 40), (40, 48), (40, 32), (40, 24), (40, 16)])
    row = soak_row(cell, reqs)
    assert row["reference"] == pytest.approx(1.0)
    c = row["collapse"]
    assert c is not None and c["rule"] == "minute" and c["minute"] == 5
    assert c["at_s"] == pytest.approx(4 * WINDOW_S)
    # the furthest context position sent by then: minute 5's first request, 500 + 10
    assert c["position"] == 510
    # by prompt length too: every prompt (100-500 tokens) is in the <1k band, 200 steps,
    # 160 accepted
    assert [(b["band"], b["steps"], b["accepted_per_step"]) for b in row["bands"] or []] == [
        ("<1k", 200, 0.8)]


def test_a_thin_minute_is_not_judged() -> None:
    thin = MIN_STEPS - 4  # below the evidence a minute needs
    cell, reqs = _constructed([(40, 40), (40, 40), (thin, 0)])
    row = soak_row(cell, reqs)
    assert row["minutes"][2]["judged"] is False and row["collapse"] is None


def test_an_arm_that_never_accepted_has_not_collapsed() -> None:
    cell, reqs = _constructed([(40, 0), (40, 0), (40, 0)])
    assert soak_row(cell, reqs)["collapse"] is None


def test_the_soak_cell_is_the_soak_sections_alone(tmp_path: Path) -> None:
    run = build_run({"plain": {1: [100.0]}, "mtp-k2": {1: [150.0]}})
    cell, reqs = _constructed([(40, 40), (40, 48), (40, 32), (40, 24), (40, 16)])
    run.soak_cells, run.soak_requests = [cell], reqs
    loaded = load_run(write_run(run, tmp_path / "run"))
    assert [c.cell for c in loaded.soak_cells] == [cell.cell]
    assert all(c.soak_s is None for c in loaded.cells)  # no throughput cell counts it
    an = analyze(loaded)
    cells = {(c["arm"], c["concurrency"]): c["reps"] for c in an["cells"]}
    assert cells == {("plain", 1): 1, ("mtp-k2", 1): 1}
    assert an["soak"][0]["collapse"]["minute"] == 5
    assert any("soak: mtp-k2 acceptance collapsed at minute 5" in w for w in an["warnings"])
    write_report([tmp_path / "run"])
    text = (tmp_path / "run" / "report.md").read_text()
    assert "## Soak: acceptance over time" in text and "**COLLAPSE** at minute 5" in text
    assert (tmp_path / "run" / "soak.png").stat().st_size > 0


def test_any_other_cell_of_two_minutes_or_more_is_read_minute_by_minute() -> None:
    run = build_run({"plain": {1: [100.0]}, "mtp-k2": {1: [150.0]}})
    soak, reqs = _constructed([(40, 40), (40, 48), (40, 32), (40, 24), (40, 16)])
    # the same requests as an ordinary cell of mtp-k2 (five minutes of one rep), not a soak
    (cell,) = [c for c in run.cells if c.arm == "mtp-k2"]
    long = cell.model_copy(update={"wall_s": 5 * WINDOW_S, "acceptance_per_request": {"n": 1}})
    run.cells = [c for c in run.cells if c.arm != "mtp-k2"] + [long]
    run.requests = [r.model_copy(update={"cell": long.cell}) for r in reqs]
    an = analyze(run)
    (row,) = an["soak"]
    assert row["soak_s"] is None and row["collapse"]["minute"] == 5
    assert any(w.startswith(f"cell {long.cell}: mtp-k2 acceptance collapsed at minute 5")
               for w in an["warnings"])
    # under two minutes a cell is not read by minute
    run.cells = [c.model_copy(update={"wall_s": 2 * WINDOW_S - 1}) for c in run.cells]
    assert "soak" not in analyze(run)
