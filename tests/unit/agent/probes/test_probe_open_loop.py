"""Open-loop cells (docs/agent.md, "probe run": `arrival`): the schedule, the rows, the SLO
figures, and the ground truth of a service-time synthetic server against M/D/1 queueing."""

from __future__ import annotations

import math
import random
from pathlib import Path
from typing import Any

import pytest

from tailpod.agent.probes.arrival import Arrival, parse_arrival, schedule
from tailpod.agent.probes.basics import ProbeError

from .conftest import call_agent, probe_run


def _cell(arrival: dict[str, Any], concurrency: int | None = None) -> dict[str, Any]:
    return {"arm": "a", "rep": 0, "prompt_class": "t", "concurrency": concurrency,
            "arrival": arrival}


def test_poisson_schedule_is_seeded_expovariate_gaps() -> None:
    # Independently: the same generator drawn by hand.
    rng = random.Random(7)
    expected = [0.0]
    for _ in range(4):
        expected.append(expected[-1] + rng.expovariate(5.0))
    got = schedule(parse_arrival({"process": "poisson", "rate": 5, "seed": 7, "requests": 5}))
    assert got == pytest.approx(expected)
    assert got == schedule(Arrival("poisson", 5.0, 1.0, 7, 5))  # deterministic


def test_gamma_schedule_has_the_rate_and_burstiness_asked_for() -> None:
    offs = schedule(parse_arrival({"process": "gamma", "rate": 10, "burstiness": 0.25,
                                   "seed": 1, "requests": 20001}))
    gaps = [b - a for a, b in zip(offs, offs[1:], strict=False)]
    mean = sum(gaps) / len(gaps)
    var = sum((g - mean) ** 2 for g in gaps) / len(gaps)
    assert mean == pytest.approx(0.1, rel=0.05)
    # gamma(shape k): squared coefficient of variation 1/k = 4
    assert var / mean**2 == pytest.approx(4.0, rel=0.15)


def test_constant_duration_and_inf_schedules() -> None:
    assert schedule(parse_arrival({"process": "constant", "rate": 4, "duration_s": 1.0})) \
        == pytest.approx([0.0, 0.25, 0.5, 0.75])
    assert schedule(parse_arrival({"process": "poisson", "rate": math.inf, "requests": 3})) \
        == [0.0, 0.0, 0.0]


@pytest.mark.parametrize("bad", [
    {"process": "poisson", "rate": 1},  # neither requests nor duration
    {"process": "poisson", "rate": 1, "requests": 2, "duration_s": 1},
    {"process": "poisson", "rate": 0, "requests": 2},
    {"process": "uniform", "rate": 1, "requests": 2},
    {"process": "gamma", "rate": 1, "burstiness": 0, "requests": 2},
    {"process": "poisson", "rate": 1, "requests": 2, "sede": 1},
])
def test_bad_arrivals_are_refused(bad: dict[str, Any]) -> None:
    with pytest.raises(ProbeError):
        parse_arrival(bad)


def test_bad_arrival_is_a_usage_error_before_any_request(synthetic: Any,
                                                         prompt_dir: Any) -> None:
    server = synthetic()
    code, env = call_agent("probe run", {
        "options": {"base_url": server.base_url, "prompts_dir": str(prompt_dir("hi"))},
        "cells": [_cell({"process": "poisson", "rate": -1, "requests": 2})]})
    assert code != 0 and env["error"]["kind"] == "usage"
    assert server.stats.requests == 0


def test_open_loop_rows_carry_schedule_and_slo_figures(synthetic: Any, prompt_dir: Any,
                                                       tmp_path: Path) -> None:
    # 20 ms per request on one slot, constant arrivals every 10 ms: the queue grows by 10 ms a
    # request, which only latency measured from the schedule shows.
    server = synthetic(slots=1, ttft_s=0.02, fixed_tokens=1)
    rows = probe_run({"base_url": server.base_url, "prompts_dir": str(prompt_dir("hi")),
                      "max_tokens": 1, "warmup": 0, "run_id": "r",
                      "slo": {"ttft_ms": 60}, "slo_percentile": 50},
                     [_cell({"process": "constant", "rate": 100, "requests": 10})])
    reqs = sorted((r for r in rows if r["kind"] == "request"), key=lambda r: r["index"])
    cell = rows[-1]
    assert cell["kind"] == "cell" and len(reqs) == 10 and all(r["ok"] for r in reqs)
    for r in reqs:
        assert r["sent_at"] == r["t_start"] and r["sent_at"] >= r["scheduled_at"]
        assert r["ttft_sched_s"] >= r["ttft_s"]
    gaps = [b["scheduled_at"] - a["scheduled_at"] for a, b in zip(reqs, reqs[1:], strict=False)]
    assert gaps == pytest.approx([0.01] * 9, abs=1e-3)
    # request i starts service at 20 ms * i, arrives at 10 ms * i: TTFT from schedule
    # = 20 ms * (i + 1) - 10 ms * i = 10 ms * i + 20 ms (lower bounds only for time).
    for i, r in enumerate(reqs):
        assert r["ttft_sched_s"] >= 0.010 * i + 0.020 - 0.002
    # ...and 110 ms for the last, well under 200 ms plus the stalls this run measured of the
    # probe's loop and of the server's timers (both count in a TTFT from the schedule)
    assert reqs[-1]["ttft_sched_s"] < 0.2 + cell["loop_lag_max_s"] + server.stats.max_lag_s
    met = sum(1 for r in reqs if r["ttft_sched_s"] * 1000 <= 60)
    assert cell["slo_attainment"] == pytest.approx(met / 10)
    assert cell["slo_met"] is (met / 10 * 100 >= 50)
    assert cell["goodput_rps"] == pytest.approx(met / cell["wall_s"])
    assert cell["goodput_tok_s"] == pytest.approx(met / cell["wall_s"])  # one token each
    assert cell["offered_rate_rps"] == 100 and cell["arrival"]["process"] == "constant"
    assert cell["achieved_rate_rps"] == pytest.approx(10 / cell["wall_s"])
    assert cell["concurrency"] == 0 and cell["cell"] == "a|rate100.0|r0|t"
    assert cell["schedule_lag_max_s"] is not None and cell["schedule_lag_max_s"] >= 0


def test_in_flight_cap_delays_sends_and_counts_the_wait(synthetic: Any, prompt_dir: Any) -> None:
    server = synthetic(ttft_s=0.05, fixed_tokens=1)  # no slots: the server never queues
    rows = probe_run({"base_url": server.base_url, "prompts_dir": str(prompt_dir("hi")),
                      "max_tokens": 1, "warmup": 0},
                     [_cell({"process": "poisson", "rate": "inf", "requests": 4}, 1)])
    reqs = sorted((r for r in rows if r["kind"] == "request"), key=lambda r: r["index"])
    # all due at once, one in flight: the k-th waits for k answers of >= 50 ms each
    for k, r in enumerate(reqs):
        assert r["sent_at"] - r["scheduled_at"] >= 0.05 * k - 0.002
        assert r["ttft_sched_s"] >= 0.05 * (k + 1) - 0.002
    assert rows[-1]["concurrency"] == 1 and rows[-1]["offered_rate_rps"] is None
    assert rows[-1]["arrival"]["rate"] == "inf" and rows[-1]["cell"] == "a|rateinf|c1|r0|t"


def _md1_finishes(offsets: list[float], service: float) -> list[float]:
    """When each request of a FIFO single server with a fixed service time ends, by Lindley's
    recursion on these arrival times (exact for this sample), in their order."""
    free = 0.0
    ends = []
    for a in offsets:
        free = max(a, free) + service
        ends.append(free)
    return ends


def _md1_wait_on(offsets: list[float], service: float) -> float:
    """Mean wait in that queue on these arrival times."""
    ends = _md1_finishes(offsets, service)
    return sum(e - service - a for e, a in zip(ends, offsets, strict=True)) / len(offsets)


def test_poisson_at_70_percent_load_matches_md1_and_the_closed_loop_reports_less(
    synthetic: Any, prompt_dir: Any
) -> None:
    service, rho, n, seed = 0.02, 0.7, 800, 0  # ~23 s
    rate = rho / service
    offsets = schedule(Arrival("poisson", rate, 1.0, seed, n))
    # M/D/1 (Pollaczek-Khinchine with zero service variance): Wq = rho / (2 mu (1 - rho)); this
    # seed's sample of the schedule is within 5% of it (no clock involved).
    theory = rho * service / (2 * (1 - rho)) + service
    sample = _md1_wait_on(offsets, service) + service
    assert sample == pytest.approx(theory, rel=0.05), (sample, theory)
    server = synthetic(slots=1, ttft_s=service, fixed_tokens=1)
    server.reset_stats()
    rows = probe_run({"base_url": server.base_url, "prompts_dir": str(prompt_dir("hi")),
                      "max_tokens": 1, "warmup": 0},
                     [_cell({"process": "poisson", "rate": rate, "seed": seed, "requests": n})])
    cell, open_stats = rows[-1], server.stats
    reqs = sorted((r for r in rows if r["kind"] == "request"), key=lambda r: r["index"])
    assert cell["failed"] == 0 and cell["requests"] == n == len(reqs)
    # Client, server and the other tests share two loaded cores, so requests go out late (the
    # row's sent_at - scheduled_at) and answers come late. What the queue owes each request
    # is computed from when it really went out: Lindley on the actual sends, from its schedule.
    lateness = [r["sent_at"] - r["scheduled_at"] for r in reqs]
    sends = [a + late for a, late in zip(offsets, lateness, strict=True)]
    owed = [end - a for end, a in zip(_md1_finishes(sends, service), offsets, strict=True)]
    # Lateness only ever adds: every request waited at least what the queue owed it, from its
    # schedule (a TTFT from the send, or a server without its queue, falls below it).
    short = [(r["index"], r["ttft_sched_s"], o) for r, o in zip(reqs, owed, strict=True)
             if r["ttft_sched_s"] < o - 1e-3]
    assert not short, short[:5]
    # ...and on average at most what this run measured of its own delays on top: the answers'
    # way back (the client's TTFT from the send minus the server's from the arrival, a mean),
    # the server's worst lateness behind its schedule, the client's worst loop stall, 1 ms.
    measured = cell["ttft_sched_mean_s"]
    owed_mean = sum(owed) / n
    way_back = sum(r["ttft_s"] for r in reqs) / n - sum(open_stats.ttft_s) / n
    slack = way_back + open_stats.max_lag_s + cell["loop_lag_max_s"] + 1e-3
    assert owed_mean <= measured <= owed_mean + slack, (measured, owed_mean, slack, sample)
    # From the send instead of the schedule the open loop still sees the server's queue (the
    # server's own record of the waits for its slot, on its clock: most requests queued)...
    send_based = [r["ttft_s"] for r in reqs]
    assert sum(send_based) / n > service * 1.5
    assert len(open_stats.queue_waits_s) == n
    assert sum(w > 0 for w in open_stats.queue_waits_s) > n / 2  # M/D/1: a share rho waits
    # ...but a closed loop of one worker never queues at all: each request is sent after the
    # last one's answer, so the server's record shows no wait, however late the client runs;
    # and it reports less.
    server.reset_stats()
    closed = probe_run({"base_url": server.base_url, "prompts_dir": str(prompt_dir("hi")),
                        "max_tokens": 1, "warmup": 0, "requests_per_cell": 100},
                       [{"arm": "a", "rep": 0, "prompt_class": "t", "concurrency": 1}])[-1]
    assert server.stats.queue_waits_s == [0.0] * 100
    assert closed["ttft_p50_s"] < measured
    assert "ttft_sched_mean_s" not in closed and "arrival" not in closed
    print(f"M/D/1 rho={rho}: measured {measured:.5f} s, owed by the sends {owed_mean:.5f} s "
          f"(+ up to {slack:.5f} s of measured delays), theory {theory:.5f} s, this sample "
          f"{sample:.5f} s, closed loop p50 {closed['ttft_p50_s']:.5f} s at "
          f"{closed['requests'] / closed['wall_s']:.1f} req/s vs {cell['achieved_rate_rps']:.1f}")


def test_an_open_loop_cell_warms_the_engine_with_a_concurrent_burst(
        synthetic: Any, prompt_dir: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """After its one-at-a-time warm-up, an open-loop cell sends min(8, requests) salted requests
    at once (the engine's batched paths), never counted; a closed-loop cell does not."""
    from tailpod.agent.probes import load

    calls: list[tuple[int, int]] = []
    real = load.TRANSPORTS["asyncio"]

    def recording(ep: Any, specs: list[Any], concurrency: int, *rest: Any) -> Any:
        calls.append((len(specs), concurrency))
        return real(ep, specs, concurrency, *rest)

    monkeypatch.setitem(load.TRANSPORTS, "asyncio", recording)
    server = synthetic(ttft_s=0.001, fixed_tokens=1)
    opts = {"base_url": server.base_url, "prompts_dir": str(prompt_dir("hi")), "max_tokens": 1,
            "warmup": 1, "requests_per_cell": 3}
    rows = probe_run(opts, [_cell({"process": "constant", "rate": 200, "requests": 3})])
    assert calls[:2] == [(1, 1), (3, 3)]  # the warm-up, then the burst of min(8, 3)
    assert [r["kind"] for r in rows].count("request") == 3  # neither is measured
    assert server.stats.requests == 1 + 3 + 3
    assert len(set(server.stats.salts)) == 7  # every warm-up salted: no prefix-cache hit
    calls.clear()
    probe_run(opts, [{"arm": "a", "rep": 0, "prompt_class": "t", "concurrency": 1}])
    assert calls[0] == (1, 1) and (3, 3) not in calls  # closed loop: no burst
