"""A trace file read line by line (agent/probes/arrival.py `parse_trace_lines`): which lines of a
tailpod request log count, the three names of its start time, and each refusal's exact words
with the file and line it names (issue 37 item 10, `make mutate`)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tailpod.agent.probes.arrival import parse_trace_lines
from tailpod.agent.probes.basics import ProbeError


def _lines(*objs: Any) -> list[str]:
    return [o if isinstance(o, str) else json.dumps(o) for o in objs]


def test_a_tailpod_log_keeps_the_requests_that_returned_tokens() -> None:
    got = parse_trace_lines(_lines(
        "",  # a blank line is passed over, and the lines after it still read
        {"t_start": 10.0, "prompt_tokens": 1, "completion_tokens": 1},
        {"kind": "cell", "t_start": 11.0, "prompt_tokens": 5, "completion_tokens": 5},
        {"ok": False, "t_start": 12.0, "prompt_tokens": 5, "completion_tokens": 5},
        {"ok": True, "t_start": 13.0, "prompt_tokens": 5, "completion_tokens": None},
        {"ok": True, "ts": 14.5, "prompt_tokens": 7, "completion_tokens": 3},
        {"timestamp": 15, "prompt_tokens": 8, "completion_tokens": 4},
    ), "tailpod")
    assert got == [(10.0, 1, 1, ()), (14.5, 7, 3, ()), (15.0, 8, 4, ())]


def test_a_mooncake_line_without_hash_ids_has_none() -> None:
    got = parse_trace_lines(_lines({"timestamp": 1500, "input_length": 1, "output_length": 1}),
                            "mooncake")
    assert got == [(1.5, 1, 1, ())]


@pytest.mark.parametrize(("lines", "fmt", "message"), [
    (["", "", "{"], "tailpod", "trace:3: not valid JSON"),
    (["[1]"], "tailpod", "trace:1: not a JSON object"),
    (['{"timestamp": "x", "input_length": 1, "output_length": 1}'], "mooncake",
     "trace:1: timestamp (ms) must be a number"),
    (['{"timestamp": true, "input_length": 1, "output_length": 1}'], "mooncake",
     "trace:1: timestamp (ms) must be a number"),
    (['{"timestamp": Infinity, "input_length": 1, "output_length": 1}'], "mooncake",
     "trace:1: timestamp (ms) must be a number"),
    (['{"timestamp": 1, "input_length": 1, "output_length": 1, "hash_ids": ""}'], "mooncake",
     "trace:1: hash_ids must be a list of integers"),
    (['{"timestamp": 1, "input_length": 1, "output_length": 1, "hash_ids": [1, "x"]}'],
     "mooncake", "trace:1: hash_ids must be a list of integers"),
    (['{"timestamp": 1, "input_length": 0, "output_length": 1}'], "mooncake",
     "trace:1: input_length must be an integer >= 1, not 0"),
    (['{"timestamp": 1, "input_length": 1, "output_length": true}'], "mooncake",
     "trace:1: output_length must be an integer >= 1, not True"),
    (['{"prompt_tokens": 1, "completion_tokens": 1}'], "tailpod",
     "trace:1: t_start (epoch s) must be a number"),
    (['{"t_start": true, "prompt_tokens": 1, "completion_tokens": 1}'], "tailpod",
     "trace:1: t_start (epoch s) must be a number"),
    (['{"t_start": Infinity, "prompt_tokens": 1, "completion_tokens": 1}'], "tailpod",
     "trace:1: t_start (epoch s) must be a number"),
    (['{"t_start": 1, "prompt_tokens": "5", "completion_tokens": 1}'], "tailpod",
     "trace:1: prompt_tokens must be an integer >= 1, not '5'"),
    (['{"t_start": 1, "prompt_tokens": 5, "completion_tokens": 0}'], "tailpod",
     "trace:1: completion_tokens must be an integer >= 1, not 0"),
    (['{"kind": "cell"}', '{"ok": false, "completion_tokens": 3}'], "tailpod",
     "trace: no requests in the trace"),
])
def test_each_refusal_names_the_line_and_what_is_wrong(lines: list[str], fmt: str,
                                                       message: str) -> None:
    with pytest.raises(ProbeError) as err:
        parse_trace_lines(lines, fmt)
    assert str(err.value) == message


def test_the_refusal_names_the_file_it_read() -> None:
    with pytest.raises(ProbeError) as err:
        parse_trace_lines(["{"], "tailpod", "logs/run.jsonl")
    assert str(err.value) == "logs/run.jsonl:1: not valid JSON"
