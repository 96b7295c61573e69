"""The open-loop section of a session-trace run (sandbox: `benchmark --trace s.jsonl
--trace-format session`) said "prompts built to the logged input lengths (approximately, in
words), outputs held to the logged lengths", a request log's description: a session trace's turns
go out after the previous answer and its wait, each sending the whole conversation. And a run with
no SLO printed its attainment as "-%". docs/probe.md, "Sessions"."""

from __future__ import annotations

from typing import Any

from tailpod.results.slo import render


def _point(fmt: str) -> dict[str, Any]:
    return {"arm": "plain", "reps": 1, "void": False, "format": fmt, "speed": 1.0, "requests": 12,
            "offered_rate_rps": None, "slo_attainment": None, "goodput_rps": None,
            "goodput_tok_s": None, "achieved_rate_rps": 3.08, "output_tok_s": 49.3,
            "ttft_sched_p90_s": 0.229, "schedule_lag_max_s": 0.08, "slo_met": None}


def _text(fmt: str) -> str:
    section: Any = {"slo": None, "slo_percentile": 90.0, "points": [], "trace": [_point(fmt)]}
    return "\n".join(render(section))


def test_a_session_trace_is_described_as_sessions() -> None:
    for fmt in ("session", "aiperf-multi-turn"):
        text = _text(fmt)
        assert "logged input lengths" not in text
        assert "after the previous answer" in text and "whole conversation" in text


def test_a_request_log_keeps_its_description() -> None:
    assert "prompts built to the logged input lengths" in _text("tailpod")


def test_no_slo_prints_no_percent_sign_beside_a_dash() -> None:
    assert "-%" not in _text("session")
