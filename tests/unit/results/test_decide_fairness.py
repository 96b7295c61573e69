"""`decide` is fair (issue 37 item 5, newcomer 2.17): an arm wins a band only against arms measured
there, under the same SLO, on cold cells where cold ones exist, and under goodput only when it met
the SLO; an arm that was not measured is "not measured", never "lost"; every verdict names the arms
it compared. Expected values are worked out by hand in each test."""

from __future__ import annotations

from typing import Any

from tailpod.results import decide
from tailpod.results.analysis import analyze
from tailpod.results.decide import render
from tailpod.results.schema import CellRow

SLO = {"ttft_ms": 500.0}


def compute(runs: list[Any], **kw: Any) -> dict[str, Any]:
    """decide.compute with each run's own analysis, as the CLI gives it."""
    return decide.compute(runs, analyses=[analyze(r) for r in runs], **kw)


def _open(arm: str, rate: float, rep: int, goodput: float, attainment: float,
          slo: dict[str, float] | None = None, run_id: str = "run-a") -> CellRow:
    data: dict[str, Any] = {
        "run_id": run_id, "arm": arm, "concurrency": 0, "rep": rep, "prompt_class": "prose",
        "cell": f"{arm}|rate{rate}|r{rep}|prose", "requests": 50, "wall_s": 10.0,
        "output_tokens": 3000, "output_tok_s": 300.0,
        "arrival": {"process": "poisson", "rate": rate, "burstiness": 1.0, "seed": rep,
                    "requests": 50},
        "slo": dict(slo or SLO), "slo_percentile": 90.0, "slo_attainment": attainment,
        "goodput_tok_s": goodput,
    }  # fmt: skip
    return CellRow(**data)


def _band(dec: dict[str, Any], axis: str, load: Any) -> dict[str, Any]:
    return next(b for b in dec["bands"]
                if b["axis"] == axis and b["load"] == load and b["prompt_class"] == "*")


def _open_loop_run(make_run: Any) -> Any:
    """newcomer 2.17: plain's ladder stopped after rate 2 (saturated), ngram-k2 ran on to rate 8
    where 10% of its requests met the SLO."""
    run = make_run({"plain": {1: [100, 100]}, "ngram-k2": {1: [100, 100]}})
    run.cells = []  # open loop only
    for rep in (0, 1):
        run.cells.append(_open("plain", 2.0, rep, 250.0, 0.95))
        run.cells.append(_open("ngram-k2", 2.0, rep, 260.0, 0.60))
        run.cells.append(_open("ngram-k2", 8.0, rep, 30.0, 0.10))
    return run


def test_goodput_never_crowns_an_arm_that_missed_the_slo(make_run: Any) -> None:
    dec = compute([_open_loop_run(make_run)], objective="goodput")
    # rate 2: ngram-k2 has the higher goodput (260 > 250) but met its SLO for 60% < 90%: plain,
    # the only arm that met it (95%), wins, and the band names both arms it compared
    at2 = _band(dec, "rate", 2.0)
    assert at2["arm"] == "plain"
    assert at2["compared"] == ["ngram-k2", "plain"]
    assert at2["missed_slo"] == ["ngram-k2"]
    # rate 8: ngram-k2 alone, 10% attainment: nobody wins; plain was never measured there
    at8 = _band(dec, "rate", 8.0)
    assert at8["arm"] is None
    assert at8["verdict"] == "no arm meets the SLO"
    assert at8["compared"] == ["ngram-k2"]
    assert at8["not_measured"] == ["plain"]
    md = "\n".join(render(dec))
    assert "no arm meets the SLO" in md
    # plain wins the one band that has a winner: a static deployment of plain, among both arms
    assert dec["deployment"]["kind"] == "static" and dec["deployment"]["arm"] == "plain"
    assert dec["deployment"]["compared"] == ["ngram-k2", "plain"]
    assert "Arms compared: ngram-k2, plain;" in md


def test_no_arm_meeting_the_slo_anywhere_gives_no_deployment(make_run: Any) -> None:
    run = _open_loop_run(make_run)
    run.cells = [c for c in run.cells if c.arm == "ngram-k2"]
    dec = compute([run], objective="goodput")
    assert all(b["arm"] is None for b in dec["bands"])
    assert dec["deployment"]["kind"] == "none"
    assert "no arm meets the SLO" in dec["deployment"]["reason"]


def test_an_unmeasured_arm_is_not_measured_never_lost(make_run: Any) -> None:
    # mtp-k2 ran at c=1 and c=2 only; plain at 1, 2 and 4
    run = make_run({"plain": {1: [100, 100], 2: [190, 190], 4: [360, 360]},
                    "mtp-k2": {1: [180, 180], 2: [300, 300]}})
    dec = compute([run])
    c4 = _band(dec, "concurrency", 4.0)
    assert c4["arm"] == "plain"
    assert c4["compared"] == ["plain"] and c4["not_measured"] == ["mtp-k2"]
    c1 = _band(dec, "concurrency", 1.0)
    assert c1["compared"] == ["mtp-k2", "plain"] and c1["not_measured"] == []
    md = "\n".join(render(dec))
    assert "| c=4 | all (pooled) | plain | 360.0 | - | plain | mtp-k2 |" in md


def test_a_mixed_deployment_counts_every_band_and_names_who_won_the_others(make_run: Any) -> None:
    # closed loop: equal throughputs, so plain (the simpler arm) wins c=1 and c=2; open loop
    # (throughput objective): mtp-k2's 400 tok/s beats plain's 300 at rate 2
    run = make_run({"plain": {1: [100, 100], 2: [200, 200]},
                    "mtp-k2": {1: [100, 100], 2: [200, 200]}})
    for rep in (0, 1):
        plain = _open("plain", 2.0, rep, 100.0, 0.95)
        spec = _open("mtp-k2", 2.0, rep, 100.0, 0.95)
        run.cells += [plain.model_copy(update={"output_tok_s": 300.0}),
                      spec.model_copy(update={"output_tok_s": 400.0})]
    dec = compute([run])
    d = dec["deployment"]
    # three bands: plain wins 2 of them (c=1, c=2), mtp-k2 wins rate=2
    assert d["kind"] == "mixed" and d["arm"] == "plain"
    assert "others are lost" not in d["reason"]
    assert d["reason"] == "plain wins 2 of 3 bands; mtp-k2 wins rate=2"


def test_goodput_compares_only_cells_measured_under_the_same_slo(make_run: Any) -> None:
    strict = make_run({"plain": {1: [100]}}, run_id="strict")
    strict.cells = [_open("plain", 2.0, rep, 200.0, 0.95, run_id="strict") for rep in (0, 1)]
    loose = make_run({"plain": {1: [100]}}, run_id="loose")
    # measured against a 5 s TTFT target: more goodput, but not under the strict run's SLO
    loose.cells = [_open("plain", 2.0, rep, 290.0, 0.99, slo={"ttft_ms": 5000.0},
                         run_id="loose") for rep in (0, 1)]
    dec = compute([strict, loose], objective="goodput")
    band = _band(dec, "rate", 2.0)
    assert dec["slo"] == SLO
    assert band["arm"] == "strict/plain"
    assert band["compared"] == ["strict/plain"]
    assert band["not_measured"] == ["loose/plain"]


def test_warm_cells_never_compete_where_cold_ones_exist(make_run: Any) -> None:
    cold = make_run({"plain": {1: [100, 100]}}, run_id="cold")
    warm = make_run({"plain": {1: [500, 500]}}, run_id="warm")
    # the second run measured only warm-prefix cells: its 500 tok/s is a cache hit, not a rival
    warm.cells = [c.model_copy(update={"cache": "warm"}) for c in warm.cells]
    dec = compute([cold, warm])
    band = _band(dec, "concurrency", 1.0)
    assert band["arm"] == "cold/plain"
    assert band["compared"] == ["cold/plain"] and band["not_measured"] == ["warm/plain"]


def test_a_dead_lane_cell_is_void_in_the_report_and_not_compared_by_decide(make_run: Any) -> None:
    from tailpod.results.analysis import analyze

    run = make_run({"plain": {1: [100, 100], 2: [190, 190]},
                    "mtp-k2": {1: [180, 180], 2: [200, 200]},
                    "deploy-lanes": {1: [170, 170], 2: [210, 210]}})
    why = "lane plain took 0 requests at c=2, above the admission limit 1"
    for i, c in enumerate(run.cells):  # adversary scenario 12: the plain lane died
        if c.arm == "deploy-lanes" and c.concurrency == 2:
            run.cells[i] = c.model_copy(update={"void": True, "flags": ["dead_lane", "void"],
                                                "void_reason": why})
    dec = compute([run])
    gaps = {g["load"]: g for g in dec["deployment_gap"] if g["prompt_class"] == "*"}
    # c=1 is compared (170 vs mtp-k2's 180: loses); c=2, measured with a dead lane, is not
    assert set(gaps) == {1.0} and gaps[1.0]["loses"] is True
    an = analyze(run)
    cell = next(e for e in an["cells"] if e["arm"] == "deploy-lanes" and e["concurrency"] == 2)
    assert cell["output_tok_s"] is None and cell["void_metrics"]["output_tok_s"] == why
    # void alone: the report says so, and the arm's c=1 cell stands (the arm is not struck out)
    assert f"deploy-lanes c=2: void: {why}" in an["warnings"]
    c1 = next(e for e in an["cells"] if e["arm"] == "deploy-lanes" and e["concurrency"] == 1)
    assert c1["output_tok_s"]["median"] == 170
    assert not next(a for a in an["arms"] if a["label"] == "deploy-lanes").get("void")
