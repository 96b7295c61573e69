"""`decide`'s admission limit and its tie order across cards (issue 37 item 10; docs/decide.md):
the speculative lane admits up to the floor of the analysis crossover when that crossover falls
between the last speculative and the first plain band, else up to the last band the speculative
arm wins; a tie goes to plain before speculative whatever the cards cost, then to the cheaper
card. Expected values are worked out by hand in each test."""

from __future__ import annotations

from typing import Any

from tailpod.results import decide
from tailpod.results.analysis import analyze


def compute(runs: list[Any], analyses: list[dict[str, Any]] | None = None,
            **kw: Any) -> dict[str, Any]:
    """decide.compute with the runs' own analyses, as its callers give them, unless given."""
    return decide.compute(runs, analyses=analyses if analyses is not None
                          else [analyze(r) for r in runs], **kw)

# ngram-k2 wins c=1 and c=2 (ranges far apart), plain wins c=4 and c=8
SWEEP = {"plain": {1: [100, 100], 2: [190, 190], 4: [360, 360], 8: [640, 640]},
         "ngram-k2": {1: [180, 180], 2: [300, 300], 4: [300, 300], 8: [300, 300]}}


def _analysis(at: float | None, status: str = "crossover") -> list[dict[str, Any]]:
    cross = [] if at is None else [{"arm": "ngram-k2", "status": status, "concurrency": at}]
    return [{"crossover": cross, "knee": []}]


def test_the_admission_limit_is_the_floor_of_a_crossover_between_the_bands(make_run: Any) -> None:
    # c ≈ 2.83 lies between c=2 (last spec band) and c=4 (first plain band): floor 2, round 3
    dec = compute([make_run(SWEEP)], analyses=_analysis(2 ** 1.5))
    d = dec["deployment"]
    assert d["kind"] == "lanes"
    assert d["admission_limit"] == 2
    assert d["lanes"][0]["maxconn"] == 2
    assert d["admission_basis"] == "analysis crossover c≈2.83 (crossover), floored"
    # 3.9 floors to 3 (above the last spec band's 2): the crossover is what sets it
    assert compute([make_run(SWEEP)], analyses=_analysis(3.9))["deployment"]["admission_limit"] == 3


def test_a_crossover_outside_the_bands_leaves_the_last_spec_band(make_run: Any) -> None:
    basis = "last band the speculative arm wins (c=2)"
    for at in (5.5, 1.5, None):  # past the first plain band, below the last spec band, none
        d = compute([make_run(SWEEP)], analyses=_analysis(at))["deployment"]
        assert (d["admission_limit"], d["admission_basis"]) == (2, basis), at
    # an analysis that found no crossover ("no_data") is not read as one
    d = compute([make_run(SWEEP)], analyses=_analysis(3.9, status="no_data"))["deployment"]
    assert d["admission_limit"] == 2


def test_a_spec_arm_on_a_cheaper_card_tying_plain_on_a_dearer_one_gives_plain(
        make_run: Any) -> None:
    # the spec arm's range [99, 105] overlaps plain's [100, 102], its median (102) higher: a tie
    cheap = make_run({"ngram-k2": {1: [99, 105]}}, run_id="a10", price=0.5)
    dear = make_run({"plain": {1: [100, 102]}}, run_id="h100", price=3.0)
    band = compute([cheap, dear])["bands"][0]
    assert band["best_median_arm"] == "a10/ngram-k2"
    assert band["arm"] == "h100/plain" and band["tie_resolved"] is True
    assert band["tied"] == ["a10/ngram-k2"]


def test_between_two_plain_arms_that_tie_the_cheaper_card_wins(make_run: Any) -> None:
    # the dearer card is ahead by median (103 vs 101) inside the cheaper one's range
    dear = make_run({"plain": {1: [102, 104]}}, run_id="a-h100", price=3.0)
    cheap = make_run({"plain": {1: [99, 103]}}, run_id="b-a10", price=0.5)
    band = compute([dear, cheap])["bands"][0]
    assert band["best_median_arm"] == "a-h100/plain"
    assert band["arm"] == "b-a10/plain" and band["tied"] == ["a-h100/plain"]
    # a card with no price comes after one with a price; the run id ("a-…" first) does not decide
    unpriced = make_run({"plain": {1: [102, 104]}}, run_id="a-h100", price=None)
    assert compute([unpriced, cheap])["bands"][0]["arm"] == "b-a10/plain"


def test_equal_medians_name_the_simplest_as_best_with_no_tie_to_resolve(make_run: Any) -> None:
    # "a-ngram-k2" sorts before "plain" by name; their medians are equal (101): plain, the
    # simplest, is both the best median and the winner
    run = make_run({"a-ngram-k2": {1: [100, 102]}, "plain": {1: [101, 101]}})
    band = compute([run])["bands"][0]
    assert (band["arm"], band["best_median_arm"], band["tie_resolved"]) == ("plain", "plain",
                                                                            False)
    assert band["tied"] == ["a-ngram-k2"]
    assert band["candidates"] == {
        "a-ngram-k2": {"median": 101.0, "min": 100.0, "max": 102.0, "n": 2},
        "plain": {"median": 101.0, "min": 101.0, "max": 101.0, "n": 2}}
