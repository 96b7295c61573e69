"""Session replay against the stand-in server (tailpod/agent/probes/sessions.py): each turn sends
the whole conversation so far with the answers the server actually gave, after its think or tool
wait from the previous answer's end; each row says its session, turn, the cached prompt tokens
the server reported (null, not 0, when it reported none) and its own acceptance; a failed turn
ends its session, and the turns it leaves are counted as not sent."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import pytest

from tailpod.agent.probes.load import RunOptions, run_cells
from tailpod.agent.probes.rows import CellPlan
from tailpod.sandbox.synthetic_server import SyntheticConfig, SyntheticServer

PREFIX = "You are a terse assistant."
SESSIONS = [
    {"session_id": "a", "shared_prefix": PREFIX, "turns": [
        {"user": "first question"},
        {"user": "second question", "think_s": 0.15},
        {"input_tokens": 13, "tool_wait_s": 0.1, "max_tokens": 5}]},
    {"session_id": "b", "start_s": 0.05, "shared_prefix": PREFIX, "turns": [
        {"user": "other question"}, {"user": "other follow-up", "think_s": 0.05}]},
]
MAX_TOKENS = 8


def _trace(tmp_path: Path, sessions: list[dict[str, Any]]) -> Path:
    f = tmp_path / "sessions.jsonl"
    f.write_text("".join(json.dumps(s) + "\n" for s in sessions))
    return f


def _replay(server: SyntheticServer, trace: Path, arm: str = "plain",
            fmt: str = "session") -> list[dict[str, Any]]:
    opts = RunOptions(base_url=server.base_url, max_tokens=MAX_TOKENS, engine="vllm", warmup=0)
    plan = CellPlan(arm, 0, 0, "prose", "cold", cell_id=f"{arm}|trace|r0|prose",
                    arrival={"process": "trace",
                             "trace": {"path": str(trace), "format": fmt, "speed": 1.0}})
    _, rows = run_cells(opts, [plan])
    return rows


def _answer(server: SyntheticServer, body: dict[str, Any]) -> str:
    # the stand-in's greedy answer to a prompt: its token sequence, each id written " w<id>"
    prompt = "\n".join(m["content"] for m in body["messages"])
    return "".join(f" w{t}" for t in server.token_sequence(prompt, body["max_tokens"]))


def test_each_turn_carries_the_conversation_so_far(tmp_path: Path) -> None:
    cfg = SyntheticConfig(spec_k=3, tokens_per_chunk=(1, 4, 2), per_request_spec="vllm",
                          prefix_cache=True, ttft_s=0.002, rate=2000.0)
    with SyntheticServer(cfg) as server:
        rows = _replay(server, _trace(tmp_path, SESSIONS))
        bodies = [b for b in server.stats.bodies if "messages" in b]
    reqs = [r for r in rows if r["kind"] == "request"]
    assert [(r["session_id"], r["turn"]) for r in reqs] == [
        ("a", 1), ("a", 2), ("a", 3), ("b", 1), ("b", 2)]
    assert all(r["ok"] for r in reqs)
    by_turn = {(r["session_id"], r["turn"]): r for r in reqs}
    sent = {(next(m["content"] for m in b["messages"] if m["role"] == "user").split("\n")[0],
             len(b["messages"])): b for b in bodies}
    a3 = next(b for b in bodies if len(b["messages"]) == 6)
    a1 = sent[("first question", 2)]
    a2 = next(b for b in bodies if len(b["messages"]) == 4 and b["messages"][1]["content"]
              == "first question")
    # turn 3 of a: the prefix, then each user turn followed by the answer the server gave it
    assert [m["role"] for m in a3["messages"]] == ["system", "user", "assistant", "user",
                                                   "assistant", "user"]
    assert a3["messages"][0]["content"] == PREFIX
    assert a3["messages"][2]["content"] == _answer(server, a1)
    assert a3["messages"][4]["content"] == _answer(server, a2)
    assert a3["messages"][5]["content"].startswith("[a turn 3] ")
    assert a3["max_tokens"] == 5 and a1["max_tokens"] == MAX_TOKENS
    assert a3["ignore_eos"] is True and a3["cache_salt"] == a1["cache_salt"]
    # the answer digest is the answer's own SHA-256
    assert by_turn[("a", 1)]["answer_digest"] == hashlib.sha256(
        _answer(server, a1).encode()).hexdigest()[:16]
    # closed per session: a turn goes out its wait after the previous answer ended
    for sid, turn, wait, kind in (("a", 2, 0.15, "think"), ("a", 3, 0.1, "tool"),
                                  ("b", 2, 0.05, "think")):
        prev, cur = by_turn[(sid, turn - 1)], by_turn[(sid, turn)]
        assert cur["turn_wait_s"] == wait and cur["turn_wait_kind"] == kind
        gap = cur["sent_at"] - (prev["sent_at"] + prev["e2e_s"])
        assert wait - 0.005 <= gap <= wait + 0.1
    assert by_turn[("b", 1)]["sent_at"] - by_turn[("a", 1)]["sent_at"] == pytest.approx(
        0.05, abs=0.03)
    # cached tokens as the server reported them: the previous turn's whole prompt (its prefix
    # cache's rule), 0 on a session's first turn, which it did report
    assert by_turn[("a", 1)]["cached_tokens"] == 0
    for sid, turn in (("a", 2), ("a", 3), ("b", 2)):
        assert by_turn[(sid, turn)]["cached_tokens"] == by_turn[(sid, turn - 1)]["prompt_tokens"]
    assert all(isinstance(r["spec_acceptance"], dict) for r in reqs)
    cell = next(r for r in rows if r["kind"] == "cell")
    assert cell["sessions"] == {"sessions": 2, "turns_max": 3, "format": "session"}
    assert cell["requests"] == 5 and cell["failed"] == 0


def test_cached_tokens_are_null_when_the_server_does_not_say(tmp_path: Path) -> None:
    with SyntheticServer(SyntheticConfig(ttft_s=0.002, rate=2000.0)) as server:
        rows = _replay(server, _trace(tmp_path, SESSIONS[1:]))
    reqs = [r for r in rows if r["kind"] == "request"]
    assert len(reqs) == 2 and all(r["ok"] for r in reqs)
    assert all("cached_tokens" in r and r["cached_tokens"] is None for r in reqs)


def test_a_failed_turn_ends_its_session(tmp_path: Path) -> None:
    sessions = [{"session_id": "x", "turns": [{"user": "fine"}, {"user": "boom [[FAIL500]]"},
                                              {"user": "never sent"}]},
                {"session_id": "y", "turns": [{"user": "unaffected"}, {"user": "still"}]}]
    with SyntheticServer(SyntheticConfig(ttft_s=0.002, rate=2000.0)) as server:
        rows = _replay(server, _trace(tmp_path, sessions))
        prompts = [m["content"] for b in server.stats.bodies for m in b.get("messages", [])]
    reqs = {(r["session_id"], r["turn"]): r for r in rows if r["kind"] == "request"}
    assert reqs[("x", 1)]["ok"] and not reqs[("x", 2)]["ok"]
    assert reqs[("x", 3)]["error"] == "turn 2 of the session failed; later turns not sent"
    assert "never sent" not in prompts
    assert reqs[("y", 1)]["ok"] and reqs[("y", 2)]["ok"]
    cell = next(r for r in rows if r["kind"] == "cell")
    assert cell["requests"] == 5 and cell["failed"] == 2


def test_an_aiperf_multi_turn_file_replays(tmp_path: Path) -> None:
    f = tmp_path / "conversations.jsonl"
    f.write_text(json.dumps({"session_id": "chat_1", "turns": [
        {"role": "system", "text": PREFIX}, {"text": "What is machine learning?"},
        {"text": "Can you give me an example?", "delay": 50, "output_length": 3}]}) + "\n")
    with SyntheticServer(SyntheticConfig(ttft_s=0.002, rate=2000.0)) as server:
        rows = _replay(server, f, fmt="aiperf-multi-turn")
        bodies = [b for b in server.stats.bodies if "messages" in b]
    reqs = [r for r in rows if r["kind"] == "request"]
    assert [(r["session_id"], r["turn"], r["completion_tokens"]) for r in reqs] == [
        ("chat_1", 1, MAX_TOKENS), ("chat_1", 2, 3)]
    assert reqs[1]["turn_wait_s"] == 0.05
    assert [m["role"] for m in bodies[-1]["messages"]] == ["system", "user", "assistant", "user"]


def test_a_bad_session_file_stops_the_probe_before_any_request(tmp_path: Path) -> None:
    from tailpod.agent.probes.basics import ProbeError

    good, bad = tmp_path / "good.jsonl", tmp_path / "bad.jsonl"
    good.write_text(json.dumps(SESSIONS[1]) + "\n")
    bad.write_text(json.dumps({"turns": [{"user": "a", "think_s": "soon"}]}) + "\n")
    with SyntheticServer(SyntheticConfig(ttft_s=0.002, rate=2000.0)) as server:
        opts = RunOptions(base_url=server.base_url, max_tokens=4, engine="vllm", warmup=1)
        plans = [CellPlan("plain", 0, 0, "prose", "cold", cell_id=f"c{i}", arrival={
            "process": "trace", "trace": {"path": str(p), "format": "session"}})
            for i, p in enumerate((good, bad))]
        with pytest.raises(ProbeError, match=r"bad.jsonl:1: turn 1: think_s must be a number"):
            run_cells(opts, plans)
        opts.api = "completions"
        with pytest.raises(ProbeError, match="c0: a session trace needs the chat API"):
            run_cells(opts, plans[:1])
        assert server.stats.requests == 0  # not even the first, good cell's warm-up


def test_no_answer_digest_when_sampling(tmp_path: Path) -> None:
    # sampled answers may differ between arms by chance: the session gate must have nothing
    with SyntheticServer(SyntheticConfig(ttft_s=0.002, rate=2000.0)) as server:
        opts = RunOptions(base_url=server.base_url, max_tokens=4, engine="vllm", warmup=0,
                          temperature=0.7)
        plan = CellPlan("plain", 0, 0, "prose", "cold", cell_id="c", arrival={
            "process": "trace", "trace": {"path": str(_trace(tmp_path, SESSIONS[1:])),
                                          "format": "session"}})
        _, rows = run_cells(opts, [plan])
    reqs = [r for r in rows if r["kind"] == "request"]
    assert len(reqs) == 2 and all(r["ok"] and r["answer_digest"] is None for r in reqs)
