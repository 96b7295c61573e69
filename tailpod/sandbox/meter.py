"""A per-second billing meter for the sandbox cloud.

Every resource carries a list of rate segments (USD per hour from time t). The rate changes when a
pod starts, stops or is destroyed; accrued money is the integral of the rate over time. Tests read
the meter to assert that nothing is left billing after a scenario.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import Any


@dataclass
class MeteredResource:
    provider: str
    resource_id: str
    name: str
    account: str
    # (start time, USD per hour, what is billed) — the last segment is the current one.
    segments: list[tuple[float, float, str]] = field(default_factory=list)
    closed_at: float | None = None

    def current_rate(self) -> float:
        if self.closed_at is not None or not self.segments:
            return 0.0
        return self.segments[-1][1]

    def current_what(self) -> str:
        if self.closed_at is not None or not self.segments:
            return "nothing"
        return self.segments[-1][2]

    def accrued_until(self, t: float) -> float:
        """What had accrued by time `t` (for a time bucket's bounds)."""
        total = 0.0
        for i, (start, rate, _what) in enumerate(self.segments):
            end = self.segments[i + 1][0] if i + 1 < len(self.segments) else (
                self.closed_at if self.closed_at is not None else t)
            total += max(0.0, min(end, t) - start) * rate / 3600.0
        return total

    def accrued(self, now: float) -> float:
        total = 0.0
        for i, (start, rate, _what) in enumerate(self.segments):
            end = self.segments[i + 1][0] if i + 1 < len(self.segments) else (self.closed_at or now)
            total += max(0.0, end - start) * rate / 3600.0
        return total


class BillingMeter:
    """The truth (`accrued`, per second) and what a vendor's meter shows (`reported`): with
    `lag_s` > 0 the shown figures are those of the last update, published every `lag_s` seconds
    (no vendor documents its update interval; first contact measures RunPod's)."""

    def __init__(self, clock: Any = time.time, lag_s: float = 0.0) -> None:
        self._clock = clock
        self.lag_s = lag_s
        self._lock = threading.Lock()
        self._resources: dict[tuple[str, str], MeteredResource] = {}

    def open(
        self, provider: str, resource_id: str, name: str, account: str, rate: float, what: str
    ) -> None:
        with self._lock:
            res = MeteredResource(provider, resource_id, name, account)
            res.segments.append((self._clock(), rate, what))
            self._resources[(provider, resource_id)] = res

    def set_rate(self, provider: str, resource_id: str, rate: float, what: str) -> None:
        with self._lock:
            res = self._resources.get((provider, resource_id))
            if res is None or res.closed_at is not None:
                return
            res.segments.append((self._clock(), rate, what))

    def close(self, provider: str, resource_id: str) -> None:
        with self._lock:
            res = self._resources.get((provider, resource_id))
            if res is not None and res.closed_at is None:
                res.closed_at = self._clock()

    def rate(self, provider: str, resource_id: str) -> float:
        with self._lock:
            res = self._resources.get((provider, resource_id))
            return res.current_rate() if res else 0.0

    def accrued(
        self,
        provider: str | None = None,
        resource_id: str | None = None,
        account: str | None = None,
    ) -> float:
        return self._accrued_at(self._clock(), provider, resource_id, account)

    def reported(
        self,
        provider: str | None = None,
        resource_id: str | None = None,
        account: str | None = None,
    ) -> float:
        """What the vendor's meter shows now: the accrual as of its last update."""
        now = self._clock()
        if self.lag_s > 0:
            now = (now // self.lag_s) * self.lag_s
        return self._accrued_at(now, provider, resource_id, account)

    def _accrued_at(self, now: float, provider: str | None, resource_id: str | None,
                    account: str | None) -> float:
        """The accrual as of `now` of the resources that match each filter given (None: any)."""
        with self._lock:
            return sum(
                r.accrued(now)
                for r in self._resources.values()
                if (provider is None or r.provider == provider)
                and (resource_id is None or r.resource_id == resource_id)
                and (account is None or r.account == account)
            )

    def reported_between(self, provider: str, resource_id: str, start: float,
                         end: float) -> float:
        """What the vendor's meter shows now as accrued in [start, end): the accrual as of its
        last update, cut to the bucket (RunPod's billing records, one per time bucket)."""
        now = self._clock()
        if self.lag_s > 0:
            now = (now // self.lag_s) * self.lag_s
        end = min(end, now)
        with self._lock:
            res = self._resources.get((provider, resource_id))
            if res is None or end <= start:
                return 0.0
            return max(0.0, res.accrued_until(end) - res.accrued_until(start))

    def spend_rate(self, provider: str, account: str) -> float:
        with self._lock:
            return sum(
                r.current_rate()
                for r in self._resources.values()
                if r.provider == provider and r.account == account
            )

    def snapshot(self) -> dict[str, Any]:
        """What bills now and what everything has cost so far (the admin endpoint's payload)."""
        now = self._clock()
        with self._lock:
            rows: list[dict[str, Any]] = [
                {
                    "provider": r.provider,
                    "id": r.resource_id,
                    "name": r.name,
                    "billing": r.current_rate() > 0,
                    "billing_what": r.current_what(),
                    "rate_per_hr": round(r.current_rate(), 6),
                    "accrued_usd": round(r.accrued(now), 8),
                    "closed": r.closed_at is not None,
                }
                for r in self._resources.values()
            ]
        billing = [row for row in rows if row["billing"]]
        return {
            "at": now,
            "billing_count": len(billing),
            "billing_now": billing,
            "resources": rows,
            "total_accrued_usd": round(sum(row["accrued_usd"] for row in rows), 8),
            "rate_per_hr_now": round(sum(row["rate_per_hr"] for row in billing), 6),
        }
