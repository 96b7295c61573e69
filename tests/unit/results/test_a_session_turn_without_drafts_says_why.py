"""A session turn whose requests carried their own figures but no verify step (the drafter
proposed nothing: ngram under a tool-call grammar did so on the CPU engine, found by
tests/e2e/test_structured_tools_sessions_and_soak_report_every_figure.py) has no acceptance
length, and the sessions section says why rather than leave a bare dash; a turn of the plain arm,
whose responses carry no speculative figures, says that instead."""

from __future__ import annotations

from typing import Any

from tailpod.results.analysis import analyze_for_report
from tailpod.results.report import render_run_markdown
from tailpod.results.schema import RequestRow
from tests.helpers.run_builder import build_run


def _req(arm: str, sid: str, turn: int, **kw: Any) -> RequestRow:
    return RequestRow(run_id="run-a", arm=arm, concurrency=0, rep=0, prompt_class="tools",
                      cell=f"{arm}|trace|r0|tools", index=turn, ok=True, t_start=0.0,
                      session_id=sid, turn=turn, answer_digest="d", ttft_s=0.1, e2e_s=0.2, **kw)


def test_a_turn_that_drafted_nothing_says_so() -> None:
    nothing = {"source": "vllm_response", "steps": 0, "accepted": 0, "draft_tokens": 0,
               "acceptance_length": None}
    run = build_run({"plain": {1: [1.0]}, "ngram-k2": {1: [1.0]}})
    run.requests[:] = [_req("ngram-k2", s, 1, spec_acceptance=nothing) for s in "ab"] + \
        [_req("plain", s, 1) for s in "ab"]
    values = analyze_for_report(run)
    turns = {t["arm"]: t for t in values.analysis["sessions"]}
    spec, plain = turns["ngram-k2"], turns["plain"]
    assert spec["acceptance_length"] is None
    assert spec["void_fields"]["acceptance_length"] == \
        "no verify step: the drafter proposed nothing in 2 request(s)"
    assert plain["void_fields"]["acceptance_length"] == \
        "no request carried its own speculative figures"
    md = render_run_markdown(values.analysis, values.report_only)
    section = md.split("## Sessions, by turn\n", 1)[1].split("\n## ", 1)[0]
    assert "| ngram-k2 | tools | cold | 1 | 2 | 0 | — (no verify step) |" in section
