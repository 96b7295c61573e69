"""Issue 39's done-when, end to end on a sandbox pod (vast.ai emulated, real sshd, the real CPU
vLLM 0.32.0 with xgrammar and ngram speculation on the tiny checkpoint): one `benchmark` with
`--prompt-classes structured,tools`, a session trace and `--soak` must report, per arm, the
requests' own acceptance cross-checked against /metrics, validity and finish reasons, the draft
slots a grammar killed, acceptance by turn and by context band, and the time to first answer
token, each with a value or a stated reason; `decide` then names the arm that serves each of the
structured, tools and session classes. The pod is torn down with its proof.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from tailpod.cli.main import app
from tailpod.results.decide import SESSION_CLASS
from tailpod.sandbox.sshd import sshd_available
from tests.e2e.sandbox_world import rented_pod, tiny_vast_cloud

pytestmark = [
    pytest.mark.engine,
    pytest.mark.slow,  # two arms, a one-minute soak each, sessions: about 4 min on 2 loaded cores
    pytest.mark.skipif(not sshd_available(), reason="OpenSSH sshd is not installed"),
]
runner = CliRunner()
MAX_TOKENS = 32
SESSIONS = [
    {"session_id": "a", "shared_prefix": "You answer as the schema asks.", "turns": [
        {"user": "Book a flight to Oslo."}, {"user": "Now one back.", "think_s": 0.1}]},
    {"session_id": "b", "start_s": 0.1, "turns": [
        {"user": "Add a meeting on Monday."}, {"input_tokens": 20, "tool_wait_s": 0.1}]},
]
ARMS = ("plain", "ngram-k2")
CLASSES = ("structured", "tools")


@pytest.fixture(scope="module")
def cloud(engine_env: dict[str, str], tiny_models: dict[str, Path]) -> Iterator[dict[str, Any]]:
    with tiny_vast_cloud(engine_env, tiny_models, image="vllm/vllm-openai:v0.32.0") as world:
        yield world


def test_one_run_reports_every_figure_of_issue_39(cloud: dict[str, Any], tmp_path: Path,
                                                  leftover_engines: Any) -> None:
    trace = tmp_path / "sessions.jsonl"
    trace.write_text("".join(json.dumps(s) + "\n" for s in SESSIONS))
    with rented_pod(cloud, leftover_engines, context_length=2048):
        bench = runner.invoke(app, [
            "benchmark", "--spec-k", "0,2", "--spec-method", "ngram", "--no-extend-k",
            "--reps", "1", "--concurrency", "1", "--requests-per-cell", "3",
            "--max-tokens", str(MAX_TOKENS), "--prompt-classes", ",".join(CLASSES),
            "--trace", str(trace), "--trace-format", "session", "--soak", "1",
            "--run-id", "done-when"])
        assert bench.exit_code == 0, bench.output

    missing = figures_missing(cloud["home"] / "results" / "done-when")
    assert not missing, "\n".join(missing)


def figures_missing(run_dir: Path) -> list[str]:
    """What the run's rows, report, analysis and decision lack of issue 39's figures (empty: all
    there, each with a value or a stated reason)."""
    rows = [json.loads(line) for line in (run_dir / "rows.jsonl").read_text().splitlines()]
    report = runner.invoke(app, ["report", str(run_dir)])
    assert report.exit_code == 0, report.output
    md = (run_dir / "report.md").read_text()
    analysis = json.loads(runner.invoke(app, ["report", str(run_dir), "--json"]).stdout)
    decided = runner.invoke(app, ["decide", str(run_dir), "--json"])
    assert decided.exit_code == 0, decided.output
    decision = json.loads(decided.stdout)
    missing: list[str] = []  # every figure is checked, so one run names every gap

    def need(ok: bool, what: str) -> None:
        if not ok:
            missing.append(what)

    cells = [r for r in rows if r["kind"] == "cell"]
    reqs = [r for r in rows if r["kind"] == "request"]
    # the tools class ran on vLLM at all: every arm started with a tool-call parser
    need(all(r["ok"] for r in reqs if r["prompt_class"] == "tools"),
         "tools requests failed: " + str([r.get("error") for r in reqs if not r["ok"]][:2]))
    # per-request acceptance, cross-checked against /metrics cell by cell (a cell that drafted
    # nothing, as ngram may under a tool-call grammar, has no length on either side)
    spec_cells = [c for c in cells if c["arm"] == "ngram-k2" and c.get("acceptance")]
    need(any(c["acceptance"]["drafts"] for c in spec_cells), "no ngram cell drafted")
    for c in spec_cells:
        per = c.get("acceptance_per_request")
        if per is None:
            missing.append(f"{c['cell']}: no per-request acceptance")
            continue
        drafts = c["acceptance"]["drafts"]
        if not drafts:
            need(per["token_weighted"] is None and "no_drafts" in c["flags"],
                 f"{c['cell']}: drafted nothing, yet a per-request length")
            continue
        agree = abs(per["token_weighted"] - c["acceptance"]["acceptance_length"]) <= 1 / drafts
        need(agree or "per_request_acceptance_mismatch" in c["flags"],
             f"{c['cell']}: per-request and /metrics disagree unflagged")
    per_request = {(r["arm"], r["prompt_class"]): r for r in analysis.get("per_request") or []}
    need("## Acceptance per request" in md, "report: no per-request acceptance section")
    # validity and finish reasons per arm and class
    for arm in ARMS:
        for pc in CLASSES:
            s = (per_request.get((arm, pc)) or {}).get("structure")
            need(bool(s and s["finish_reasons"] and s["requests"]),
                 f"no structure figures for {arm}/{pc}")
    need("## Structured output and tool calls" in md, "report: no structure section")
    # grammar-killed drafts: the draft slots never verified, per speculative arm and class
    for pc in CLASSES:
        acc = (per_request.get(("ngram-k2", pc)) or {}).get("acceptance") or {}
        need(isinstance(acc.get("drafts_trimmed"), int), f"no drafts_trimmed for ngram-k2/{pc}")
    need("grammar-killed" in md, "report: no grammar-killed drafts")
    # acceptance by turn (sessions) and by context band
    turns = [t for t in analysis.get("sessions") or [] if t["arm"] == "ngram-k2"]
    need({t["turn"] for t in turns} == {1, 2}, f"session turns: {turns}")
    need(all(t["acceptance_length"] is not None or t["void_fields"].get("acceptance_length")
             for t in turns), "a turn without acceptance nor why")
    need("## Sessions, by turn" in md, "report: no sessions section")
    need(any(r.get("bands") for r in per_request.values()), "no acceptance by context band")
    need("## Acceptance by context length" in md, "report: no context band section")
    # the soak: minute by minute, its collapse rule stated
    soaks = analysis.get("soak") or []
    need({s["arm"] for s in soaks} == set(ARMS), f"soak rows: {[s['arm'] for s in soaks]}")
    need("## Soak: acceptance over time" in md, "report: no soak section")
    # time to first answer token: a value, or why there is none
    need("## Time to first answer token" in md, "report: no time to first answer token")
    # decide: a session replay is its own class, whichever prompt classes built its turns (a
    # trace run measures no closed-loop cell, so the structured and tools classes are decided
    # only where a run measured them: tests/unit/results/test_decide_serves_each_prompt_class.py)
    serves = decision.get("by_class") or {}
    need(set(serves) == {SESSION_CLASS} and bool(serves[SESSION_CLASS].get("arm")),
         f"decide names no arm for sessions: {serves}")
    return missing
