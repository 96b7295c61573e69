"""Open-loop arrival schedules and SLO maths (docs/agent.md, "probe run": a cell's `arrival`).

A schedule is computed up front from the cell's seed, so it is the same on every run and every
machine: the offsets (seconds from the cell's start) at which each request is due. The load loop
sends each request at its offset whether or not earlier ones have finished (open loop), and its
latencies are also measured from the offset, so a server that falls behind shows its queue in
the figures instead of slowing the client down (no coordinated omission).
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass
from typing import Any

from .common import ProbeError

PROCESSES = ("poisson", "gamma", "constant", "trace")
ARRIVAL_KEYS = ("process", "rate", "burstiness", "seed", "requests", "duration_s", "trace")
SLO_KEYS = ("ttft_ms", "tpot_ms", "e2el_ms")
# A request sent this much later than its scheduled time means the client fell behind.
SCHEDULE_LAG_FLAG_S = 0.010


@dataclass
class Arrival:
    process: str
    rate: float | None  # requests/s; None only for a trace (its own times)
    burstiness: float = 1.0  # gamma shape; 1.0 = Poisson
    seed: int = 0
    requests: int | None = None
    duration_s: float | None = None
    trace: dict[str, Any] | None = None

    def as_json(self) -> dict[str, Any]:
        # rows are strict JSON: an infinite rate is written as the string "inf"
        rate: Any = "inf" if self.rate == math.inf else self.rate
        out: dict[str, Any] = {"process": self.process, "rate": rate,
                               "burstiness": self.burstiness, "seed": self.seed}
        if self.requests is not None:
            out["requests"] = self.requests
        if self.duration_s is not None:
            out["duration_s"] = self.duration_s
        if self.trace is not None:
            out["trace"] = dict(self.trace)
        return out


def _number(raw: Any, what: str) -> float:
    if isinstance(raw, bool) or not isinstance(raw, (int, float)):
        raise ProbeError(f"arrival {what} must be a number, not {raw!r}")
    value = float(raw)
    if not math.isfinite(value) and not (what == "rate" and value == math.inf):
        raise ProbeError(f"arrival {what} must be finite")
    return value


def parse_arrival(raw: Any) -> Arrival:
    """A cell's `arrival` object, checked: unknown keys and impossible values are errors."""
    if not isinstance(raw, dict):
        raise ProbeError("arrival must be an object")
    unknown = sorted(set(raw) - set(ARRIVAL_KEYS))
    if unknown:
        raise ProbeError("unknown arrival key(s): " + ", ".join(unknown))
    process = raw.get("process", "poisson")
    if process not in PROCESSES:
        raise ProbeError(f"arrival process must be one of {', '.join(PROCESSES)}")
    if process == "trace":
        raise ProbeError("arrival process 'trace' is not implemented in this agent yet")
    if raw.get("rate") is None:
        raise ProbeError("arrival rate is required")
    rate = math.inf if raw["rate"] == "inf" else _number(raw["rate"], "rate")
    if rate <= 0:
        raise ProbeError("arrival rate must be > 0 (or inf: all at once)")
    burst = _number(raw.get("burstiness", 1.0), "burstiness")
    if burst <= 0:
        raise ProbeError("arrival burstiness must be > 0")
    seed = raw.get("seed", 0)
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise ProbeError("arrival seed must be an integer")
    requests = raw.get("requests")
    duration = raw.get("duration_s")
    if (requests is None) == (duration is None):
        raise ProbeError("arrival needs exactly one of requests, duration_s")
    if requests is not None and (isinstance(requests, bool) or not isinstance(requests, int)
                                 or requests < 1):
        raise ProbeError("arrival requests must be an integer >= 1")
    if duration is not None:
        duration = _number(duration, "duration_s")
        if duration <= 0:
            raise ProbeError("arrival duration_s must be > 0")
        if rate == math.inf:
            raise ProbeError("arrival rate inf needs requests, not duration_s")
    return Arrival(process, rate, burst, seed, requests, duration)


def schedule(arrival: Arrival) -> list[float]:
    """The offsets (s, from the cell's start; the first is 0) at which each request is due.

    Inter-arrival times: exponential with mean 1/rate (poisson), gamma with shape = burstiness
    and mean 1/rate (gamma; shape 1 is Poisson, < 1 burstier, > 1 smoother), or exactly 1/rate
    (constant). Rate inf sends every request at offset 0. With `duration_s`, the requests due
    before that offset."""
    rate = arrival.rate
    assert rate is not None
    if rate == math.inf:
        return [0.0] * int(arrival.requests or 0)
    rng = random.Random(arrival.seed)
    shape = 1.0 if arrival.process == "poisson" else arrival.burstiness

    def gap() -> float:
        if arrival.process == "constant":
            return 1.0 / rate
        if shape == 1.0:
            return rng.expovariate(rate)
        return rng.gammavariate(shape, 1.0 / (rate * shape))

    out: list[float] = [0.0]
    if arrival.requests is not None:
        while len(out) < arrival.requests:
            out.append(out[-1] + gap())
        return out
    assert arrival.duration_s is not None
    while True:
        nxt = out[-1] + gap()
        if nxt >= arrival.duration_s:
            return out
        out.append(nxt)


def parse_slo(raw: Any) -> dict[str, float] | None:
    """`options.slo`: any subset of ttft_ms, tpot_ms, e2el_ms, each > 0; None when absent."""
    if raw is None:
        return None
    if not isinstance(raw, dict):
        raise ProbeError("slo must be an object")
    unknown = sorted(set(raw) - set(SLO_KEYS))
    if unknown:
        raise ProbeError("unknown slo key(s): " + ", ".join(unknown))
    out: dict[str, float] = {}
    for key in SLO_KEYS:
        if raw.get(key) is None:
            continue
        value = raw[key]
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0 \
                or not math.isfinite(value):
            raise ProbeError(f"slo {key} must be a number > 0")
        out[key] = float(value)
    return out or None


def meets_slo(slo: dict[str, float], ttft_s: float | None, tpot_s: float | None,
              e2e_s: float | None, ok: bool) -> bool:
    """Does one request meet every target? A failed request never does; a target whose figure
    the request lacks (no first token; a one-token answer has no TPOT) fails only for TTFT and
    end-to-end (a missing TPOT is not held against it, as in vLLM's goodput)."""
    if not ok:
        return False
    if "ttft_ms" in slo and (ttft_s is None or ttft_s * 1000.0 > slo["ttft_ms"]):
        return False
    if "e2el_ms" in slo and (e2e_s is None or e2e_s * 1000.0 > slo["e2el_ms"]):
        return False
    return not ("tpot_ms" in slo and tpot_s is not None and tpot_s * 1000.0 > slo["tpot_ms"])
