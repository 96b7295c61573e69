"""A trace's refusals in full (agent/probes/arrival.py): a value that is neither a number nor a
short word is named by its JSON kind (object or array, never its text: the file is read before
tailpod can mask secrets by value), a line nested past the JSON decoder's recursion is refused
naming FILE:LINE, and a session trace given a request count or a duration is refused in words
(a session trace is replayed whole)."""

from __future__ import annotations

import json

import pytest

from tailpod.agent.probes.arrival import parse_arrival, parse_trace_lines
from tailpod.agent.probes.basics import ProbeError


@pytest.mark.parametrize(("value", "kind"), [({"n": 512}, "a JSON object"),
                                              ([512, 3], "a JSON array")])
def test_a_count_given_as_an_object_or_array_is_named_by_its_kind(value: object,
                                                                  kind: str) -> None:
    line = {"timestamp": 0, "input_length": value, "output_length": 3, "hash_ids": []}
    with pytest.raises(ProbeError) as err:
        parse_trace_lines(["", json.dumps(line)], "mooncake", "m.jsonl")
    assert str(err.value) == f"m.jsonl:2: input_length must be an integer >= 1, not {kind}"


def test_a_line_nested_past_the_decoders_recursion_is_refused_by_line() -> None:
    deep = "[" * 100_000 + "]" * 100_000
    with pytest.raises(ProbeError) as err:
        parse_trace_lines([json.dumps({"t_start": 0.0}), deep], "tailpod", "t.jsonl")
    assert str(err.value) == "t.jsonl:2: JSON nested too deeply"


@pytest.mark.parametrize("extra", [{"requests": 4}, {"duration_s": 30}])
@pytest.mark.parametrize("fmt", ["session", "aiperf-multi-turn"])
def test_a_session_trace_with_a_count_or_a_duration_is_refused_in_words(
    fmt: str, extra: dict[str, int]
) -> None:
    raw = {"process": "trace", "trace": {"path": "sessions.jsonl", "format": fmt}, **extra}
    with pytest.raises(ProbeError) as err:
        parse_arrival(raw)
    assert str(err.value) == "a session trace is replayed whole (no requests or duration_s)"
