"""The statistics every report section shares, at the bottom of results/: a spread over reps and the
ratio of two spreads. Nothing here knows about arms, cells or sections."""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable
from typing import Any

from tailpod.agent.probes.metrics import percentile


def spread(values: Iterable[float | None]) -> dict[str, Any] | None:
    """Median, min/max and inclusive quartiles of the non-null values; None when there are none."""
    vals = sorted(float(v) for v in values if v is not None and not math.isnan(v))
    if not vals:
        return None
    # The probe's percentile (numpy's linear method, = statistics' "inclusive"): one quantile rule.
    q1, q3 = percentile(vals, 25), percentile(vals, 75)
    assert q1 is not None and q3 is not None
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
        "n": min(int(num.get("n", 0)), int(den.get("n", 0))),  # reps behind the fewer side
    }


def usd_per_mtok(usd_per_hr: float, tok_s: float) -> float:
    """Dollars per million output tokens at `tok_s` on a card billed `usd_per_hr` (tok_s > 0)."""
    return usd_per_hr / (tok_s * 3600.0) * 1e6
