"""Trace replay (docs/agent.md, "probe run": `arrival.process = "trace"`): the schedule is the
trace's own arrival times over its speed, prompts are built to the logged input lengths and
outputs held to the logged output lengths."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tailpod.agent.probes.arrival import parse_arrival, schedule
from tailpod.agent.probes.basics import ProbeError

from .conftest import call_agent, probe_run


def _write(path: Path, rows: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def _cell(trace: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {"arm": "a", "rep": 0, "prompt_class": "t", "cell": "a|trace|r0|t",
            "arrival": {"process": "trace", "trace": trace, **extra}}


MOONCAKE = [  # out of order on purpose: the schedule sorts by timestamp
    {"timestamp": 1000, "input_length": 26, "output_length": 3, "hash_ids": [1, 2]},
    {"timestamp": 1240, "input_length": 13, "output_length": 7, "hash_ids": [1]},
    {"timestamp": 1080, "input_length": 52, "output_length": 1, "hash_ids": [3]},
    {"timestamp": 1400, "input_length": 1, "output_length": 5, "hash_ids": []},
]


def test_mooncake_schedule_is_relative_ms_over_speed(tmp_path: Path) -> None:
    f = _write(tmp_path / "m.jsonl", MOONCAKE)
    # by hand: sorted 1000, 1080, 1240, 1400 ms -> 0, 0.08, 0.24, 0.40 s; speed 2 halves them
    got = schedule(parse_arrival({"process": "trace", "trace": {"path": str(f),
                                  "format": "mooncake", "speed": 2}}))
    assert got == pytest.approx([0.0, 0.04, 0.12, 0.20])
    first2 = schedule(parse_arrival({"process": "trace", "requests": 2,
                                     "trace": {"path": str(f), "format": "mooncake"}}))
    assert first2 == pytest.approx([0.0, 0.08])
    short = schedule(parse_arrival({"process": "trace", "duration_s": 0.2,
                                    "trace": {"path": str(f), "format": "mooncake"}}))
    assert short == pytest.approx([0.0, 0.08])


def test_tailpod_log_skips_cells_and_failures(tmp_path: Path) -> None:
    f = _write(tmp_path / "rows.jsonl", [
        {"kind": "request", "t_start": 100.5, "prompt_tokens": 10, "completion_tokens": 4},
        {"kind": "cell", "t_start": 50.0},
        {"kind": "request", "ok": False, "t_start": 100.7, "prompt_tokens": 9,
         "completion_tokens": None},
        {"t_start": 101.0, "prompt_tokens": 3, "completion_tokens": 2},
    ])
    got = schedule(parse_arrival({"process": "trace", "trace": {"path": str(f)}}))
    assert got == pytest.approx([0.0, 0.5])


@pytest.mark.parametrize("bad", [
    {"process": "trace"},  # no trace object
    {"process": "trace", "rate": 2, "trace": {"path": "PATH"}},
    {"process": "trace", "trace": {"path": "PATH", "format": "csv"}},
    {"process": "trace", "trace": {"path": "PATH", "speed": 0}},
    {"process": "trace", "trace": {"path": "PATH", "sped": 1}},
    {"process": "trace", "trace": {"path": "/nonexistent/trace.jsonl"}},
    {"process": "trace", "trace": {"path": "EMPTY"}},
    {"process": "trace", "trace": {"path": "BADLINE", "format": "mooncake"}},
])
def test_bad_traces_are_refused(bad: dict[str, Any], tmp_path: Path) -> None:
    good = _write(tmp_path / "g.jsonl", [{"t_start": 1.0, "prompt_tokens": 1,
                                          "completion_tokens": 1}])
    empty = _write(tmp_path / "e.jsonl", [{"kind": "cell"}])
    badline = _write(tmp_path / "b.jsonl", [{"timestamp": 1, "input_length": 0,
                                             "output_length": 1}])
    if "trace" in bad and bad["trace"].get("path") in ("PATH", "EMPTY", "BADLINE"):
        bad["trace"]["path"] = str({"PATH": good, "EMPTY": empty,
                                    "BADLINE": badline}[bad["trace"]["path"]])
    with pytest.raises(ProbeError):
        parse_arrival(bad)


def test_bad_trace_is_a_usage_error_before_any_request(synthetic: Any, prompt_dir: Any,
                                                       tmp_path: Path) -> None:
    server = synthetic()
    code, env = call_agent("probe run", {
        "options": {"base_url": server.base_url, "prompts_dir": str(prompt_dir("hi"))},
        "cells": [_cell({"path": str(tmp_path / "missing.jsonl")})]})
    assert code != 0 and env["error"]["kind"] == "usage"
    assert server.stats.requests == 0


def test_replay_follows_the_trace_and_holds_the_lengths(synthetic: Any, prompt_dir: Any,
                                                        tmp_path: Path) -> None:
    f = _write(tmp_path / "m.jsonl", MOONCAKE)
    server = synthetic(record_bodies=True)
    rows = probe_run({"base_url": server.base_url, "warmup": 0, "max_tokens": 99,
                      "ignore_eos": False,
                      "prompts_dir": str(prompt_dir("one two three four five"))},
                     [_cell({"path": str(f), "format": "mooncake", "speed": 1})])
    reqs = sorted((r for r in rows if r["kind"] == "request"), key=lambda r: r["index"])
    cell = rows[-1]
    assert len(reqs) == 4 and all(r["ok"] for r in reqs)
    logged = sorted(MOONCAKE, key=lambda m: m["timestamp"])
    # sent times follow the trace: scheduled gaps equal the logged gaps; sends lag little (50 ms,
    # plus the worst stall the probe measured of its own loop: a loaded machine delays a send's
    # timer as it delays the probe's 10 ms lag timer, so the verdict stays the same under load)
    t0 = reqs[0]["scheduled_at"]
    late_ok = 0.05 + cell["loop_lag_max_s"]
    for r, m in zip(reqs, logged, strict=True):
        assert r["scheduled_at"] - t0 == pytest.approx((m["timestamp"] - 1000) / 1000, abs=2e-3)
        assert 0 <= r["sent_at"] - r["scheduled_at"] < late_ok
        # output held to the logged length (the server answers max_tokens tokens)
        assert r["completion_tokens"] == m["output_length"]
        assert r["trace_output_tokens"] == m["output_length"]
        assert r["trace_input_tokens"] == m["input_length"]
        # approximate input: round(n / 1.3) words (at least one), the server counts words
        words = max(1, round(m["input_length"] / 1.3))
        assert r["prompt_words"] == words and r["prompt_tokens"] == words
        assert r["prompt_length"] == "approx_words"
    bodies = sorted(server.stats.bodies, key=lambda b: b["max_tokens"])
    assert [b["max_tokens"] for b in bodies] == sorted(m["output_length"] for m in MOONCAKE)
    assert all(b["ignore_eos"] is True for b in bodies)  # held even though options say no
    assert cell["arrival"]["process"] == "trace" and cell["arrival"]["trace"]["speed"] == 1.0
    assert cell["offered_rate_rps"] == pytest.approx(3 / 0.4)
    assert cell["cell"] == "a|trace|r0|t"


def _template_count(text: str) -> int:
    """A made-up tokenizer: two tokens a word plus five of chat template."""
    return 2 * len(text.split()) + 5


def _closest_words(target: int) -> int:
    """By hand: the word count n >= 1 whose 2n + 5 is nearest the target, ties to the shorter."""
    return min(range(1, 200), key=lambda n: (abs(2 * n + 5 - target), 2 * n + 5 > target))


@pytest.mark.parametrize("target", [1, 13, 26, 52, 301])
def test_fit_prompt_reaches_the_closest_whole_word_length(target: int) -> None:
    from tailpod.agent.probes.arrival import fit_prompt

    text, words, built = fit_prompt("one two three", target, _template_count)
    n = _closest_words(target)
    assert words == n and len(text.split()) == n and built == 2 * n + 5
    assert text.split()[:4] == ["one", "two", "three", "one"][:n]


def test_fit_prompt_falls_back_when_the_count_fails() -> None:
    from tailpod.agent.probes.arrival import fit_prompt

    text, words, built = fit_prompt("a b", 26, lambda _t: None)
    assert built is None and words == round(26 / 1.3) and len(text.split()) == words


def test_replay_uses_the_engines_tokenize_when_it_has_one(prompt_dir: Any,
                                                          tmp_path: Path) -> None:
    import asyncio

    from tailpod.sandbox.synthetic_server import SyntheticConfig, SyntheticServer

    class Tokenizing(SyntheticServer):
        """The synthetic server plus vLLM's POST /tokenize, counting by _template_count."""

        async def _dispatch(self, method: str, path: str, raw: bytes,
                            writer: asyncio.StreamWriter) -> bool:
            if method == "POST" and path == "/tokenize":
                body = json.loads(raw)
                text = " ".join(m["content"] for m in body["messages"])
                self._respond(writer, 200, json.dumps({"count": _template_count(text),
                                                       "tokens": []}).encode())
                return True
            return await super()._dispatch(method, path, raw, writer)

    f = _write(tmp_path / "m.jsonl", MOONCAKE)
    server = Tokenizing(SyntheticConfig(rate=4000.0, ttft_s=0.002)).start()
    try:
        rows = probe_run({"base_url": server.base_url, "warmup": 0,
                          "prompts_dir": str(prompt_dir("one two three four five"))},
                         [_cell({"path": str(f), "format": "mooncake"})])
    finally:
        server.stop()
    reqs = sorted((r for r in rows if r["kind"] == "request"), key=lambda r: r["index"])
    logged = sorted(MOONCAKE, key=lambda m: m["timestamp"])
    for r, m in zip(reqs, logged, strict=True):
        n = _closest_words(m["input_length"])
        assert r["prompt_words"] == n and r["prompt_tokens"] == n  # the server counts words
        assert r["prompt_tokens_built"] == 2 * n + 5
        assert r["prompt_length"] == ("exact" if 2 * n + 5 == m["input_length"] else "tokenized")
    # 26 -> 10 words (25 tokens; 27 is as far, the shorter wins); 13 -> 4 words, exact
    assert [r["prompt_length"] for r in reqs] == ["tokenized", "tokenized", "exact", "tokenized"]
    assert rows[-1]["prompt_length"] == "mixed"


def test_mooncake_hash_ids_share_their_prefix_word_for_word(synthetic: Any, prompt_dir: Any,
                                                            tmp_path: Path) -> None:
    # 512-token blocks (arrival.MOONCAKE_BLOCK_TOKENS) of round(512 / 1.3) = 394 words each:
    # A [7, 8] and B [7, 9] share block 7 and part at the next block; C has no block.
    trace = _write(tmp_path / "m.jsonl", [
        {"timestamp": 0, "input_length": 1100, "output_length": 3, "hash_ids": [7, 8]},
        {"timestamp": 10, "input_length": 1100, "output_length": 5, "hash_ids": [7, 9]},
        {"timestamp": 20, "input_length": 13, "output_length": 7, "hash_ids": []},
    ])
    server = synthetic()
    rows = probe_run({"base_url": server.base_url, "max_tokens": 64, "warmup": 0,
                      "prompts_dir": str(prompt_dir("alpha beta gamma delta", "one two"))},
                     [_cell({"path": str(trace), "format": "mooncake"})])
    assert rows[-1]["failed"] == 0
    by_len = {b["max_tokens"]: b["messages"][0]["content"].split()
              for b in server.stats.bodies}
    a, b, c = by_len[3], by_len[5], by_len[7]
    assert a[:394] == b[:394] and a[0] == "block-7"
    assert (a[394], b[394]) == ("block-8", "block-9")
    # the class text rotated by the id (8 % 4 words = 0, 9 % 4 = 1): "alpha ..." and "beta ..."
    assert (a[395], b[395]) == ("alpha", "beta")
    assert len(a) == len(b) == round(1100 / 1.3)  # cut to the logged length at the end
    # no hash_ids: request 2's own class prompt (2 mod 2 = the first), round(13 / 1.3) words
    assert c == ["alpha", "beta", "gamma", "delta"] * 2 + ["alpha", "beta"]
