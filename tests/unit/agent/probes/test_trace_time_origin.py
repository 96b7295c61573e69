"""A trace's time origin (issue 37 item 10): offsets count from the earliest arrival in the file,
whatever the file's order, divided by the replay speed; `--requests`/`--duration` cut from that
origin (docs/probe.md, "trace")."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tailpod.agent.probes.arrival import parse_trace_lines, trace_from_lines


def _entries() -> list[tuple[float, int, int, tuple[int, ...]]]:
    # out of order: the earliest arrival (t = 100 s) is the file's second line, and its tie at
    # 100 s comes last in the file though its token counts sort first
    return [(105.0, 3, 30, (7,)), (100.0, 4, 40, (8, 9)), (103.0, 2, 20, ()),
            (100.0, 1, 10, (5,))]


def test_offsets_count_from_the_earliest_arrival_not_the_first_line() -> None:
    reqs = trace_from_lines(_entries(), speed=2.0)
    # sorted by time (ties keep file order): 100 (4), 100 (1), 103 (2), 105 (3); from 100 s, / 2
    assert [(r.offset, r.input_tokens, r.output_tokens, r.hash_ids) for r in reqs] == [
        (0.0, 4, 40, (8, 9)), (0.0, 1, 10, (5,)), (1.5, 2, 20, ()), (2.5, 3, 30, (7,))]


def test_requests_and_duration_cut_from_that_origin() -> None:
    assert [r.input_tokens for r in trace_from_lines(_entries(), 1.0, requests=3)] == [4, 1, 2]
    # due before 3 s at speed 1: 0, 0 (103 s is at 3 s, not before it)
    assert [r.offset for r in trace_from_lines(_entries(), 1.0, duration_s=3.0)] == [0.0, 0.0]
    assert [r.offset for r in trace_from_lines(_entries(), 1.0, duration_s=3.5)] == \
        [0.0, 0.0, 3.0]


def test_a_mooncake_file_out_of_order_starts_at_its_earliest_timestamp(tmp_path: Path) -> None:
    f = tmp_path / "t.jsonl"
    lines = [{"timestamp": 4000, "input_length": 8, "output_length": 2, "hash_ids": [1]},
             {"timestamp": 1000, "input_length": 9, "output_length": 3, "hash_ids": [2]}]
    f.write_text("".join(json.dumps(x) + "\n" for x in lines))
    with f.open() as fh:
        reqs = trace_from_lines(parse_trace_lines(fh, "mooncake", str(f)), speed=1.0)
    assert [(r.offset, r.input_tokens) for r in reqs] == [(0.0, 9), (pytest.approx(3.0), 8)]
