"""`decide --objective goodput --slo ...` on closed-loop cells that were not measured against that
SLO: the goodput is recomputed from the cell's request rows (results/decide.py `_goodput`), one
request meeting every target or not (agent/probes/arrival.py `meets_slo`). Each figure below is
worked out by hand from the rows (issue 37 item 10, `make mutate`)."""

from __future__ import annotations

import math
from typing import Any

from tailpod.results import decide
from tailpod.results.io import Run
from tailpod.results.schema import CellRow, RequestRow

SLO = {"ttft_ms": 500.0, "tpot_ms": 20.0, "e2el_ms": 2000.0}
BAND = ("concurrency", 1.0, "prose")


def _row(arm: str, i: int, *, ttft: float | None = 0.1, tpot: float | None = 0.01,
         e2e: float | None = 1.0, ok: bool = True, tokens: int | None = 40) -> RequestRow:
    return RequestRow(run_id="run-a", arm=arm, concurrency=1, rep=0, prompt_class="prose",
                      cell=f"{arm}|c1|r0|prose", index=i, ok=ok, ttft_s=ttft, tpot_s=tpot,
                      e2e_s=e2e, completion_tokens=tokens, t_start=1000.0 + i)


def _five(arm: str, tokens: int | None) -> list[RequestRow]:
    """One request meets every target; each of the other four misses one thing only."""
    return [_row(arm, 0, tokens=tokens),
            _row(arm, 1, ttft=0.6, tokens=tokens),    # TTFT 600 ms > 500
            _row(arm, 2, tpot=0.03, tokens=tokens),   # TPOT 30 ms > 20
            _row(arm, 3, e2e=2.5, tokens=tokens),     # end to end 2500 ms > 2000
            _row(arm, 4, ok=False, tokens=tokens)]    # failed


def _cell(run: Run, arm: str, **update: Any) -> CellRow:
    (cell,) = [c for c in run.cells if c.arm == arm]
    return cell.model_copy(update=update)


def _collect(make_run: Any, update: dict[str, dict[str, Any]],
             rows: list[RequestRow]) -> dict[str, Any]:
    run = make_run({arm: {1: [100.0]} for arm in update})
    run.cells = [_cell(run, arm, **u) for arm, u in update.items()]
    run.requests = rows
    return decide.collect([run], "goodput", SLO)


def test_goodput_counts_the_tokens_of_the_requests_that_met_every_target(make_run: Any) -> None:
    # "usage": the one request that met all three targets returned 40 tokens over a 100 s cell;
    # the cell sent 8 requests of which 5 have rows: the 3 without rows did not meet the SLO.
    # "no-usage": no token counts and a sixth row that met every target too, so the met share
    # (2 of 6 rows) of its 100 tok/s: 33.3 tok/s.
    got = _collect(make_run, {"usage": {"requests": 8}, "no-usage": {"requests": 6,
                                                                      "wall_s": 1.0}},
                   _five("usage", 40) + _five("no-usage", None) + [_row("no-usage", 5,
                                                                        tokens=None)])
    values, attained = got["values"][BAND], got["attainment"][BAND]
    assert math.isclose(values["usage"][0], 40 / 100.0)
    assert math.isclose(values["no-usage"][0], 100.0 * 2 / 6)
    assert attained == {"usage": [1 / 8], "no-usage": [2 / 6]}
    assert got["slo"] == SLO and got["left_out"] == {}


def test_a_cell_without_rows_or_wall_time_has_no_goodput(make_run: Any) -> None:
    got = _collect(make_run, {"no-rows": {}, "no-wall": {"wall_s": 0.0}, "usage": {}},
                   _five("no-wall", 40) + _five("usage", 40))
    assert set(got["values"][BAND]) == {"usage"}
    assert got["left_out"] == {("concurrency", 1.0): {"no-rows": "no goodput",
                                                      "no-wall": "no goodput"}}


def test_an_open_loop_cell_under_another_slo_is_not_recomputed(make_run: Any) -> None:
    # its rows would give a goodput, but an open-loop cell's latencies count from the scheduled
    # send (docs/decide.md): only its own recorded figure is used, and it was for another SLO
    run = make_run({"open": {1: [100.0]}})
    arrival = {"process": "poisson", "rate": 2.0, "burstiness": 1.0, "seed": 0, "requests": 5}
    run.cells = [_cell(run, "open", arrival=arrival, slo={"ttft_ms": 800.0, "tpot_ms": 50.0},
                       slo_percentile=90.0, slo_attainment=1.0, goodput_tok_s=90.0)]
    run.requests = _five("open", 40)
    got = decide.collect([run], "goodput", SLO)
    assert got["values"] == {}
    assert got["left_out"] == {("rate", 2.0): {"open": "measured under another SLO ttft_ms 800, tpot_ms 50"}}
