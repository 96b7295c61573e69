"""`decide`'s cost verdict, the SLO its goodput was measured under, and warm-prefix cells
(issue 37 item 10; docs/decide.md). Under `cost` lower is better: a measured deployment loses
when even its cheapest rep costs more than the winner's dearest, and an arm that produced nothing
costs without bound. Under `goodput` an arm meets the SLO when its share of requests reaches the
recorded target exactly, and the decision names that target. Warm-prefix cells are compared only
where no run has cold ones. Expected values are worked out by hand in each test."""

from __future__ import annotations

import math
from typing import Any

from tailpod.results import decide
from tailpod.results.analysis import analyze
from tailpod.results.schema import CellRow


def compute(runs: list[Any], analyses: list[dict[str, Any]] | None = None,
            **kw: Any) -> dict[str, Any]:
    """decide.compute with the runs' own analyses, as its callers give them, unless given."""
    return decide.compute(runs, analyses=analyses if analyses is not None
                          else [analyze(r) for r in runs], **kw)


def _band(dec: dict[str, Any], load: float) -> dict[str, Any]:
    return next(b for b in dec["bands"] if b["load"] == load and b["prompt_class"] == "*")


def test_under_cost_a_deployment_that_costs_more_loses(make_run: Any) -> None:
    # price $3.6/h: cost = 3.6 / (tok/s × 3600) × 1e6 = 1000 / tok/s USD per Mtok.
    # plain 200 tok/s → 5.0; the deployment 100 tok/s → 10.0: it costs more, so it loses
    run = make_run({"plain": {1: [200, 200]}, "deploy-lanes": {1: [100, 100]}}, price=3.6)
    dec = compute([run], objective="cost")
    (gap,) = [g for g in dec["deployment_gap"] if g["prompt_class"] == "*"]
    assert math.isclose(gap["best"], 5.0) and math.isclose(gap["median"], 10.0)
    assert math.isclose(gap["gap"], 1.0)  # 100 % dearer
    assert gap["loses"] is True
    # the other way round: the deployment is the cheaper one, it does not lose
    run = make_run({"plain": {1: [100, 100]}, "deploy-lanes": {1: [200, 200]}}, price=3.6)
    (gap,) = [g for g in compute([run], objective="cost")["deployment_gap"]
              if g["prompt_class"] == "*"]
    assert gap["loses"] is False and math.isclose(gap["gap"], -0.5)


def test_under_cost_an_arm_that_produced_nothing_never_wins(make_run: Any) -> None:
    run = make_run({"plain": {1: [100, 100]}, "ngram-k2": {1: [0, 0]}}, price=3.6)
    # (the analysis is given: its best-K section cannot take a zero throughput yet)
    band = _band(compute([run], objective="cost", analyses=[{"crossover": [], "knee": []}]), 1.0)
    assert band["arm"] == "plain" and math.isclose(band["median"], 10.0)
    assert band["candidates"]["ngram-k2"]["median"] == math.inf


def _open(arm: str, rep: int, goodput: float, attainment: float, pct: float) -> CellRow:
    data: dict[str, Any] = {
        "run_id": "run-a", "arm": arm, "concurrency": 0, "rep": rep, "prompt_class": "prose",
        "cell": f"{arm}|rate2.0|r{rep}|prose", "requests": 20, "wall_s": 10.0,
        "output_tokens": 3000, "output_tok_s": 300.0,
        "arrival": {"process": "poisson", "rate": 2.0, "burstiness": 1.0, "seed": rep,
                    "requests": 20},
        "slo": {"ttft_ms": 500.0}, "slo_percentile": pct, "slo_attainment": attainment,
        "goodput_tok_s": goodput,
    }  # fmt: skip
    return CellRow(**data)


def test_goodput_holds_arms_to_the_recorded_target_inclusive(make_run: Any) -> None:
    run = make_run({"plain": {1: [100]}, "ngram-k2": {1: [100]}})
    # recorded target 95 %: ngram-k2 met it exactly (19 of 20) with more goodput; plain at 100 %
    run.cells = [c for rep in (0, 1) for c in (_open("ngram-k2", rep, 280.0, 0.95, 95.0),
                                               _open("plain", rep, 250.0, 1.0, 95.0))]
    dec = compute([run], objective="goodput")
    band = _band(dec, 2.0)
    assert dec["slo"] == {"ttft_ms": 500.0} and dec["slo_percentile"] == 95.0
    assert band["missed_slo"] == [] and band["arm"] == "ngram-k2"
    # at 90 % (18 of 20) ngram-k2 misses the 95 % target: plain wins
    run.cells = [c for rep in (0, 1) for c in (_open("ngram-k2", rep, 280.0, 0.90, 95.0),
                                               _open("plain", rep, 250.0, 1.0, 95.0))]
    band = _band(compute([run], objective="goodput"), 2.0)
    assert band["missed_slo"] == ["ngram-k2"] and band["arm"] == "plain"
    # the throughput objective names no SLO share
    assert compute([run])["slo_percentile"] is None


def test_warm_cells_are_compared_where_no_run_has_cold_ones(make_run: Any) -> None:
    run = make_run({"plain": {1: [100, 100]}, "ngram-k2": {1: [300, 300]}})
    run.cells = [c.model_copy(update={"cache": "warm"}) for c in run.cells]
    band = _band(compute([run]), 1.0)
    assert band["arm"] == "ngram-k2" and band["compared"] == ["ngram-k2", "plain"]


def test_warm_cells_of_a_run_with_cold_ones_are_left_out(make_run: Any) -> None:
    run = make_run({"plain": {1: [100, 100]}, "ngram-k2": {1: [90, 90]}})
    # the spec arm's warm-prefix cells are far faster; its cold ones lose to plain
    run.cells += [c.model_copy(update={"cache": "warm", "output_tok_s": 900.0})
                  for c in run.cells if c.arm == "ngram-k2"]
    band = _band(compute([run]), 1.0)
    assert band["arm"] == "plain"
    assert band["candidates"]["ngram-k2"]["median"] == 90.0


def test_an_attainment_just_under_the_target_or_unknown_misses_it(make_run: Any) -> None:
    run = make_run({"plain": {1: [100]}, "ngram-k2": {1: [100]}})
    # 94.5 % of requests met the SLO against a 95 % target: missed (by half a point)
    run.cells = [c for rep in (0, 1) for c in (_open("ngram-k2", rep, 280.0, 0.945, 95.0),
                                               _open("plain", rep, 250.0, 1.0, 95.0))]
    band = _band(compute([run], objective="goodput"), 2.0)
    assert band["missed_slo"] == ["ngram-k2"] and band["arm"] == "plain"
    # an attainment nobody recorded is not met: the arm cannot win on goodput alone
    run.cells = [c for rep in (0, 1) for c in (
        _open("ngram-k2", rep, 280.0, 1.0, 95.0).model_copy(update={"slo_attainment": None}),
        _open("plain", rep, 250.0, 1.0, 95.0))]
    band = _band(compute([run], objective="goodput"), 2.0)
    assert band["missed_slo"] == ["ngram-k2"] and band["arm"] == "plain"


def test_the_target_comes_from_a_cell_that_recorded_its_slo(make_run: Any) -> None:
    run = make_run({"plain": {1: [100]}, "ngram-k2": {1: [100]}})
    # the first cell names a share but no SLO (it was not measured against one): not the target
    stray = _open("plain", 0, 250.0, 1.0, 50.0).model_copy(
        update={"slo": None, "goodput_tok_s": None, "slo_attainment": None,
                "cell": "plain|rate2.0|r9|prose", "rep": 9})
    run.cells = [stray] + [c for rep in (0, 1) for c in (
        _open("ngram-k2", rep, 280.0, 0.90, 95.0), _open("plain", rep, 250.0, 1.0, 95.0))]
    dec = compute([run], objective="goodput")
    assert dec["slo_percentile"] == 95.0
    assert _band(dec, 2.0)["missed_slo"] == ["ngram-k2"]


def test_one_rep_of_unknown_attainment_misses_the_slo(make_run: Any) -> None:
    run = make_run({"plain": {1: [100]}, "ngram-k2": {1: [100]}})
    run.cells = [_open("ngram-k2", 0, 280.0, 1.0, 95.0),
                 _open("ngram-k2", 1, 280.0, 1.0, 95.0).model_copy(
                     update={"slo_attainment": None}),
                 _open("plain", 0, 250.0, 1.0, 95.0), _open("plain", 1, 250.0, 1.0, 95.0)]
    band = _band(compute([run], objective="goodput"), 2.0)
    assert band["missed_slo"] == ["ngram-k2"] and band["arm"] == "plain"
