"""The paired agreement's statistics (tailpod/results/agreement.py), against small cases worked by
hand: t quantiles from the NIST/SEMATECH table, 1.3.6.7.2
(https://www.itl.nist.gov/div898/handbook/eda/section3/eda3672.htm), column 0.975."""

from __future__ import annotations

import pytest

from tailpod.results.agreement import (
    paired_interval,
    relative_diffs,
    reps_to_settle,
    t_975,
    verdict,
)


def test_three_pairs_straddling_the_edge_are_not_settled_and_seven_would_settle_them() -> None:
    # d = 1%, 3%, 2%: mean 2%; deviations -1, +1, 0 (%) -> s^2 = 2e-4 / 2 -> s = 1%;
    # se = 1% / sqrt(3) = 0.57735%; t(0.975, 2) = 4.303 -> half-width 2.48434%.
    iv = paired_interval([0.01, 0.03, 0.02])
    assert iv.n == 3
    assert iv.mean == pytest.approx(0.02)
    assert iv.sd == pytest.approx(0.01)
    assert iv.half_width == pytest.approx(0.0248434, abs=1e-6)
    assert iv.lo == pytest.approx(-0.0048434, abs=1e-6)
    assert iv.hi == pytest.approx(0.0448434, abs=1e-6)
    # the interval reaches past +3%: not settled. At s = 1% the margin to the edge is 1%, so the
    # half-width t(n-1) * 1% / sqrt(n) must fall below 1%: t(n-1) < sqrt(n). n = 6: 2.571 > 2.449;
    # n = 7: 2.447 < 2.646.
    assert reps_to_settle(0.02, 0.01, 0.03) == 7
    assert verdict(iv, 0.03) == (
        "not settled with 3 reps (about 7 would settle it at the observed spread)")


def test_five_pairs_whose_interval_lies_inside_three_percent_are_within() -> None:
    # d = 1, -1, 0, 2, 0 (%): mean 0.4%; squared deviations 36+196+16+256+16 = 520 (1e-6)
    # -> s^2 = 130e-6, s = 1.14018%; se = s / sqrt(5) = 0.50990%; t(0.975, 4) = 2.776
    # -> half-width 1.41548%: [-1.01548%, +1.81548%], inside +-3%.
    iv = paired_interval([0.01, -0.01, 0.0, 0.02, 0.0])
    assert iv.mean == pytest.approx(0.004)
    assert iv.half_width == pytest.approx(0.0141548, abs=1e-6)
    assert verdict(iv, 0.03) == "within 3%"


def test_an_interval_wholly_below_minus_three_percent_is_outside() -> None:
    # d = -10, -12, -8 (%): mean -10%, s = 2%, half-width 4.303 * 2% / sqrt(3) = 4.9687%
    # -> [-14.97%, -5.03%], wholly below -3%.
    iv = paired_interval([-0.10, -0.12, -0.08])
    assert iv.hi == pytest.approx(-0.050313, abs=1e-6)
    assert verdict(iv, 0.03) == "outside"


def test_an_interval_that_also_holds_the_edge_from_outside_is_not_outside() -> None:
    # d = 4%, 6%: mean 5%, s = 1.41421%, half-width 12.706 * 1% = 12.706%: [-7.7%, +17.7%].
    iv = paired_interval([0.04, 0.06])
    assert iv.lo == pytest.approx(-0.07706, abs=1e-5)
    assert verdict(iv, 0.03).startswith("not settled with 2 reps")


def test_one_pair_has_no_interval_and_a_mean_on_the_edge_is_never_settled() -> None:
    assert paired_interval([0.01]).half_width is None
    assert verdict(paired_interval([0.01]), 0.03).startswith("not settled with 1 rep(s)")
    assert paired_interval([]).mean is None
    assert reps_to_settle(0.03, 0.01, 0.03) is None
    assert "more than 1000" in verdict(paired_interval([0.02, 0.04]), 0.03)


def test_t_quantiles_off_the_table_take_the_wider_row() -> None:
    assert t_975(4) == 2.776
    assert t_975(35) == 2.042  # between rows 30 and 40: row 30's, the larger
    assert t_975(5000) == 1.960
    with pytest.raises(ValueError):
        t_975(0)


def test_relative_differences_are_a_over_b_minus_one_and_skip_missing_values() -> None:
    diffs = relative_diffs([(103.0, 100.0), (None, 100.0), (90.0, 0.0), (45.0, 50.0)])
    assert diffs == pytest.approx([0.03, -0.10])
