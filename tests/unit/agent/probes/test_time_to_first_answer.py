"""Reasoning models (issue 39 item 5): `ttft_s` stays the first token of any kind (reasoning text
included, docs/probe.md); `ttfa_s` is the first answer token, timed against the synthetic
server's own record of when it wrote the first reasoning and the first answer delta; reasoning
tokens come from usage.completion_tokens_details; the cell's p50/p90 of ttfa never drop a request
that reasoned and never answered (they go null where the percentile falls on one)."""

from __future__ import annotations

import json
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tailpod.agent.probes.metrics import censored_percentile
from tailpod.agent.probes.stream import RequestSpec, StreamRecorder, result_from_recorder
from tailpod.sandbox.synthetic_server import SyntheticServer
from tests.unit.agent.probes.conftest import probe_run, sweep_cells

RATE, THINK, TOKENS, REQUESTS = 400.0, 24, 40, 4
# Client-side read latency differs per chunk by scheduling jitter on a loaded 2-core machine; the
# reasoning phase lasts THINK / RATE = 60 ms, so a 20 ms tolerance still tells ttfa from ttft.
TOL_S = 0.02


def _run(server: SyntheticServer, tmp_path: Path, transport: str,
         max_tokens: int) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    rows = probe_run({"base_url": server.base_url, "run_id": "rid", "transport": transport,
                      "requests_per_cell": REQUESTS, "max_tokens": max_tokens, "warmup": 0},
                     sweep_cells("plain", [1], ["prose"]), tmp_path / "rows.jsonl")
    reqs = sorted((r for r in rows if r["kind"] == "request"), key=lambda r: r["index"])
    (cell,) = [r for r in rows if r["kind"] == "cell"]
    return reqs, cell


def _server_record(server: SyntheticServer) -> dict[str, Any]:
    with urllib.request.urlopen(server.base_url + "/_stats/raw", timeout=10) as resp:
        return dict(json.loads(resp.read()))


@pytest.mark.parametrize("transport", ["asyncio", "threads"])
@pytest.mark.parametrize("key", ["reasoning", "reasoning_content"])
def test_ttfa_is_the_first_answer_delta_the_server_wrote(
        synthetic: Callable[..., SyntheticServer], tmp_path: Path, transport: str,
        key: str) -> None:
    server = synthetic(rate=RATE, reasoning_tokens=THINK, reasoning_key=key)
    reqs, cell = _run(server, tmp_path, transport, TOKENS)
    record = _server_record(server)
    assert len(record["ttft_list"]) == len(record["ttfa_list"]) == REQUESTS
    for row, s_ttft, s_ttfa in zip(reqs, record["ttft_list"], record["ttfa_list"],
                                   strict=True):
        assert row["ok"] and "no_answer" not in row["flags"]
        # the server wrote its first answer delta THINK tokens after its first reasoning delta
        assert s_ttfa - s_ttft == pytest.approx(THINK / RATE, abs=TOL_S)
        # ttft_s still times the first reasoning delta; ttfa_s the first answer delta
        assert row["ttfa_s"] - row["ttft_s"] == pytest.approx(s_ttfa - s_ttft, abs=TOL_S)
        # sent before it arrived: the server stamps just before its write (CI saw a stamp taken
        # after the write land 5 ms late on a loaded 2-core run); 1 ms of slack for the two clocks
        assert row["ttft_s"] >= s_ttft - 0.001 and row["ttfa_s"] >= s_ttfa - 0.001
        assert row["reasoning_tokens"] == THINK
        assert row["completion_tokens"] == TOKENS
    xs = sorted(r["ttfa_s"] for r in reqs)  # four values: numpy's linear p50 and p90
    assert cell["ttfa_p50_s"] == pytest.approx((xs[1] + xs[2]) / 2)
    assert cell["ttfa_p90_s"] == pytest.approx(xs[2] + 0.7 * (xs[3] - xs[2]))
    assert cell["ttft_p50_s"] < cell["ttfa_p50_s"]
    assert "no_answer" not in cell["flags"]


def test_a_request_that_only_reasoned_has_no_answer_time(
        synthetic: Callable[..., SyntheticServer], tmp_path: Path) -> None:
    server = synthetic(rate=RATE, reasoning_tokens=THINK)
    reqs, cell = _run(server, tmp_path, "asyncio", THINK - 4)  # max_tokens ends in the reasoning
    assert _server_record(server)["ttfa_list"] == [None] * REQUESTS
    for row in reqs:
        assert row["ok"] and row["ttft_s"] is not None
        assert row["ttfa_s"] is None and "no_answer" in row["flags"]
        assert row["reasoning_tokens"] == THINK - 4
    # no request answered: the percentiles are unknown, not the percentiles of nothing
    assert cell["ttfa_p50_s"] is None and cell["ttfa_p90_s"] is None
    assert "no_answer" in cell["flags"]


def test_without_reasoning_the_rows_keep_their_shape(
        synthetic: Callable[..., SyntheticServer], tmp_path: Path) -> None:
    server = synthetic(rate=RATE)
    reqs, cell = _run(server, tmp_path, "asyncio", 8)
    for row in reqs:
        assert "ttfa_s" not in row and "reasoning_tokens" not in row
        assert "no_answer" not in row["flags"]
    assert "ttfa_p50_s" not in cell and "ttfa_p90_s" not in cell


def _chunk(delta: dict[str, Any]) -> bytes:
    obj = {"object": "chat.completion.chunk",
           "choices": [{"index": 0, "delta": delta, "finish_reason": None}]}
    return b"data: " + json.dumps(obj).encode() + b"\n\n"


@pytest.mark.parametrize("keep_ids", [False, True])  # the pattern fast path and the full parse
def test_reasoning_and_answer_told_apart_on_exact_bytes(keep_ids: bool) -> None:
    rec = StreamRecorder("chat", keep_ids=keep_ids)
    rec.t_send = 0.0
    rec.feed(_chunk({"role": "assistant", "content": ""}), 0.5)  # no token at all
    # reasoning whose text spells a content key: inside a JSON string its quotes are escaped
    rec.feed(_chunk({"reasoning_content": 'say "content": "x"', "content": None}), 1.0)
    rec.feed(_chunk({"reasoning": "more", "content": ""}), 2.0)
    rec.feed(_chunk({"content": "answer"}), 3.0)
    rec.feed(_chunk({"content": "more"}), 4.0)
    rec.feed(b'data: {"choices":[],"usage":{"prompt_tokens":3,"completion_tokens":9,'
             b'"completion_tokens_details":{"reasoning_tokens":5}}}\n\ndata: [DONE]\n\n', 5.0)
    rec.finish(5.0)
    r = result_from_recorder(RequestSpec(0, "/v1/chat/completions", b"", "cold", "chat"), rec)
    assert (r.ttft_s, r.ttfa_s, r.reasoned, r.reasoning_tokens) == (1.0, 3.0, True, 5)
    assert r.e2e_s == 4.0 and r.flags == []


@pytest.mark.parametrize("keep_ids", [False, True])
def test_one_delta_with_reasoning_and_answer_is_both_first_token_and_first_answer(
        keep_ids: bool) -> None:
    rec = StreamRecorder("chat", keep_ids=keep_ids)
    rec.feed(_chunk({"reasoning": "think", "content": "answer"}), 1.5)
    rec.feed(b"data: [DONE]\n\n", 2.0)
    rec.finish(2.0)
    r = result_from_recorder(RequestSpec(0, "/v1/chat/completions", b"", "cold", "chat"), rec)
    assert (r.ttft_s, r.ttfa_s, r.reasoned) == (1.5, 1.5, True)


def test_censored_percentile_hand_worked() -> None:
    # answers 0.1, 0.2, 0.3 and one request that never answered (above every answer):
    # p50 at position 1.5 of 4 -> 0.2 + 0.5 * (0.3 - 0.2); p90 at 2.7 reaches the missing one
    assert censored_percentile([0.3, 0.1, 0.2], 1, 50) == pytest.approx(0.25)
    assert censored_percentile([0.3, 0.1, 0.2], 1, 90) is None
    # five with one missing: p50 at position 2 is exactly 0.3; p75 at 3 exactly 0.4
    assert censored_percentile([0.1, 0.2, 0.3, 0.4], 1, 50) == pytest.approx(0.3)
    assert censored_percentile([0.1, 0.2, 0.3, 0.4], 1, 75) == pytest.approx(0.4)
    assert censored_percentile([0.1, 0.2, 0.3, 0.4], 1, 76) is None
    assert censored_percentile([], 3, 50) is None
    assert censored_percentile([0.2, 0.4], 0, 50) == pytest.approx(0.3)  # nothing missing
