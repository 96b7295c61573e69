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


# --- void where evidence is thin (docs/results.md, "Void where evidence is thin") ----------------

# A per-request decode speed is (tokens - 1) / (last chunk - first chunk). It measures decoding only
# when the tokens came in several reads spread over a span well above the gap between two reads of
# one burst: two chunks 0.16 ms apart gave 193,750 tok/s (newcomer 2.19). Below these it is void.
MIN_DECODE_CHUNKS = 3  # the first token's chunk and at least two more reads
MIN_DECODE_SPAN_S = 0.001  # 1 ms, about six times that burst gap


def percentile_min_n(q: float) -> int:
    """The fewest values a q-th percentile is quoted from: enough that at least one value lies at
    or above it, ceil(100 / (100 - q)): 2 for a p50, 10 for a p90, 100 for a p99."""
    return math.ceil(100.0 / (100.0 - q) - 1e-9)


def thin_percentile(q: float, n: int) -> str | None:
    """Why a q-th percentile of n values is void, or None when n is enough."""
    need = percentile_min_n(q)
    return None if n >= need else (f"p{q:g} of {n} requests; a p{q:g} needs at least {need}")


def thin_decode(chunks: int, completion_tokens: int | None, decode_tok_s: float) -> str | None:
    """Why one request's decode speed is void (too few chunks, or too short a span), or None.
    `chunks` 0 means the row does not say (an old or constructed row): only the span is judged."""
    span = (completion_tokens - 1) / decode_tok_s if completion_tokens and decode_tok_s > 0 \
        else None
    few = 0 < chunks < MIN_DECODE_CHUNKS
    short = span is not None and span < MIN_DECODE_SPAN_S
    if not few and not short:
        return None
    over = f"over {span * 1e3:.2g} ms" if span is not None else "over an unknown span"
    return (f"{chunks} chunks {over} (a decode speed needs >= {MIN_DECODE_CHUNKS} chunks over "
            f">= {MIN_DECODE_SPAN_S * 1e3:g} ms); recorded {decode_tok_s:,.0f} tok/s")
