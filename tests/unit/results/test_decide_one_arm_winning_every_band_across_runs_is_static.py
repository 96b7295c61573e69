"""`decide RUN RUN-2` where the same arm (one engine, card, method and K) wins every band of both
runs deploys it statically and says it wins every band: it said "ngram-k2, flagged … wins 2 of 4
bands" and warned that no single deployment fits every band (newcomer pass), because each run's
arm is keyed by its run. The same arm label on another card is another deployment, still mixed."""

from __future__ import annotations

from typing import Any

from tailpod.results import decide
from tailpod.results.analysis import analyze
from tailpod.results.io import Run
from tests.helpers.run_builder import build_run

# ngram-k2's every rep beats all of plain's at every load of both runs
LOW = {"plain": {1: [100.0, 101.0], 2: [180.0, 181.0]},
       "ngram-k2": {1: [150.0, 151.0], 2: [250.0, 251.0]}}
HIGH = {"plain": {4: [300.0, 301.0], 8: [380.0, 381.0]},
        "ngram-k2": {4: [400.0, 401.0], 8: [450.0, 451.0]}}


def _decide(*runs: Run) -> dict[str, Any]:
    return decide.compute(list(runs), analyses=[analyze(r) for r in runs])


def test_the_same_arm_winning_every_band_of_two_runs_is_a_static_deployment() -> None:
    dec = _decide(build_run(LOW, run_id="run-a"), build_run(HIGH, run_id="run-b"))
    pooled = [b["arm"] for b in dec["bands"] if b["prompt_class"] == decide.POOLED]
    assert pooled == ["run-a/ngram-k2"] * 2 + ["run-b/ngram-k2"] * 2
    d = dec["deployment"]
    assert d["kind"] == "static" and d["arm"] == "ngram-k2" and d["k"] == 2
    assert d["reason"] == "wins every band (in run-a, run-b)"
    assert not any("no single deployment" in w for w in dec["warnings"])
    text = "\n".join(decide.render(dec))
    assert "**Deployment: static ngram-k2** (wins every band (in run-a, run-b))." in text
    assert "flagged" not in text


def test_the_same_arm_label_on_two_cards_is_still_two_deployments() -> None:
    low, high = build_run(LOW, run_id="run-a"), build_run(HIGH, run_id="run-b")
    low.meta.pod.gpu, high.meta.pod.gpu = "RTX 4090", "H100"
    d = _decide(low, high)["deployment"]
    assert d["kind"] == "mixed"
