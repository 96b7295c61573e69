"""Sessions in the results (results/session_gate.py, results/sections/sessions.py): the session
gate voids a speculative arm whose answer to a turn differs from plain's after identical earlier
turns (the stand-in server plants the divergence only where the speculative arm sees a marker), and
the report gives acceptance, latency and cached tokens by turn position, thin p50s void."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tailpod.agent.probes.load import RunOptions, run_cells
from tailpod.agent.probes.rows import CellPlan
from tailpod.results.analysis import analyze_for_report
from tailpod.results.io import Run, parse_rows
from tailpod.results.report import render_run_markdown
from tailpod.results.schema import RequestRow
from tailpod.results.session_gate import apply_session_gate, session_verdicts
from tailpod.sandbox.synthetic_server import SyntheticConfig, SyntheticServer
from tests.helpers.run_builder import build_run

SESSIONS = [
    {"session_id": "a", "turns": [{"user": "first"}, {"user": "second MARK"}, {"user": "third"}]},
    {"session_id": "b", "turns": [{"user": "other"}, {"user": "other again"}]},
]


def _rows(tmp_path: Path, arm: str, cfg: SyntheticConfig) -> list[RequestRow]:
    trace = tmp_path / "s.jsonl"
    trace.write_text("".join(json.dumps(s) + "\n" for s in SESSIONS))
    with SyntheticServer(cfg) as server:
        opts = RunOptions(base_url=server.base_url, max_tokens=6, engine="vllm", warmup=0)
        plan = CellPlan(arm, 0, 0, "prose", "cold", cell_id=f"{arm}|trace|r0|prose",
                        arrival={"process": "trace", "trace": {"path": str(trace),
                                                               "format": "session"}})
        _, rows = run_cells(opts, [plan])
    parsed, warnings = parse_rows([json.dumps(r) for r in rows])
    assert not warnings
    return [r for r in parsed if isinstance(r, RequestRow)]


def _run(requests: list[RequestRow]) -> Run:
    run = build_run({"plain": {1: [1.0]}, "ngram-k3": {1: [1.0]}})
    run.requests[:] = requests
    return run


def test_the_turn_where_speculation_diverges_voids_the_arm(tmp_path: Path) -> None:
    plain = _rows(tmp_path, "plain", SyntheticConfig(ttft_s=0.002, rate=2000.0))
    # the speculative server answers differently from token 2 on wherever MARK is in the
    # conversation: session a from turn 2, never in session b
    diverging = _rows(tmp_path, "ngram-k3", SyntheticConfig(
        ttft_s=0.002, rate=2000.0, spec_k=3, diverge_position=2, diverge_marker="MARK"))
    run = _run(plain + diverging)
    assert session_verdicts(run.meta, run.requests) == {
        "ngram-k3": "session gate failed on prose: session 'a' turn 2 (rep 0) answers "
                    "differently from plain, after 1 identical turn(s)"}
    meta = apply_session_gate(run.meta, run.requests)
    spec = next(a for a in meta.arms if a.label == "ngram-k3")
    assert spec.void and "turn 2" in (spec.void_reason or "")
    # the same speculative server without the plant passes
    faithful = _rows(tmp_path, "ngram-k3", SyntheticConfig(ttft_s=0.002, rate=2000.0, spec_k=3))
    assert session_verdicts(run.meta, plain + faithful) == {}


def _req(arm: str, rep: int, sid: str, turn: int, digest: str | None, **kw: Any) -> RequestRow:
    return RequestRow(run_id="run-a", arm=arm, concurrency=0, rep=rep, prompt_class="prose",
                      cell=f"{arm}|trace|r{rep}|prose", index=turn, ok=digest is not None,
                      t_start=0.0, session_id=sid, turn=turn, answer_digest=digest, **kw)


def test_an_unstable_reference_is_not_judged_past() -> None:
    # plain's two reps answered turn 2 differently: past it nothing is known about the histories
    rows = [_req("plain", 0, "s", 1, "p1"), _req("plain", 1, "s", 1, "p1"),
            _req("plain", 0, "s", 2, "p2"), _req("plain", 1, "s", 2, "q2"),
            _req("plain", 0, "s", 3, "p3"), _req("plain", 1, "s", 3, "p3"),
            _req("ngram-k3", 0, "s", 1, "p1"), _req("ngram-k3", 0, "s", 2, "p2"),
            _req("ngram-k3", 0, "s", 3, "zz")]
    run = _run(rows)
    assert session_verdicts(run.meta, rows) == {}
    # a stable turn 2 makes turn 3 a reference, and the mismatch there counts
    rows[3] = _req("plain", 1, "s", 2, "p2")
    assert "turn 3" in session_verdicts(run.meta, rows)["ngram-k3"]
    # a speculative turn that failed ends the judging of its session
    rows[7] = _req("ngram-k3", 0, "s", 2, None)
    assert session_verdicts(run.meta, rows) == {}


def test_acceptance_latency_and_cache_by_turn() -> None:
    def spec(steps: int, accepted: int) -> dict[str, Any]:
        return {"source": "vllm_response", "steps": steps, "accepted": accepted,
                "acceptance_length": 1 + accepted / steps}

    rows = [
        # turn 1: two sessions; turn 2: one session (its p50s are too thin to quote)
        _req("ngram-k3", 0, "a", 1, "x", prompt_tokens=100, cached_tokens=0, ttft_s=0.1,
             e2e_s=1.0, tpot_s=0.01, spec_acceptance=spec(10, 20)),
        _req("ngram-k3", 0, "b", 1, "y", prompt_tokens=300, cached_tokens=100, ttft_s=0.3,
             e2e_s=2.0, tpot_s=0.03, spec_acceptance=spec(30, 30)),
        _req("ngram-k3", 0, "a", 2, "z", prompt_tokens=400, cached_tokens=None, ttft_s=0.2,
             e2e_s=1.5, tpot_s=0.02, spec_acceptance=spec(5, 0)),
        _req("ngram-k3", 0, "b", 2, None),
    ]
    values = analyze_for_report(_run(rows))
    turns = values.analysis["sessions"]
    assert [(t["turn"], t["requests"], t["failed"]) for t in turns] == [(1, 2, 0), (2, 1, 1)]
    one, two = turns
    assert one["acceptance_length"] == 1 + (20 + 30) / (10 + 30)  # token-weighted, not 2.5
    assert one["ttft_p50_s"] == 0.2 and one["e2e_p50_s"] == 1.5
    assert one["tpot_p50_s"] == pytest.approx(0.02)
    assert one["prompt_tokens_mean"] == 200 and one["cached_tokens_mean"] == 50
    assert one["cached_share"] == 100 / 400
    assert two["acceptance_length"] == 1.0
    assert two["ttft_p50_s"] is None and "needs at least 2" in two["void_fields"]["ttft_p50_s"]
    assert two["cached_tokens_mean"] is None and two["cached_share"] is None  # unsaid, not 0
    md = render_run_markdown(values.analysis, values.report_only)
    section = md.split("## Sessions, by turn\n", 1)[1].split("\n## ", 1)[0]
    assert "| ngram-k3 | prose | cold | 1 | 2 | 0 | 2.25 |" in section
    assert "| 25% |" in section and section.rstrip().endswith("| — |")


def test_no_session_rows_no_section() -> None:
    assert "sessions" not in analyze_for_report(_run([])).analysis
