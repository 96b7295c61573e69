"""Paired agreement of two measurers over reps: does client A report what client B reports on the
same server, within a tolerance, and can the reps taken say so (issue 42, item 5;
benchmarks/peer_agreement.py, docs/benchmarks.md)?

Each rep r runs both clients back to back on one server, so its two figures form a pair. The
paired difference, relative to the reference client B, is

    d_r = a_r / b_r - 1

Over the n pairs, with mean d̄ and sample standard deviation s (n - 1 in the denominator), the
95% confidence interval of the mean difference is the t-interval

    d̄ ± t(0.975, n - 1) · s / √n

where t(0.975, n - 1) is Student's t quantile (`T_975`, from the NIST/SEMATECH table cited
there). The verdict against a tolerance ±tol: "within" only when the whole interval lies inside
[-tol, tol]; "outside" when it lies wholly outside (above tol or below -tol); otherwise "not
settled", with the number of reps that would settle it if the mean and the spread stayed as
observed: the smallest n whose half-width t(0.975, n - 1) · s / √n is below the distance from d̄
to the nearer edge of the tolerance (none when d̄ sits on an edge).

Pairing removes what both clients share within a rep (the server's state at that moment, the
machine's load); alternating which client goes first from rep to rep lets an order effect cancel in
the mean instead of biasing it.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

# Student's t, upper 2.5% point, by degrees of freedom: NIST/SEMATECH e-Handbook of Statistical
# Methods, 1.3.6.7.2 "Critical Values of the Student's t Distribution", column 0.975
# (https://www.itl.nist.gov/div898/handbook/eda/section3/eda3672.htm).
T_975: dict[int, float] = {
    1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306, 9: 2.262,
    10: 2.228, 11: 2.201, 12: 2.179, 13: 2.160, 14: 2.145, 15: 2.131, 16: 2.120, 17: 2.110,
    18: 2.101, 19: 2.093, 20: 2.086, 21: 2.080, 22: 2.074, 23: 2.069, 24: 2.064, 25: 2.060,
    26: 2.056, 27: 2.052, 28: 2.048, 29: 2.045, 30: 2.042, 40: 2.021, 50: 2.009, 60: 2.000,
    100: 1.984,
}  # fmt: skip
T_975_INF = 1.960  # the table's last row (infinite degrees of freedom)
MAX_REPS_TO_SETTLE = 1000


def t_975(df: int) -> float:
    """t(0.975, df). Between the table's rows above 30 the row of the next smaller df is taken:
    its quantile is the larger, so the interval errs wide, never narrow."""
    if df < 1:
        raise ValueError(f"a t-interval needs at least 1 degree of freedom, got {df}")
    if df in T_975:
        return T_975[df]
    if df > max(T_975):
        return T_975[max(T_975)] if df < 1000 else T_975_INF
    return T_975[max(k for k in T_975 if k < df)]


@dataclass(frozen=True)
class PairedInterval:
    """The paired differences of one metric at one load, and their mean's 95% t-interval (None
    bounds with fewer than two pairs)."""

    diffs: tuple[float, ...]
    mean: float | None
    sd: float | None
    half_width: float | None

    @property
    def n(self) -> int:
        return len(self.diffs)

    @property
    def lo(self) -> float | None:
        return None if self.mean is None or self.half_width is None else self.mean - self.half_width

    @property
    def hi(self) -> float | None:
        return None if self.mean is None or self.half_width is None else self.mean + self.half_width


def relative_diffs(pairs: Sequence[tuple[float | None, float | None]]) -> list[float]:
    """a / b - 1 for each pair (a, b) where both are numbers and b is not zero."""
    return [a / b - 1.0 for a, b in pairs
            if a is not None and b is not None and b != 0 and math.isfinite(a / b)]  # fmt: skip


def paired_interval(diffs: Sequence[float]) -> PairedInterval:
    """Mean, sample standard deviation and 95% t half-width of the paired differences."""
    d = tuple(float(x) for x in diffs)
    if not d:
        return PairedInterval(d, None, None, None)
    mean = statistics.fmean(d)
    if len(d) < 2:
        return PairedInterval(d, mean, None, None)
    sd = statistics.stdev(d)
    return PairedInterval(d, mean, sd, t_975(len(d) - 1) * sd / math.sqrt(len(d)))


def reps_to_settle(mean: float, sd: float, tol: float) -> int | None:
    """The fewest pairs whose interval, at this mean and spread, would lie wholly inside or wholly
    outside ±tol; None when no number up to MAX_REPS_TO_SETTLE would (d̄ on or near an edge)."""
    margin = abs(abs(mean) - tol)
    if margin == 0:
        return None
    for n in range(2, MAX_REPS_TO_SETTLE + 1):
        if t_975(n - 1) * sd / math.sqrt(n) < margin:
            return n
    return None


def verdict(interval: PairedInterval, tol: float) -> str:
    """'within' / 'outside' the tolerance, or 'not settled with N reps' and what would settle it."""
    lo, hi = interval.lo, interval.hi
    if lo is None or hi is None or interval.mean is None or interval.sd is None:
        return f"not settled with {interval.n} rep(s): an interval needs 2 or more"
    if -tol <= lo and hi <= tol:
        return f"within {100 * tol:g}%"
    if lo > tol or hi < -tol:
        return "outside"
    need = reps_to_settle(interval.mean, interval.sd, tol)
    more = (f"about {need} would settle it at the observed spread" if need is not None
            else f"more than {MAX_REPS_TO_SETTLE} would be needed at the observed spread")
    return f"not settled with {interval.n} reps ({more})"
