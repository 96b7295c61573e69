"""The statistics every report section shares, at the bottom of results/: a spread over reps and the
ratio of two spreads. Nothing here knows about arms, cells or sections."""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable
from typing import Any


def spread(values: Iterable[float | None]) -> dict[str, Any] | None:
    """Median, min/max and inclusive quartiles of the non-null values; None when there are none."""
    vals = sorted(float(v) for v in values if v is not None and not math.isnan(v))
    if not vals:
        return None
    if len(vals) == 1:
        q1 = q3 = vals[0]
    else:
        q1, _, q3 = statistics.quantiles(vals, n=4, method="inclusive")
    return {
        "n": len(vals),
        "median": statistics.median(vals),
        "min": vals[0],
        "max": vals[-1],
        "q1": q1,
        "q3": q3,
        "iqr": q3 - q1,
        "values": vals,
    }


def ratio_spread(num: dict[str, Any] | None, den: dict[str, Any] | None) -> dict[str, Any] | None:
    """num/den with the widest range the reps allow, and whether the two spreads overlap."""
    if not num or not den or den["median"] == 0 or den["min"] <= 0:
        return None
    return {
        "speedup": num["median"] / den["median"],
        "lo": num["min"] / den["max"],
        "hi": num["max"] / den["min"],
        "overlap": num["max"] >= den["min"] and den["max"] >= num["min"],
    }
