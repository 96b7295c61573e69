"""A trace file's refusal names the file, line, turn and key, but does not echo a string value
from the file: the check runs before tailpod has loaded (and so can mask by value) the user's
secrets, and a trace may carry one (an API key pasted where a number or a session id belongs). A
short word such as a role or a type is still shown."""

from __future__ import annotations

import json

import pytest

from tailpod.agent.probes.arrival import parse_trace_lines
from tailpod.agent.probes.basics import ProbeError
from tailpod.agent.probes.session_replay import parse_session_lines

KEY = "plainvalueSECRET42xyz"  # no credential shape: only masking by value would catch it


@pytest.mark.parametrize(("fmt", "lines", "named"), [
    ("session", [{"turns": [{"user": "hi", "think_s": KEY}]}], "trace:1: turn 1: think_s"),
    ("session", [{"turns": [{"user": "hi", "max_tokens": KEY}]}], "trace:1: turn 1: max_tokens"),
    ("session", [{"session_id": KEY, "turns": [{"user": "hi"}]}] * 2, "trace:2: session_id"),
    ("aiperf-multi-turn", [{"type": KEY, "turns": [{"text": "hi"}]}], "trace:1: type"),
    ("aiperf-multi-turn", [{"turns": [{"text": "hi", "role": KEY}]}], "trace:1: turn 1: role"),
    ("aiperf-multi-turn", [{"turns": [{"text": "hi", "delay": KEY}]}], "trace:1: turn 1: delay"),
])
def test_session_refusals_name_the_place_not_the_string(fmt: str, lines: list[object],
                                                        named: str) -> None:
    with pytest.raises(ProbeError) as caught:
        parse_session_lines([json.dumps(x) for x in lines], fmt)
    assert named in str(caught.value)
    assert KEY not in str(caught.value)


@pytest.mark.parametrize("fmt", ["tailpod", "mooncake"])
def test_request_trace_refusals_name_the_place_not_the_string(fmt: str) -> None:
    line = ({"t_start": 1.0, "prompt_tokens": KEY, "completion_tokens": 3} if fmt == "tailpod"
            else {"timestamp": 1, "input_length": KEY, "output_length": 3})
    with pytest.raises(ProbeError) as caught:
        parse_trace_lines([json.dumps(line)], fmt)
    assert "trace:1:" in str(caught.value) and KEY not in str(caught.value)


def test_a_short_word_and_a_number_are_still_shown() -> None:
    with pytest.raises(ProbeError, match="role 'assistant' not replayed"):
        parse_session_lines([json.dumps({"turns": [{"text": "hi", "role": "assistant"}]})],
                            "aiperf-multi-turn")
    with pytest.raises(ProbeError, match="not -1"):
        parse_session_lines([json.dumps({"turns": [{"user": "hi", "think_s": -1}]})], "session")
