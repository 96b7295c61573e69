"""Two figures issue 39's done-when names that the report did not show although the rows carry
them (found by tests/e2e/test_structured_tools_sessions_and_soak_report_every_figure.py):

- the draft slots never verified, K × verify steps − draft tokens (vLLM's scheduler drops the
  slots a grammar rejects before it counts drafts, so under structured and tools classes these
  are the grammar-killed drafts its acceptance rate leaves out), per arm and class, with their
  share of K × steps;
- the time to first answer token, per arm and class, beside the time to first token: with
  reasoning the first `content` after the reasoning deltas, without it the first token itself
  (said so), and void where its percentile would fall on a request that never answered."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tailpod.results.analysis import analyze
from tailpod.results.io import Run, load_run, write_run
from tailpod.results.report import render_run_markdown
from tailpod.results.schema import RequestRow
from tests.helpers.run_builder import build_run


def _req(arm: str, i: int, pclass: str = "structured", **kw: Any) -> RequestRow:
    return RequestRow(run_id="run-a", arm=arm, concurrency=1, rep=0, prompt_class=pclass,
                      cell=f"{arm}|c1|r0|{pclass}", index=i, ok=True, cache="cold",
                      completion_tokens=20, t_start=1000.0 + i, measured_from="pod", **kw)


def _spec(steps: int, accepted: int, draft_tokens: int, trimmed: int) -> dict[str, Any]:
    return {"source": "vllm_response", "steps": steps, "accepted": accepted,
            "draft_tokens": draft_tokens, "drafts_trimmed": trimmed,
            "acceptance_length": 1 + accepted / steps}


def _analysis(tmp_path: Path, requests: list[RequestRow]) -> dict[str, Any]:
    run: Run = build_run({"plain": {1: [1.0]}, "mtp-k2": {1: [1.0]}})
    run.requests = requests
    run.cells = [c.model_copy(update={"acceptance_per_request": {"requests": 1}})
                 if c.arm == "mtp-k2" else c for c in run.cells]
    run.cells += [c.model_copy(update={"prompt_class": "structured",
                                       "cell": c.cell.replace("|prose", "|structured")})
                  for c in run.cells]
    return analyze(load_run(write_run(run, tmp_path / "run")))


def test_the_drafts_a_grammar_killed_are_counted_and_shown(tmp_path: Path) -> None:
    # K = 2: request 0 had 10 steps (20 slots) of which 14 were drafted, 6 killed; request 1 had
    # 5 steps, every slot drafted
    an = _analysis(tmp_path, [
        _req("mtp-k2", 0, spec_acceptance=_spec(10, 8, 14, 6), ttft_s=0.1),
        _req("mtp-k2", 1, spec_acceptance=_spec(5, 5, 10, 0), ttft_s=0.1),
    ])
    (row,) = [r for r in an["per_request"] if r["arm"] == "mtp-k2"]
    assert row["acceptance"]["drafts_trimmed"] == 6
    assert row["acceptance"]["drafts_trimmed_share"] == pytest.approx(6 / 30)
    md = render_run_markdown(an)
    section = md.split("## Acceptance per request\n", 1)[1].split("\n## ", 1)[0]
    assert "grammar-killed" in section
    assert "| 6 (20%) |" in section


def test_an_engine_that_does_not_say_leaves_the_figure_unknown(tmp_path: Path) -> None:
    spec = {"source": "sglang_response", "steps": 10, "accepted": 5, "acceptance_length": 1.5}
    an = _analysis(tmp_path, [_req("mtp-k2", 0, spec_acceptance=spec, ttft_s=0.1)])
    (row,) = [r for r in an["per_request"] if r["arm"] == "mtp-k2"]
    assert row["acceptance"]["drafts_trimmed"] is None  # unknown, never 0


def test_time_to_first_answer_without_reasoning_is_the_first_token(tmp_path: Path) -> None:
    an = _analysis(tmp_path, [_req("plain", i, ttft_s=t, json_ok=True, schema_ok=True,
                                   finish_reason="stop") for i, t in enumerate((0.1, 0.3, 0.2))])
    (row,) = [r for r in an["per_request"] if r["arm"] == "plain"]
    assert row["ttfa"] == {"requests": 3, "reasoned": 0, "ttft_p50_s": pytest.approx(0.2),
                           "ttfa_p50_s": pytest.approx(0.2), "void": None}
    md = render_run_markdown(an)
    section = md.split("## Time to first answer token\n", 1)[1].split("\n## ", 1)[0]
    assert "| plain | structured | 3 | 0 | 0.2 | 0.2 |" in section
    assert "no request reasoned here, so the first answer token is the first token" \
        in section.lower()


def test_time_to_first_answer_with_reasoning_and_one_that_never_answered(
    tmp_path: Path
) -> None:
    rows = [_req("plain", 0, ttft_s=0.1, ttfa_s=0.5, json_ok=True, finish_reason="stop"),
            _req("plain", 1, ttft_s=0.1, ttfa_s=0.7, json_ok=True, finish_reason="stop"),
            _req("plain", 2, ttft_s=0.1, ttfa_s=None, flags=["no_answer"], json_ok=False,
                 finish_reason="length")]
    (row,) = [r for r in _analysis(tmp_path, rows)["per_request"] if r["arm"] == "plain"]
    # sorted 0.5, 0.7, never: the p50 is the middle one, an answer that came
    assert row["ttfa"]["ttfa_p50_s"] == pytest.approx(0.7) and row["ttfa"]["reasoned"] == 3
    rows[1] = _req("plain", 1, ttft_s=0.1, ttfa_s=None, flags=["no_answer"], json_ok=False,
                   finish_reason="length")
    (row,) = [r for r in _analysis(tmp_path, rows)["per_request"] if r["arm"] == "plain"]
    assert row["ttfa"]["ttfa_p50_s"] is None
    assert "never answered" in row["ttfa"]["void"]


def test_a_class_whose_drafter_proposed_nothing_says_so(tmp_path: Path) -> None:
    """ngram under a tool-call grammar proposed nothing on the CPU engine (the e2e run): its
    per-request lengths and its context band are void with that reason, not bare dashes."""
    nothing = {"source": "vllm_response", "steps": 0, "accepted": 0, "draft_tokens": 0,
               "drafts_trimmed": 0, "acceptance_length": None}
    an = _analysis(tmp_path, [_req("mtp-k2", i, spec_acceptance=nothing, ttft_s=0.1,
                                   prompt_tokens=30) for i in range(2)])
    (row,) = [r for r in an["per_request"] if r["arm"] == "mtp-k2"]
    assert row["acceptance"]["void"] == "no verify step: the drafter proposed nothing"
    md = render_run_markdown(an)
    per = md.split("## Acceptance per request\n", 1)[1].split("\n## ", 1)[0]
    assert "| mtp-k2 | structured | 2 | — (no verify step) |" in per
    bands = md.split("## Acceptance by context length\n", 1)[1].split("\n## ", 1)[0]
    assert "| mtp-k2 | structured | <1k | 2 | — (no verify step) |" in bands
