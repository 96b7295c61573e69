"""What the open-loop section computes (results/slo.py `compute`) beyond the max rate: each point's
medians, the void mark, the SLO met exactly at the target or not known, a trace replay's point,
and no SLO at all. Figures worked out by hand from constructed cells (issue 37 item 10)."""

from __future__ import annotations

from typing import Any

import pytest

from tailpod.results.schema import CellRow
from tailpod.results.slo import compute


def _open(arm: str, rep: int, attainment: float | None, *, rate: Any = 2.0,
          slo: bool = True, lag: float = 0.001) -> CellRow:
    data: dict[str, Any] = {
        "run_id": "run-a", "arm": arm, "concurrency": 0, "rep": rep, "prompt_class": "prose",
        "cell": f"{arm}|rate{rate}|r{rep}|prose", "requests": 40, "wall_s": 10.0,
        "output_tokens": 1000, "output_tok_s": 100.0,
        "arrival": {"process": "poisson", "rate": rate, "burstiness": 1.0, "seed": rep,
                    "requests": 40},
        "achieved_rate_rps": 1.9 + rep / 10, "ttft_sched_p90_s": 0.2 + rep / 10,
        "schedule_lag_max_s": lag, "slo_attainment": attainment,
    }  # fmt: skip
    if slo:
        data |= {"slo": {"ttft_ms": 500.0}, "slo_percentile": 90.0}
    return CellRow(**data)


def test_points_carry_the_medians_and_the_void_mark(make_run: Any) -> None:
    run = make_run({"plain": {1: [1.0]}, "mtp-k2": {1: [1.0]}})
    # plain: 90 % is the target exactly (met); mtp-k2: 89.5 % (missed by half a point)
    run.cells = [_open("plain", 0, 0.9, lag=0.003), _open("plain", 1, 0.9, lag=0.001),
                 _open("plain", 2, 0.9, lag=0.002), _open("mtp-k2", 0, 0.895)]
    section = compute(run, void={"mtp-k2": "the token-identity gate failed"})
    assert section is not None
    by_arm = {p["arm"]: p for p in section["points"]}
    plain, spec = by_arm["plain"], by_arm["mtp-k2"]
    # medians over the three reps: achieved 1.9, 2.0, 2.1 → 2.0; TTFT 0.2, 0.3, 0.4 → 0.3
    assert plain["achieved_rate_rps"] == pytest.approx(2.0)
    assert plain["ttft_sched_p90_s"] == pytest.approx(0.3)
    assert plain["schedule_lag_max_s"] == 0.002 and plain["reps"] == 3
    assert (plain["void"], plain["slo_met"]) == (False, True)
    assert (spec["void"], spec["slo_met"]) == (True, False)
    assert {a["arm"]: a["void"] for a in section["arms"]} == {"plain": False, "mtp-k2": True}


def test_an_unknown_attainment_is_neither_met_nor_missed(make_run: Any) -> None:
    run = make_run({"plain": {1: [1.0]}})
    run.cells = [_open("plain", 0, None)]
    section = compute(run)
    assert section is not None
    assert section["points"][0]["slo_met"] is None
    assert section["arms"][0]["max_rate_under_slo"] is None


def test_without_an_slo_the_section_names_none(make_run: Any) -> None:
    run = make_run({"plain": {1: [1.0]}})
    run.cells = [_open("plain", 0, None, slo=False),
                 # an open-loop cell whose rate is not a number has no point
                 _open("plain", 1, None, slo=False, rate=None)]
    section = compute(run)
    assert section is not None
    assert (section["slo"], section["slo_percentile"]) == (None, None)
    assert [p["rate"] for p in section["points"]] == [2.0]
    assert section["points"][0]["slo_met"] is None


def test_a_trace_replay_is_one_point_per_arm(make_run: Any) -> None:
    run = make_run({"plain": {1: [1.0]}})
    trace = {"process": "trace", "rate": None, "burstiness": 1.0, "seed": 0,
             "trace": {"path": "t.jsonl", "format": "mooncake", "speed": 2.0}}
    run.cells = [_open("plain", rep, 0.95).model_copy(update={"arrival": trace})
                 for rep in (0, 1)]
    section = compute(run, void={"plain": "the structure gate failed"})
    assert section is not None and section["points"] == []
    (point,) = section["trace"]
    assert (point["format"], point["speed"], point["requests"], point["reps"]) == (
        "mooncake", 2.0, 40, 2)
    assert (point["void"], point["slo_met"]) == (True, True)
