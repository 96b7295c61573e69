"""A trace is one cell: the agent writes a row per request and keeps each in memory, so a trace
of more requests than TRACE_MAX_REQUESTS is refused before any wait (exit 2), in a session trace
(one session of a million short turns passed every other check, adversary pass 2026-12-06) as in
a request log."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tailpod.errors import ConfigError
from tailpod.measure.plan import TRACE_MAX_REQUESTS, trace_spec


def test_the_bound_is_past_an_hour_of_a_busy_production_log() -> None:
    # the Mooncake conversation trace: 12,031 requests over an hour (its README, kvcache-ai/
    # Mooncake FAST25-release/traces); the bound leaves room for several times that
    assert TRACE_MAX_REQUESTS == 100_000


def test_a_session_trace_past_the_bound_is_refused(tmp_path: Path) -> None:
    f = tmp_path / "s.jsonl"
    turns = [{"user": "hi"}] * (TRACE_MAX_REQUESTS + 1)
    f.write_text(json.dumps({"session_id": "a", "turns": turns}) + "\n")
    with pytest.raises(ConfigError, match=r"100,001 requests, past .* 100,000"):
        trace_spec(f, "session", 1.0)


def test_a_request_log_past_the_bound_is_refused(tmp_path: Path) -> None:
    f = tmp_path / "t.jsonl"
    line = '{"timestamp": 0, "input_length": 8, "output_length": 4}\n'
    f.write_text(line * (TRACE_MAX_REQUESTS + 1))
    with pytest.raises(ConfigError, match=r"100,001 requests, past .* 100,000"):
        trace_spec(f, "mooncake", 1.0)


def test_at_the_bound_it_is_taken(tmp_path: Path) -> None:
    f = tmp_path / "s.jsonl"
    f.write_text(json.dumps({"session_id": "a", "turns": [{"user": "hi"}] * 10}) + "\n")
    assert trace_spec(f, "session", 1.0)["requests"] == 10
