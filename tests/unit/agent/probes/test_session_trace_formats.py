"""Session traces (tailpod/agent/probes/sessions.py): tailpod's own `session` JSONL and AIPerf's
`multi_turn` custom dataset read into sessions of turns; bad input is one clear line naming the
file, line, turn and key, and `benchmark --trace F --trace-format session` refuses it with exit 2
before anything rents or waits (measure/plan.py trace_spec)."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from tailpod.agent.probes.arrival import parse_arrival
from tailpod.agent.probes.basics import ProbeError
from tailpod.agent.probes.session_replay import Session, Turn, parse_session_lines, turn_text
from tailpod.cli.main import app
from tailpod.errors import ConfigError
from tailpod.measure.plan import trace_spec


def _lines(rows: list[Any]) -> list[str]:
    return [r if isinstance(r, str) else json.dumps(r) for r in rows]


def test_tailpod_session_format() -> None:
    got = parse_session_lines(_lines([
        {"session_id": "a", "start_s": 5.0, "shared_prefix": "You are terse.",
         "turns": [{"user": "hi"}, {"input_tokens": 40, "think_s": 2.5, "max_tokens": 16},
                   {"user": "and?", "tool_wait_s": 0.75}]},
        {"session_id": "b", "start_s": 7.5, "turns": [{"user": "yo"}]},
    ]), "session")
    assert got == [
        Session("a", 0.0, "You are terse.", (
            Turn("hi", None, 0.0, None, None), Turn(None, 40, 2.5, "think", 16),
            Turn("and?", None, 0.75, "tool", None))),
        Session("b", 2.5, None, (Turn("yo", None, 0.0, None, None),)),
    ]


def test_aiperf_multi_turn_format() -> None:
    # the shapes of ai-dynamo/aiperf docs/tutorials/custom-dataset.md ("Multi-Turn Datasets",
    # "Persistent System Prompt"): delay and timestamp in milliseconds, output_length per turn
    got = parse_session_lines(_lines([
        {"session_id": "chat_1", "turns": [
            {"role": "system", "text": "You are a terse assistant."},
            {"text": "What is machine learning?", "timestamp": 2000},
            {"text": "Give me an example.", "delay": 1500, "output_length": 50}]},
        {"turns": [{"text": "Explain neural networks.", "timestamp": 3000},
                   {"text": "Which architecture?", "role": "user"}]},
    ]), "aiperf-multi-turn")
    assert got == [
        Session("chat_1", 0.0, "You are a terse assistant.", (
            Turn("What is machine learning?", None, 0.0, None, None),
            Turn("Give me an example.", None, 1.5, "think", 50))),
        Session("session-2", 1.0, None, (
            Turn("Explain neural networks.", None, 0.0, None, None),
            Turn("Which architecture?", None, 0.0, None, None))),
    ]


@pytest.mark.parametrize("fmt,row,says", [
    ("session", {"turns": [{"user": "a", "input_tokens": 3}]}, "turn 1: give exactly one of user"),
    ("session", {"turns": [{}]}, "turn 1: give exactly one of user"),
    ("session", {"turns": [{"user": "a", "think_s": 1, "tool_wait_s": 1}]}, "at most one of"),
    ("session", {"turns": [{"user": "a", "think_s": -1}]}, "think_s must be a number >= 0"),
    ("session", {"turns": [{"user": "a", "max_tokens": 0}]}, "max_tokens must be an integer >= 1"),
    ("session", {"turns": [{"user": "a", "delay": 5}]}, "unknown key(s) delay"),
    ("session", {"turns": []}, "turns must be a non-empty list"),
    ("session", {"session_id": 3, "turns": [{"user": "a"}]}, "session_id must be a non-empty"),
    ("aiperf-multi-turn", {"turns": [{"text": "a", "image": "x.png"}]}, "image not replayed"),
    ("aiperf-multi-turn", {"turns": [{"text": "a", "extra": {"top_p": 1}}]}, "extra not replayed"),
    ("aiperf-multi-turn", {"turns": [{"text": "a"}, {"text": "b", "timestamp": 9}]},
     "turn 2: a timestamp only on a session's first turn"),
    ("aiperf-multi-turn", {"turns": [{"text": "a", "delay": 1, "timestamp": 2}]},
     "timestamp and delay cannot be set together"),
    ("aiperf-multi-turn", {"turns": [{"text": "a", "role": "assistant"}]},
     "role 'assistant' not replayed"),
    ("aiperf-multi-turn", {"turns": [{"role": "system", "text": "s"}]}, "no user turn"),
    ("aiperf-multi-turn", {"turns": [{"text": ""}]}, "text must be a non-empty string"),
    ("aiperf-multi-turn", {"type": "single_turn", "turns": [{"text": "a"}]}, "type must be"),
])
def test_bad_sessions_name_line_turn_and_key(fmt: str, row: dict[str, Any], says: str) -> None:
    with pytest.raises(ProbeError) as exc:
        parse_session_lines(["", json.dumps(row)], fmt, "f.jsonl")
    assert str(exc.value).startswith("f.jsonl:2: ") and says in str(exc.value)


def test_whole_file_errors() -> None:
    with pytest.raises(ProbeError, match="no sessions in the trace"):
        parse_session_lines(["", "  "], "session", "f")
    with pytest.raises(ProbeError, match="f:2: session_id 'a' appears twice"):
        parse_session_lines(_lines([{"session_id": "a", "turns": [{"user": "x"}]}] * 2),
                            "session", "f")
    with pytest.raises(ProbeError, match="f:1: not valid JSON"):
        parse_session_lines(["{"], "session", "f")
    with pytest.raises(ProbeError, match="one session a line"):
        parse_session_lines(["[1]"], "session", "f")


def test_a_token_counted_turn_is_built_from_the_class_text() -> None:
    s = Session("s1", 0.0, None, (Turn(None, 13, 0.0, None, None), Turn(None, 13, 0.0, None, None)))
    first, second = turn_text(s, 0, "alpha beta gamma"), turn_text(s, 1, "alpha beta gamma")
    # 13 tokens at 1.3 tokens a word: 10 words of the class text, tagged with session and turn
    assert first.startswith("[s1 turn 1] ") and second.startswith("[s1 turn 2] ")
    assert len(first.split()) - 3 == 10 and set(first.split()[3:]) == {"alpha", "beta", "gamma"}


def test_the_agent_refuses_a_cut_session_trace(tmp_path: Path) -> None:
    f = tmp_path / "s.jsonl"
    f.write_text(json.dumps({"turns": [{"user": "x"}]}) + "\n")
    ok = parse_arrival({"process": "trace", "trace": {"path": str(f), "format": "session"}})
    assert ok.trace is not None and ok.trace["format"] == "session"
    with pytest.raises(ProbeError, match="replayed whole"):
        parse_arrival({"process": "trace", "requests": 2,
                       "trace": {"path": str(f), "format": "session"}})


def test_trace_spec_of_a_session_trace(tmp_path: Path) -> None:
    f = tmp_path / "s.jsonl"
    f.write_text("".join(json.dumps(r) + "\n" for r in [
        {"session_id": "a", "shared_prefix": "one two three four five six seven eight nine ten",
         "turns": [{"input_tokens": 100, "max_tokens": 50}, {"input_tokens": 30, "think_s": 4}]},
        {"session_id": "b", "start_s": 10, "turns": [{"user": "x", "tool_wait_s": 1}]}]))
    spec = trace_spec(f, "session", 2.0)
    assert spec["format"] == "session" and spec["requests"] == 3 and spec["sessions"] == 2
    assert spec["span_s"] == pytest.approx((10 + 1) / 2)  # b: starts at 10, waits 1; a: waits 4
    # a's last prompt: the prefix (10 words = 13 tokens), turn 1 (100), its answer (50), turn 2
    assert spec["max_prompt_tokens"] == 13 + 100 + 50 + 30
    with pytest.raises(ConfigError) as exc:
        trace_spec(f, "aiperf-multi-turn", 1.0)  # a tailpod session file read as AIPerf's
    assert exc.value.exit_code == 2 and "unknown key(s)" in str(exc.value)


def test_cli_refuses_a_bad_session_trace_before_the_ledger(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TAILPOD_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("TAILPOD_ENV_FILE", os.devnull)
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"turns": [{"user": "a", "input_tokens": 3}]}) + "\n")
    result = CliRunner().invoke(app, ["benchmark", "--trace", str(bad), "--trace-format",
                                      "session"])
    assert result.exit_code == 2, result.output
    assert "bad.jsonl:1:turn1:giveexactlyoneofuser" in "".join(result.output.split())
    assert "Traceback" not in result.output
    assert not (tmp_path / "home" / "ledger.json").exists()
