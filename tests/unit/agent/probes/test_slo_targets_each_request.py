"""The SLO maths per request and per cell (issue 37 item 10; agent/probes/arrival.py `meets_slo`,
rows.py `slo_fields`, docs/probe.md): a request meets the SLO when it succeeded and each target
holds, at the target itself included; a missing first token or end-to-end time fails its target,
a missing TPOT (a one-token answer) is not held against it, as in vLLM's goodput. In an open loop
TTFT and end-to-end count from the scheduled send time, so a request the client sent late can
miss a target its own latency met. Every expected value is worked out by hand."""

from __future__ import annotations

import pytest

from tailpod.agent.probes import stream
from tailpod.agent.probes.arrival import meets_slo
from tailpod.agent.probes.rows import slo_fields

ALL = {"ttft_ms": 200.0, "tpot_ms": 20.0, "e2el_ms": 1000.0}


@pytest.mark.parametrize(("slo", "ttft", "tpot", "e2e", "ok", "met"), [
    (ALL, 0.2, 0.02, 1.0, True, True),  # each figure exactly at its target
    (ALL, 0.2001, 0.02, 1.0, True, False),  # TTFT over
    (ALL, 0.2, 0.0201, 1.0, True, False),  # TPOT over
    (ALL, 0.2, 0.02, 1.0001, True, False),  # end-to-end over
    (ALL, 0.1, 0.01, 0.5, False, False),  # failed: never met, however fast
    (ALL, None, 0.01, 0.5, True, False),  # no first token
    (ALL, 0.1, 0.01, None, True, False),  # no end-to-end time
    (ALL, 0.1, None, 0.5, True, True),  # one token: no TPOT, not held against it
    ({"tpot_ms": 20.0}, None, 0.01, None, True, True),  # only TPOT asked: the rest is not read
    ({"e2el_ms": 1000.0}, 5.0, 1.0, 0.9, True, True),  # only end-to-end asked
    ({"ttft_ms": 200.0}, 0.1, 9.0, 99.0, True, True),  # only TTFT asked
])
def test_a_request_meets_each_target_at_the_target_included(
        slo: dict[str, float], ttft: float | None, tpot: float | None, e2e: float | None,
        ok: bool, met: bool) -> None:
    assert meets_slo(slo, ttft, tpot, e2e, ok) is met


def _req(ttft: float, e2e: float, lag: float | None = None, tokens: int = 10
         ) -> stream.RequestResult:
    r = stream.RequestResult(
        index=0, cache="cold", ok=True, error=None, prompt_tokens=5, completion_tokens=tokens,
        ttft_s=ttft, e2e_s=e2e, decode_tok_s=9.0, tpot_s=0.01, chunks=10, chunk_gap_p50_s=0.1,
        chunk_gap_max_s=0.2, t_start=0.0, t_send_perf=100.0 + (lag or 0.0))
    r.t_sched_perf = None if lag is None else 100.0
    return r


def test_an_open_loop_counts_latency_from_the_scheduled_send() -> None:
    slo = {"ttft_ms": 200.0, "e2el_ms": 1000.0}
    # both answered in 0.15 s TTFT / 0.95 s end to end; the second went out 0.1 s late
    on_time, late = _req(0.15, 0.95, lag=0.0), _req(0.15, 0.95, lag=0.1, tokens=20)
    got = slo_fields([on_time, late], wall=4.0, slo=slo, percentile_target=None)
    # the late one waited 0.25 s for its first token from its schedule: over 200 ms
    assert got["slo_attainment"] == pytest.approx(0.5)
    assert got["goodput_rps"] == pytest.approx(1 / 4.0)
    assert got["goodput_tok_s"] == pytest.approx(10 / 4.0)
    # end to end from the schedule: 0.95 + 0.1 = 1.05 s > 1 s, even with a loose TTFT target
    got = slo_fields([late], wall=4.0, slo={"ttft_ms": 500.0, "e2el_ms": 1000.0},
                     percentile_target=None)
    assert got["slo_attainment"] == 0.0
    # a closed loop (no schedule) reads the request's own latencies
    closed = _req(0.15, 0.95)
    assert slo_fields([closed], 4.0, slo, None)["slo_attainment"] == 1.0


def test_no_slo_no_requests_and_no_wall() -> None:
    assert slo_fields([_req(0.1, 0.5)], 4.0, None, 90.0) == {}
    empty = slo_fields([], 4.0, {"ttft_ms": 200.0}, 90.0)
    assert empty["slo_attainment"] is None and empty["slo_met"] is False
    assert empty["goodput_rps"] == 0.0 and empty["goodput_tok_s"] == 0.0
    no_wall = slo_fields([_req(0.1, 0.5)], 0.0, {"ttft_ms": 200.0}, 90.0)
    assert no_wall["slo_attainment"] == 1.0 and no_wall["slo_met"] is True
    assert no_wall["goodput_rps"] == 0.0 and no_wall["goodput_tok_s"] == 0.0
    assert no_wall["slo"] == {"ttft_ms": 200.0} and no_wall["slo_percentile"] == 90.0


def test_goodput_over_a_short_wall_with_tpot_and_unknown_token_counts() -> None:
    fast, slow = _req(0.1, 0.5), _req(0.1, 0.5, tokens=30)
    slow.tpot_s = 0.05  # 50 ms per token: over a 20 ms TPOT target
    unknown = _req(0.1, 0.5)
    unknown.completion_tokens = None  # no usage counts: met, but no tokens to count
    got = slo_fields([fast, slow, unknown], wall=0.5, slo={"tpot_ms": 20.0},
                     percentile_target=60.0)
    assert got["slo_attainment"] == pytest.approx(2 / 3)
    assert got["slo_met"] is True  # 66.7 % ≥ 60 %
    assert got["goodput_rps"] == pytest.approx(2 / 0.5)
    assert got["goodput_tok_s"] == pytest.approx(10 / 0.5)  # the unknown one adds no tokens


def test_a_late_send_alone_can_miss_a_ttft_target() -> None:
    # 0.15 s to the first token, sent 0.1 s behind schedule: 0.25 s from the schedule
    late = _req(0.15, 0.95, lag=0.1)
    assert slo_fields([late], 4.0, {"ttft_ms": 200.0}, None)["slo_attainment"] == 0.0
    assert slo_fields([late], 4.0, {"ttft_ms": 250.0}, None)["slo_attainment"] == 1.0
