"""Which deployment the band winners make (results/decide.py `_deployment`): lanes from a single
speculative band, a flagged mixed choice over rate and trace bands that names each band as the
tables do, and none when no arm is usable. Worked out by hand (issue 37 item 10)."""

from __future__ import annotations

from typing import Any

from tailpod.results import decide
from tailpod.results.analysis import analyze
from tailpod.results.schema import CellRow

NO_CROSS: dict[str, Any] = {"crossover": [], "knee": []}


def test_a_spec_arm_that_wins_only_the_first_band_still_gets_a_lane(make_run: Any) -> None:
    run = make_run({"plain": {1: [100.0], 2: [300.0], 4: [600.0]},
                    "mtp-k2": {1: [150.0], 2: [200.0], 4: [250.0]}})
    # speedup 1.5 at c=1 and 2/3 at c=2: crossover 2 ** (0.5 / (1.5 - 2/3)) = 2 ** 0.6 = 1.52,
    # floored to 1 (and never below the last band the spec arm wins, c=1)
    d = decide.compute([run], analyses=[analyze(run)])["deployment"]
    assert d["kind"] == "lanes" and d["admission_limit"] == 1
    assert [lane["arm"] for lane in d["lanes"]] == ["mtp-k2", "plain"]


def _at(base: CellRow, arm: str, arrival: dict[str, Any], tok_s: float) -> CellRow:
    return base.model_copy(update={"arm": arm, "arrival": arrival, "output_tok_s": tok_s,
                                   "cell": f"{arm}|{arrival}"})


def test_a_mixed_choice_names_trace_and_rate_bands_as_the_tables_do(make_run: Any) -> None:
    run = make_run({"plain": {1: [1.0]}, "ngram-k2": {1: [1.0]}, "mtp-k3": {1: [1.0]}})
    base = run.cells[0]
    trace = {"process": "trace", "rate": None,
             "trace": {"path": "t.jsonl", "format": "tailpod", "speed": 1.0}}
    cells = [_at(base, "plain", trace, 100.0), _at(base, "ngram-k2", trace, 200.0)]
    # plain ahead at rates 1, 2 and 4; ngram-k2 at rate 8 and on the trace; mtp-k3 at rate 16
    for rate, plain, ngram, mtp in ((1.0, 200.0, 100.0, 50.0), (2.0, 200.0, 100.0, 50.0),
                                    (4.0, 200.0, 100.0, 50.0), (8.0, 100.0, 200.0, 50.0),
                                    (16.0, 100.0, 50.0, 200.0)):
        arrival = {"process": "poisson", "rate": rate}
        cells += [_at(base, "plain", arrival, plain), _at(base, "ngram-k2", arrival, ngram),
                  _at(base, "mtp-k3", arrival, mtp)]
    run.cells = cells
    dec = decide.compute([run], analyses=[NO_CROSS])
    d = dec["deployment"]
    assert (d["kind"], d["arm"], d["k"], d["flag"]) == ("mixed", "plain", 0, "loses some bands")
    # the others in the tie order (smaller K first), each with its bands in load order
    assert d["reason"] == ("plain wins 3 of 6 bands; ngram-k2 wins trace, rate=8; "
                           "mtp-k3 wins rate=16")
    assert ("no single deployment fits every band: the bands do not split into speculative "
            "below and plain above") in dec["warnings"]


def test_no_usable_arm_is_no_deployment(make_run: Any) -> None:
    run = make_run({"mtp-k2": {1: [100.0]}}, void={"mtp-k2": "the token-identity gate failed"})
    dec = decide.compute([run], analyses=[NO_CROSS])
    assert dec["bands"] == [] and dec["warnings"] == []
    assert dec["deployment"] == {"kind": "none", "reason": "no band has a usable arm",
                                 "compared": []}
