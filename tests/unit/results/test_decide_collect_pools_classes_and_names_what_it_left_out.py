"""What `decide` compares before it picks (results/decide.py `collect`): each arm's facts, the
per-class figures and the wall-weighted pooled one, the cells it left out and why, and the cost
conversion, on constructed runs whose figures are worked out by hand (issue 37 item 10)."""

from __future__ import annotations

from typing import Any

import pytest

from tailpod.results import decide
from tailpod.results.schema import CellRow

C1 = ("concurrency", 1.0)


def _only(run: Any, arm: str) -> CellRow:
    (cell,) = [c for c in run.cells if c.arm == arm]
    return cell


def test_the_default_objective_is_throughput_and_others_are_refused(make_run: Any) -> None:
    run = make_run({"plain": {1: [100.0, 120.0]}})
    got = decide.collect([run])
    assert got["values"][(*C1, "prose")] == {"plain": [100.0, 120.0]}
    assert got["attainment"] == {} and got["warnings"] == [] and got["slo"] is None
    with pytest.raises(ValueError, match=r"^objective must be one of throughput, goodput, cost$"):
        decide.collect([run], "latency")


def test_each_arm_is_described_once_with_its_run_facts(make_run: Any) -> None:
    run = make_run({"plain": {1: [100.0]}, "mtp-k2": {1: [150.0]}}, price=2.5,
                   checkpoints={"mtp-k2": "org/model-mtp"})
    run.meta.pod.gpu = "H100"
    # cells of an arm the run's meta has no record of: no K, method or checkpoint known
    run.cells.append(_only(run, "plain").model_copy(update={"arm": "extra", "cell": "x"}))
    arms = decide.collect([run])["arms"]
    common = {"run_id": "run-a", "engine": "vllm", "engine_version": "0.32.0", "gpu": "H100",
              "price_per_hr": 2.5, "void": False, "deployment": False}
    assert arms == {
        "plain": {"key": "plain", "arm": "plain", "k": 0, "method": None,
                  "checkpoint": "tiny/model", **common},
        "mtp-k2": {"key": "mtp-k2", "arm": "mtp-k2", "k": 2, "method": "mtp",
                   "checkpoint": "org/model-mtp", **common},
        "extra": {"key": "extra", "arm": "extra", "k": 0, "method": None, "checkpoint": None,
                  **common},
    }


def test_cells_left_out_say_why_and_the_rest_still_count(make_run: Any) -> None:
    run = make_run({"a": {1: [100.0]}, "b": {1: [110.0]}, "c": {1: [120.0]}, "d": {1: [130.0]},
                    "e": {1: [140.0]}})
    no_load = _only(run, "e").model_copy(update={"arrival": {"process": "poisson"}})
    run.cells = [no_load,  # an open-loop cell without a rate has no band: skipped
                 _only(run, "a").model_copy(update={"void": True, "flags": ["lane died"]}),
                 _only(run, "b").model_copy(update={"flags": ["void", "gate failed", "oom"]}),
                 _only(run, "c").model_copy(update={"cache": "warm"}),
                 _only(run, "d")]
    got = decide.collect([run])
    assert got["values"][(*C1, "prose")] == {"d": [130.0]}
    assert got["left_out"] == {C1: {"a": "void (lane died)", "b": "void (gate failed, oom)",
                                    "c": "warm-prefix cells only"}}
    run.cells[1] = run.cells[1].model_copy(update={"flags": []})
    assert decide.collect([run])["left_out"][C1]["a"] == "void"
    # nothing left to compare: no figures, and no goodput warning outside the goodput objective
    run.cells = run.cells[:2]
    got = decide.collect([run])
    assert got["values"] == {} and got["warnings"] == []


def _classes(run: Any, arm: str, parts: list[tuple[str, float, float]]) -> list[CellRow]:
    base = _only(run, arm)
    return [base.model_copy(update={"prompt_class": pc, "output_tok_s": v, "wall_s": w,
                                    "cell": f"{arm}|{pc}"}) for pc, v, w in parts]


def test_the_pooled_figure_weights_each_class_by_its_wall_time(make_run: Any) -> None:
    run = make_run({"plain": {1: [0.0]}, "solo": {1: [0.0]}, "idle": {1: [0.0]}})
    # prose 100 tok/s for 0.2 s, code 400 tok/s for 0.6 s: (20 + 240) / 0.8 = 325 tok/s
    run.cells = _classes(run, "plain", [("prose", 100.0, 0.2), ("code", 400.0, 0.6)]) + \
        _classes(run, "solo", [("prose", 50.0, 0.0)]) + \
        _classes(run, "idle", [("prose", 70.0, 0.0), ("code", 90.0, 0.0)])
    values = decide.collect([run])["values"]
    assert values[(*C1, "prose")] == {"plain": [100.0], "solo": [50.0], "idle": [70.0]}
    assert values[(*C1, "code")] == {"plain": [400.0], "idle": [90.0]}
    assert values[(*C1, "*")]["plain"] == [pytest.approx(325.0)]
    # one class: its own figure, even at 0 s; two classes of no wall time: no pooled figure
    assert values[(*C1, "*")]["solo"] == [50.0] and "idle" not in values[(*C1, "*")]


def _recorded(cell: CellRow, goodput: float, attainment: float | None,
              slo: dict[str, float]) -> CellRow:
    return cell.model_copy(update={"slo": slo, "slo_percentile": 90.0, "goodput_tok_s": goodput,
                                   "slo_attainment": attainment})


def test_pooled_goodput_needs_every_class_and_every_attainment(make_run: Any) -> None:
    slo = {"ttft_ms": 500.0}
    run = make_run({"all": {1: [0.0]}, "half": {1: [0.0]}, "unknown": {1: [0.0]}})
    parts = [("prose", 100.0, 10.0), ("code", 300.0, 30.0)]
    a_p, a_c = _classes(run, "all", parts)
    h_p, h_c = _classes(run, "half", parts)
    u_p, u_c = _classes(run, "unknown", parts)
    run.cells = [_recorded(a_p, 80.0, 0.9, slo), _recorded(a_c, 240.0, 0.7, slo),
                 # its code cell was measured against another SLO: no pooled goodput
                 _recorded(h_p, 80.0, 0.9, slo), _recorded(h_c, 240.0, 0.7, {"ttft_ms": 900.0}),
                 # one attainment unknown: a pooled goodput but no pooled attainment
                 _recorded(u_p, 80.0, None, slo), _recorded(u_c, 240.0, 0.7, slo)]
    got = decide.collect([run], "goodput", slo)
    pooled = (*C1, "*")
    # (80 × 10 + 240 × 30) / 40 = 200 tok/s; attainment by requests, both cells 4 requests
    assert got["values"][pooled] == {"all": [pytest.approx(200.0)],
                                     "unknown": [pytest.approx(200.0)]}
    assert got["attainment"][pooled] == {"all": [pytest.approx(0.8)], "unknown": [None]}


def test_cost_converts_every_priced_arm_and_names_the_unpriced(make_run: Any) -> None:
    free = make_run({"plain": {1: [100.0]}}, run_id="free", price=None)
    gift = make_run({"plain": {1: [100.0]}}, run_id="gift", price=None)
    slow = make_run({"plain": {1: [0.5]}}, run_id="slow", price=3.6)
    got = decide.collect([free, gift, slow], "cost")
    # $3.6/h at 0.5 tok/s: 3.6 / (0.5 × 3600) × 1e6 = $2000 per Mtok
    assert got["values"][(*C1, "prose")] == {"slow/plain": [pytest.approx(2000.0)]}
    assert got["warnings"] == [
        "no pod price, left out of the cost objective: free/plain, gift/plain"]


def test_cost_without_an_slo_asked_is_of_throughput_even_when_cells_recorded_one(
        make_run: Any) -> None:
    run = make_run({"plain": {1: [100.0]}}, price=3.6)
    run.cells = [_recorded(run.cells[0], 50.0, 1.0, {"ttft_ms": 500.0})]
    got = decide.collect([run], "cost")
    assert got["slo"] is None
    assert got["values"][(*C1, "prose")] == {"plain": [pytest.approx(10.0)]}  # 1000 / 100


def test_goodput_without_any_slo_warns_that_it_has_nothing(make_run: Any) -> None:
    got = decide.collect([make_run({"plain": {1: [100.0]}})], "goodput")
    assert got["warnings"] == [
        "no goodput figures: give --slo (with request rows) or measure with --slo"]
    assert not any(got["values"].values())
