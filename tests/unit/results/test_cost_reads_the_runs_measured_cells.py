"""What `tailpod cost --run` and `cost --own --run` read from a run's analysis (results/cost.py; issue
37 item 11: the row selection left cli/results.py): an arm's measured curve, the default arm
(plain, else the first usable one), a void arm refused naming the usable ones, and the best
measured cell of the non-void arms under the `--arm` and `--concurrency` filters. The analysis
is written by hand; each expected value is read off it."""

from __future__ import annotations

from typing import Any

import pytest

from tailpod.errors import ConfigError
from tailpod.results.cost import arm_curve, best_measured_cell


def _cell(arm: str, c: int, tok_s: float | None) -> dict[str, Any]:
    return {"arm": arm, "concurrency": c,
            "output_tok_s": {"median": tok_s} if tok_s is not None else None}


AN: dict[str, Any] = {
    "run_id": "r1",
    "arms": [{"label": "ngram-k2", "void": False}, {"label": "plain", "void": False},
             {"label": "mtp-k1", "void": True}],
    "cells": [_cell("plain", 1, 50.0), _cell("plain", 4, 180.0), _cell("plain", 8, None),
              _cell("ngram-k2", 1, 70.0), _cell("ngram-k2", 4, 170.0),
              _cell("mtp-k1", 4, 999.0)],
}


def test_the_default_arm_is_plain_and_its_curve_is_its_measured_medians() -> None:
    assert arm_curve(AN, None) == ({1: 50.0, 4: 180.0}, "plain")  # c=8 measured nothing
    assert arm_curve(AN, "ngram-k2") == ({1: 70.0, 4: 170.0}, "ngram-k2")


def test_without_plain_the_first_usable_arm_is_taken() -> None:
    an = {**AN, "arms": [{"label": "mtp-k1", "void": True}, {"label": "ngram-k2", "void": False}]}
    assert arm_curve(an, None) == ({1: 70.0, 4: 170.0}, "ngram-k2")


@pytest.mark.parametrize("arm", ["mtp-k1", "eagle-k3"])
def test_a_void_or_absent_arm_is_refused_naming_the_usable_ones(arm: str) -> None:
    with pytest.raises(ConfigError) as caught:
        arm_curve(AN, arm)
    assert caught.value.message == f"arm {arm!r} is not a usable (non-void) arm of r1"
    assert caught.value.hint == "choose one of ['ngram-k2', 'plain']"
    assert caught.value.exit_code == 2


def test_a_run_with_no_usable_arm_is_refused() -> None:
    an = {**AN, "arms": [{"label": "mtp-k1", "void": True}]}
    with pytest.raises(ConfigError) as caught:
        arm_curve(an, None)
    assert caught.value.message == "arm None is not a usable (non-void) arm of r1"


def test_the_best_cell_is_the_fastest_of_the_non_void_arms_under_the_filters() -> None:
    assert best_measured_cell(AN, None, None) == _cell("plain", 4, 180.0)  # mtp-k1 is void
    assert best_measured_cell(AN, "ngram-k2", None) == _cell("ngram-k2", 4, 170.0)
    assert best_measured_cell(AN, None, 1) == _cell("ngram-k2", 1, 70.0)
    assert best_measured_cell(AN, "plain", 1) == _cell("plain", 1, 50.0)


@pytest.mark.parametrize(("arm", "concurrency"), [("mtp-k1", None), ("plain", 8), (None, 2)])
def test_no_usable_cell_under_the_filters_is_refused(arm: str | None,
                                                      concurrency: int | None) -> None:
    with pytest.raises(ConfigError) as caught:
        best_measured_cell(AN, arm, concurrency)
    assert caught.value.message == "no usable cell in --run for that --arm/--concurrency"
