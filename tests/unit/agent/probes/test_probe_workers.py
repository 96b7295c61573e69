"""`options.workers` (docs/agent.md, "probe run"): one cell's load from several processes, fed
from one schedule, rows merged in index order, and the client-bound flag from the schedule lag."""

from __future__ import annotations

from typing import Any

import pytest

from tailpod.agent.probes.procs import merge, round_robin, split_counts
from tailpod.agent.probes.rows import CellPlan, LoopOutcome, cell_row
from tailpod.agent.probes.stream import RequestResult

from .conftest import call_agent, probe_run


def _cell(arrival: dict[str, Any] | None, concurrency: int | None = None) -> dict[str, Any]:
    return {"arm": "a", "rep": 0, "prompt_class": "t", "concurrency": concurrency,
            "arrival": arrival}


def _result(index: int, send: float, end: float, sched: float | None = None) -> RequestResult:
    return RequestResult(index, "cold", True, None, 4, 1, 0.01, end - send, None, None, 1,
                         None, None, 1000.0 + send, t_send_perf=send, t_end_perf=end,
                         t_sched_perf=sched)


def test_shares_and_counts() -> None:
    assert round_robin(7, 3) == [[0, 3, 6], [1, 4], [2, 5]]
    assert split_counts(5, 2) == [3, 2] and split_counts(4, 4) == [1, 1, 1, 1]
    assert sum(split_counts(1023, 16)) == 1023


def test_merge_orders_rows_and_sums_cpu() -> None:
    a = LoopOutcome([_result(0, 1.0, 2.0), _result(2, 1.5, 4.0)], 3.0, 0.3, 0.001)
    b = LoopOutcome([_result(1, 0.5, 3.0)], 2.5, 0.5, 0.004)
    got = merge([a, b])
    assert [r.index for r in got.results] == [0, 1, 2]
    assert got.wall_s == pytest.approx(4.0 - 0.5)  # first send of any worker to last end
    assert got.cpu_s == pytest.approx(0.8) and got.busiest_cpu_s == pytest.approx(0.5)
    assert got.workers == 2 and got.loop_lag_max_s == pytest.approx(0.004)


def test_client_bound_from_the_busiest_worker_and_from_the_schedule_lag() -> None:
    arrival = {"process": "constant", "rate": 10.0, "burstiness": 1.0, "seed": 0}
    late = [_result(i, 0.1 * i + 0.05, 0.1 * i + 0.06, sched=0.1 * i) for i in range(4)]
    # 50 ms behind the schedule with 1% CPU and no in-flight cap: only the client held them
    uncapped = cell_row("r", CellPlan("a", 0, 0, "t", "cold", None, arrival),
                        LoopOutcome(late, 0.36, 0.0036, 0.0), None, [], "pod", 0.8)
    assert "behind_schedule" in uncapped["flags"] and uncapped["client_bound"] is True
    # under a cap of 1 the same lag is the server's queue, not the client's limit
    capped = cell_row("r", CellPlan("a", 1, 0, "t", "cold", None, arrival),
                      LoopOutcome(late, 0.36, 0.0036, 0.0), None, [], "pod", 0.8)
    assert "behind_schedule" in capped["flags"] and capped["client_bound"] is False
    # two workers at 0.2 s CPU each over a 0.36 s wall: the sum (1.11) passes 1, each (0.56)
    # is under 0.8
    ontime = [_result(i, 0.1 * i, 0.1 * i + 0.01, sched=0.1 * i) for i in range(4)]
    split = cell_row("r", CellPlan("a", 0, 0, "t", "cold", None, arrival),
                     LoopOutcome(ontime, 0.36, 0.4, 0.0, workers=2, busiest_cpu_s=0.2),
                     None, [], "pod", 0.8)
    assert split["client_bound"] is False and split["load_workers"] == 2
    hot = cell_row("r", CellPlan("a", 0, 0, "t", "cold", None, arrival),
                   LoopOutcome(ontime, 0.36, 0.4, 0.0, workers=2, busiest_cpu_s=0.2),
                   None, [], "pod", 0.5)  # the busiest one's 0.56 passes a 0.5 line
    assert hot["client_bound"] is True and hot["flags"][0] == "client_bound"


def test_two_workers_keep_one_schedule(synthetic: Any, prompt_dir: Any) -> None:
    # The same cell as test_probe_open_loop's one-process one: 20 ms a request on one slot,
    # arrivals every 10 ms. Two workers each send every other request; if each kept a schedule
    # of its own the gaps would not be 10 ms, and the queue (which only one shared schedule
    # builds) would not show.
    server = synthetic(slots=1, ttft_s=0.02, fixed_tokens=1)
    rows = probe_run({"base_url": server.base_url, "prompts_dir": str(prompt_dir("hi")),
                      "max_tokens": 1, "warmup": 0, "run_id": "r", "workers": 2},
                     [_cell({"process": "constant", "rate": 100, "requests": 10})])
    reqs = [r for r in rows if r["kind"] == "request"]
    cell = rows[-1]
    assert [r["index"] for r in reqs] == list(range(10))  # merged in index order
    assert all(r["ok"] for r in reqs) and server.stats.requests == 10
    gaps = [b["scheduled_at"] - a["scheduled_at"] for a, b in zip(reqs, reqs[1:], strict=False)]
    # 5 ms: scheduled_at is t_start (wall clock) less the lag (monotonic clock), two readings a
    # loaded machine can part by a few ms; two starts apart would shift every other gap
    assert gaps == pytest.approx([0.01] * 9, abs=5e-3)
    for i, r in enumerate(reqs):
        assert r["ttft_sched_s"] >= 0.010 * i + 0.020 - 0.002
    assert cell["load_workers"] == 2 and cell["requests"] == 10 and cell["failed"] == 0
    assert cell["wall_s"] >= 10 * 0.02 - 0.002  # one slot served all ten back to back


def test_the_cap_is_shared_out_over_the_workers(synthetic: Any, prompt_dir: Any) -> None:
    server = synthetic(ttft_s=0.05, fixed_tokens=1)  # no slots: the server never queues
    rows = probe_run({"base_url": server.base_url, "prompts_dir": str(prompt_dir("hi")),
                      "max_tokens": 1, "warmup": 0, "workers": 2},
                     [_cell({"process": "poisson", "rate": "inf", "requests": 4}, 2)])
    reqs = [r for r in rows if r["kind"] == "request"]
    # cap 2 over 2 workers = 1 each; worker 0 holds requests 0 and 2, worker 1 holds 1 and 3:
    # 0 and 1 go at once, 2 and 3 wait for an answer of >= 50 ms
    waits = [r["sent_at"] - r["scheduled_at"] for r in reqs]
    assert waits[2] >= 0.05 - 0.002 and waits[3] >= 0.05 - 0.002
    # each worker sends its second only after its first answered (lower bounds only: a loaded
    # machine may start a worker late, which delays both of its requests alike)
    spans = [(r["sent_at"], r["sent_at"] + r["e2e_s"]) for r in reqs]
    assert spans[2][0] >= spans[0][1] - 0.002 and spans[3][0] >= spans[1][1] - 0.002
    assert waits[0] < waits[2] and waits[1] < waits[3]
    # and never more than the cap of 2 in flight at once
    assert max(sum(1 for s, e in spans if s <= t < e) for t, _ in spans) <= 2
    assert rows[-1]["load_workers"] == 2 and rows[-1]["concurrency"] == 2


def test_closed_loop_over_workers(synthetic: Any, prompt_dir: Any) -> None:
    server = synthetic(ttft_s=0.005, fixed_tokens=4)
    rows = probe_run({"base_url": server.base_url, "prompts_dir": str(prompt_dir("hi")),
                      "max_tokens": 4, "warmup": 0, "requests_per_cell": 9, "workers": 3},
                     [_cell(None, 3)])
    reqs = [r for r in rows if r["kind"] == "request"]
    assert [r["index"] for r in reqs] == list(range(9)) and all(r["ok"] for r in reqs)
    assert server.stats.requests == 9 and server.stats.tokens == 36
    assert rows[-1]["output_tokens"] == 36 and rows[-1]["load_workers"] == 3


@pytest.mark.parametrize("options", [{"workers": 0}, {"workers": "2"}, {"workers": True},
                                     {"workers": 2, "transport": "threads"}])
def test_bad_workers_are_usage_errors_before_any_request(synthetic: Any, prompt_dir: Any,
                                                         options: dict[str, Any]) -> None:
    server = synthetic()
    code, env = call_agent("probe run", {
        "options": {"base_url": server.base_url, "prompts_dir": str(prompt_dir("hi")),
                    **options},
        "cells": [_cell({"process": "poisson", "rate": 5, "requests": 2})]})
    assert code != 0 and env["error"]["kind"] == "usage", env
    assert server.stats.requests == 0
