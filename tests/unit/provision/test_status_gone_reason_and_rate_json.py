"""The status's words and sums in provision/reconcile.py: why a ghost ended (`gone_reason`) and the
report's JSON (rate now, and unknown when a provider did not answer). Written to kill the mutants
`make mutate` found surviving (docs/testing.md); every expected value is written out from the rule."""

from __future__ import annotations

from typing import Any

import pytest

from tailpod.ledger import PodRecord
from tailpod.provision.reconcile import StatusReport, StatusRow, gone_reason

NO_SWITCH = "ended outside tailpod (deleted by hand or by the provider)"
AT_TTL = "ended, most likely by its dead-man switch at its TTL"


def _record(deadman: Any) -> PodRecord:
    record = PodRecord(run_tag="tp-20260101-000000-rrrrrr", provider="runpod", status="running")
    record.extra.deadman = deadman
    return record


@pytest.mark.parametrize(("deadman", "now", "said"), [
    (None, 100.0, NO_SWITCH),
    ("armed", 100.0, NO_SWITCH),  # not a dict: no switch tailpod knows of
    ({"ttl_at": 100.0}, 100.0, AT_TTL),  # at the TTL exactly
    ({"ttl_at": 50}, 100.0, AT_TTL),
    ({"ttl_at": 1}, 100.0, AT_TTL),  # any positive second is a deadline; only 0 means none
    ({"ttl_at": 100.5, "heartbeat_timeout_s": 600}, 100.0,
     "ended, most likely by its dead-man switch (no heartbeat for 10 min), or deleted outside tailpod"),
    ({"ttl_at": 0, "heartbeat_timeout_s": 90.0}, 100.0,  # 0: armed with no TTL
     "ended, most likely by its dead-man switch (no heartbeat for 2 min), or deleted outside tailpod"),
    ({"ttl_at": "50", "heartbeat_timeout_s": "600"}, 100.0,  # not numbers: not read
     "ended, most likely by its dead-man switch (no heartbeat for its timeout), or deleted outside "
     "tailpod"),
    ({}, 100.0,
     "ended, most likely by its dead-man switch (no heartbeat for its timeout), or deleted outside "
     "tailpod"),
])
def test_a_ghost_says_why_it_most_likely_ended(deadman: Any, now: float, said: str) -> None:
    assert gone_reason(_record(deadman), now) == said


def _row(state: str | None, price: float | None) -> StatusRow:
    return StatusRow(run_tag="t", provider="runpod", pod_id="p", ledger_status="running",
                     provider_state=state, gpu=None, gpu_count=1, price_per_hr=price, uptime_s=None,
                     spend_usd=None, ttl_expires_at=None)


def test_the_rate_now_sums_only_running_pods() -> None:
    report = StatusReport(rows=[_row("running", 1.25), _row("running", None), _row("stopped", 9.0),
                                _row("gone", 4.0), _row("running", 0.1234567)],
                          errors=[], checked_at=0.0, ledger_notices=["n1"])
    out = report.to_json()
    assert out["rate_per_hr_now"] == 1.373457  # 1.25 + 0.1234567, to six places
    assert out["rate_unknown_reason"] is None
    assert out["checked_at"] == "1970-01-01T00:00:00+00:00"
    assert out["errors"] == [] and out["ledger_notices"] == ["n1"]
    assert [r["price_per_hr"] for r in out["rows"]] == [1.25, None, 9.0, 4.0, 0.1234567]


def test_a_provider_that_did_not_answer_makes_the_rate_unknown() -> None:
    report = StatusReport(rows=[_row("running", 1.0)], errors=["runpod: HTTP 503", "vastai: down"],
                          checked_at=0.0)
    out = report.to_json()
    assert out["rate_per_hr_now"] is None
    assert out["rate_unknown_reason"] == "could not ask runpod: HTTP 503; vastai: down"
    assert out["errors"] == ["runpod: HTTP 503", "vastai: down"]
