"""The decision's bands (results/decide.py `compute`): their order, what each says it compared and
why an arm was not, the band no arm wins, the deployment's gap and where it loses, the prompt
class that prefers another arm than the pooled choice, and the analysis entries it rests on.
Expected values are worked out by hand (issue 37 item 10, `make mutate`)."""

from __future__ import annotations

from typing import Any

import pytest

from tailpod.results import decide
from tailpod.results.analysis import analyze
from tailpod.results.schema import CellRow

NO_CROSS: dict[str, Any] = {"crossover": [], "knee": []}


def compute(runs: list[Any], **kw: Any) -> dict[str, Any]:
    return decide.compute(runs, analyses=[analyze(r) for r in runs], **kw)


def _with_class(cells: list[CellRow], pc: str, scale: dict[str, float]) -> list[CellRow]:
    return [c.model_copy(update={"prompt_class": pc, "output_tok_s": c.output_tok_s * scale[c.arm],
                                 "cell": c.cell.replace("prose", pc)}) for c in cells]


def test_no_runs_or_a_missing_analysis_is_refused(make_run: Any) -> None:
    with pytest.raises(ValueError, match=r"^no runs$"):
        decide.compute([], analyses=[])
    with pytest.raises(ValueError, match=r"^one analysis per run$"):
        decide.compute([make_run({"plain": {1: [1.0]}})], analyses=[])


def test_bands_run_pooled_first_then_by_class_each_by_load(make_run: Any) -> None:
    run = make_run({"plain": {4: [400.0], 1: [100.0]}, "mtp-k2": {4: [300.0], 1: [200.0]}})
    prose = list(run.cells)  # c=4 before c=1, as the cells came
    run.cells = prose + _with_class(prose, "code", {"plain": 1.0, "mtp-k2": 1.0})
    rate = prose[0].model_copy(update={"arrival": {"process": "poisson", "rate": 2.0,
                                                   "requests": 4}, "cell": "r"})
    run.cells.insert(0, rate)  # an open-loop cell first: its band still comes after c=
    dec = decide.compute([run], analyses=[NO_CROSS])
    assert [(b["axis"], b["load"], b["prompt_class"]) for b in dec["bands"]] == [
        ("concurrency", 1.0, "*"), ("concurrency", 4.0, "*"),
        ("concurrency", 1.0, "code"), ("concurrency", 4.0, "code"),
        ("concurrency", 1.0, "prose"), ("concurrency", 4.0, "prose"),
        ("rate", 2.0, "*"), ("rate", 2.0, "prose")]
    assert {b["verdict"] for b in dec["bands"]} == {"best"}
    assert dec["unit"] == "tok/s" and dec["lower_is_better"] is False


def test_a_band_names_why_each_arm_was_not_measured_there(make_run: Any) -> None:
    run = make_run({"plain": {1: [100.0], 2: [190.0]}, "mtp-k2": {1: [150.0], 2: [200.0]},
                    "ngram-k3": {2: [180.0]}, "eagle-k4": {1: [10.0]}},
                   void={"eagle-k4": "the token-identity gate failed"})
    run.cells = [c.model_copy(update={"cache": "warm"})
                 if (c.arm, c.concurrency) == ("mtp-k2", 1) else c for c in run.cells]
    dec = decide.compute([run], analyses=[NO_CROSS])
    c1 = next(b for b in dec["bands"] if b["load"] == 1 and b["prompt_class"] == "*")
    # the void arm is in no band's list: it was never eligible
    assert c1["compared"] == ["plain"] and c1["not_measured"] == ["mtp-k2", "ngram-k3"]
    assert c1["not_measured_why"] == {"mtp-k2": "warm-prefix cells only",
                                      "ngram-k3": "not measured at this load"}
    assert dec["deployment"]["compared"] == ["mtp-k2", "ngram-k3", "plain"]


def _open(arm: str, rate: float, rep: int, attainment: float) -> CellRow:
    data: dict[str, Any] = {
        "run_id": "run-a", "arm": arm, "concurrency": 0, "rep": rep, "prompt_class": "prose",
        "cell": f"{arm}|rate{rate}|r{rep}|prose", "requests": 20, "wall_s": 10.0,
        "output_tokens": 3000, "output_tok_s": 300.0,
        "arrival": {"process": "poisson", "rate": rate, "burstiness": 1.0, "seed": rep,
                    "requests": 20},
        "slo": {"ttft_ms": 500.0}, "slo_percentile": 90.0, "slo_attainment": attainment,
        "goodput_tok_s": 250.0 + rep,
    }  # fmt: skip
    return CellRow(**data)


def test_a_band_no_arm_meets_says_so_and_the_next_band_is_still_decided(make_run: Any) -> None:
    run = make_run({"plain": {1: [100.0]}})
    # rate 1: both reps at 50 % against a 90 % target; rate 4: 95 %
    run.cells = [_open("plain", 1.0, 0, 0.5), _open("plain", 1.0, 1, 0.5),
                 _open("plain", 4.0, 0, 0.95), _open("plain", 4.0, 1, 0.95)]
    dec = decide.compute([run], analyses=[NO_CROSS], objective="goodput")
    by = {(b["load"], b["prompt_class"]): b for b in dec["bands"]}
    assert by[(1.0, "*")] == {
        "axis": "rate", "load": 1.0, "prompt_class": "*", "compared": ["plain"],
        "not_measured": [], "not_measured_why": {}, "missed_slo": ["plain"], "arm": None,
        "verdict": "no arm meets the SLO", "median": None, "best_median_arm": None,
        "best_median": None, "tied": [], "tie_resolved": False,
        "candidates": {"plain": {"median": 250.5, "min": 250.0, "max": 251.0, "n": 2}}}
    assert by[(4.0, "*")]["arm"] == "plain" and by[(4.0, "*")]["verdict"] == "best"
    # one arm wins every band it is met in: static, and the miss at rate 1 does not rewrite that
    assert dec["deployment"]["kind"] == "static"
    assert dec["deployment"]["reason"] == "wins every band"


def test_the_slo_asked_for_is_the_one_the_decision_names(make_run: Any) -> None:
    run = make_run({"plain": {1: [100.0]}})
    run.cells = [_open("plain", 4.0, 0, 0.95)]
    asked = {"ttft_ms": 400.0}
    dec = decide.compute([run], analyses=[NO_CROSS], objective="goodput", slo=asked)
    assert dec["slo"] == asked


@pytest.mark.parametrize(("objective", "deploy", "loses"), [
    # cost at $3.6/h is 1000 / tok/s: plain 10 (100 tok/s) against the deployment's cheapest
    # rep 10 (its dearest 1000 / 80 = 12.5): equal is not losing
    ("cost", [100.0, 80.0], False),
    # throughput: the deployment's best rep 100 equals plain's worst: not losing
    ("throughput", [100.0, 90.0], False),
    ("throughput", [99.0, 90.0], True),
])
def test_a_deployment_loses_only_outside_the_winners_range(make_run: Any, objective: str,
                                                            deploy: list[float],
                                                            loses: bool) -> None:
    run = make_run({"plain": {1: [100.0, 100.0]}, "deploy-lanes": {1: deploy}}, price=3.6)
    dec = decide.compute([run], analyses=[NO_CROSS], objective=objective)
    (gap,) = [g for g in dec["deployment_gap"] if g["prompt_class"] == "*"]
    assert gap["loses"] is loses


def test_a_gap_against_a_winner_of_nothing_is_unknown(make_run: Any) -> None:
    run = make_run({"plain": {1: [0.0, 0.0]}, "deploy-lanes": {1: [0.0, 0.0]}})
    dec = decide.compute([run], analyses=[NO_CROSS])
    assert [g["gap"] for g in dec["deployment_gap"]] == [None, None]


def test_a_class_that_prefers_another_arm_than_the_pool_is_warned_of(make_run: Any) -> None:
    run = make_run({"plain": {1: [100.0], 4: [400.0]}, "mtp-k2": {1: [200.0], 4: [300.0]}})
    prose = list(run.cells)
    # code: plain ten times its prose figure (1000 at c=1, 4000 at c=4), the spec arm the same
    run.cells = prose + _with_class(prose, "code", {"plain": 10.0, "mtp-k2": 1.0})
    dec = decide.compute([run], analyses=[NO_CROSS])
    pooled = {b["load"]: b["arm"] for b in dec["bands"] if b["prompt_class"] == "*"}
    # pooled c=1: plain (100 + 1000) / 2 = 550 > mtp-k2 200; c=4: 2200 > 300: plain everywhere;
    # prose prefers mtp-k2 at c=1 (200 > 100) only; code agrees with the pool everywhere
    assert pooled == {1.0: "plain", 4.0: "plain"}
    assert dec["warnings"] == [
        "prompt class prose at concurrency 1 prefers mtp-k2 over the pooled choice plain"]


def test_the_crossover_of_a_matrix_names_each_run(make_run: Any) -> None:
    a = make_run({"plain": {1: [100.0]}}, run_id="a")
    b = make_run({"plain": {1: [100.0]}}, run_id="b")
    cross = {"arm": "mtp-k2", "status": "crossover", "concurrency": 6.3, "bracket": [4, 8],
             "detail": "speedup 1.25 → 0.875", "baseline": "plain", "other": "not copied"}
    knee = {"arm": "plain", "status": "knee", "concurrency": 8, "throughput": 640.0,
            "detail": "flat from c=8", "other": "not copied"}
    dec = decide.compute([a, b], analyses=[{}, {"crossover": [cross], "knee": [knee]}])
    assert dec["crossover"] == [{"status": "crossover", "concurrency": 6.3, "bracket": [4, 8],
                                 "detail": "speedup 1.25 → 0.875", "baseline": "plain",
                                 "arm": "b/mtp-k2"}]
    assert dec["knee"] == [{"status": "knee", "concurrency": 8, "throughput": 640.0,
                            "detail": "flat from c=8", "arm": "b/plain"}]


def test_a_trace_replay_is_one_band_of_its_own(make_run: Any) -> None:
    run = make_run({"plain": {1: [100.0]}})
    trace = {"process": "trace", "rate": None, "burstiness": 1.0, "seed": 0,
             "trace": {"path": "t.jsonl", "format": "mooncake", "speed": 2.0}}
    run.cells = [run.cells[0].model_copy(update={"arrival": trace})]
    dec = decide.compute([run], analyses=[NO_CROSS])
    assert [(b["axis"], b["load"], b["prompt_class"], b["arm"]) for b in dec["bands"]] == [
        ("trace", 0.0, "*", "plain"), ("trace", 0.0, "prose", "plain")]
    assert "| trace | all (pooled) | plain | 100.0 | - | plain | - |" in decide.render(dec)
    assert (dec["deployment"]["kind"], dec["deployment"]["arm"]) == ("static", "plain")


def test_a_load_only_a_deployment_was_measured_at_is_no_band(make_run: Any) -> None:
    run = make_run({"deploy-lanes": {1: [100.0]}, "plain": {2: [190.0]}})
    dec = decide.compute([run], analyses=[NO_CROSS])
    assert [(b["load"], b["prompt_class"], b["arm"]) for b in dec["bands"]] == [
        (2.0, "*", "plain"), (2.0, "prose", "plain")]
