"""Agent sessions end to end on a sandbox pod (vast.ai emulated, real sshd, the real CPU engine):
`benchmark --trace sessions.jsonl --trace-format session` with a plain and an ngram arm, each turn
sending the conversation so far; then `report`, whose "Sessions, by turn" section must give each
turn's acceptance as recomputed here from the rows' own figures; the session gate leaves greedy
ngram standing; then `down`, proven. (issue 39, item 3)
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from tailpod.cli.main import app
from tailpod.results.io import load_run
from tailpod.sandbox.sshd import sshd_available
from tests.e2e.sandbox_world import rented_pod, tiny_vast_cloud

pytestmark = [
    pytest.mark.engine,
    pytest.mark.slow,  # a session trace on the CPU engine: about 3 min on 2 loaded cores
    pytest.mark.skipif(not sshd_available(), reason="OpenSSH sshd is not installed"),
]
runner = CliRunner()
MAX_TOKENS = 8
# vLLM's CPU build caches the prefix in whole KV blocks of 128 tokens (its default block size,
# vllm/platforms/cpu.py in 0.32.0): session a's prefix fills at least one block, session b's
# conversation never does, so a's later turns must read cached tokens and b's none.
CPU_BLOCK_TOKENS = 128
LONG_PREFIX = "You answer in one short sentence. Context: " + " ".join(
    f"fact{i}" for i in range(60))
SESSIONS = [
    {"session_id": "a", "shared_prefix": LONG_PREFIX, "turns": [
        {"user": "Name a colour."}, {"user": "Name another one.", "think_s": 0.2},
        {"input_tokens": 20, "tool_wait_s": 0.1}]},
    {"session_id": "b", "start_s": 0.1, "shared_prefix": "You answer in one short sentence.",
     "turns": [{"user": "Name a fruit."}, {"user": "And a vegetable?", "think_s": 0.1}]},
]
TURNS = {("a", 1), ("a", 2), ("a", 3), ("b", 1), ("b", 2)}


@pytest.fixture(scope="module")
def cloud(engine_env: dict[str, str], tiny_models: dict[str, Path]) -> Iterator[dict[str, Any]]:
    # a release with per-request speculative metrics (engines/versions.py), as the CPU build is
    with tiny_vast_cloud(engine_env, tiny_models, image="vllm/vllm-openai:v0.32.0") as world:
        yield world


def test_a_session_trace_reports_acceptance_by_turn(cloud: dict[str, Any], tmp_path: Path,
                                                    leftover_engines: Any) -> None:
    trace = tmp_path / "sessions.jsonl"
    trace.write_text("".join(json.dumps(s) + "\n" for s in SESSIONS))
    with rented_pod(cloud, leftover_engines, context_length=1024):
        bench = runner.invoke(app, [
            "benchmark", "--spec-k", "0,2", "--spec-method", "ngram", "--no-extend-k",
            "--reps", "1", "--max-tokens", str(MAX_TOKENS), "--trace", str(trace),
            "--trace-format", "session", "--run-id", "sessions"])
        assert bench.exit_code == 0, bench.output

    run_dir = cloud["home"] / "results" / "sessions"
    rows = [json.loads(line) for line in (run_dir / "rows.jsonl").read_text().splitlines()]
    for arm in ("plain", "ngram-k2"):
        reqs = {(r["session_id"], r["turn"]): r for r in rows
                if r["kind"] == "request" and r["arm"] == arm}
        assert set(reqs) == TURNS and all(r["ok"] for r in reqs.values()), reqs
        assert all(r["completion_tokens"] == MAX_TOKENS for r in reqs.values())
        # the context grows by at least the previous answer, as the engine counted it
        for sid, turn in TURNS - {("a", 1), ("b", 1)}:
            prev, cur = reqs[(sid, turn - 1)], reqs[(sid, turn)]
            assert cur["prompt_tokens"] >= prev["prompt_tokens"] + prev["completion_tokens"]
        # tailpod starts vLLM with --enable-prompt-tokens-details: every turn says what the prefix
        # cache served, in whole blocks
        for (sid, turn), r in reqs.items():
            cached = r["cached_tokens"]
            assert isinstance(cached, int) and cached % CPU_BLOCK_TOKENS == 0, r
            if sid == "b":
                assert r["prompt_tokens"] < CPU_BLOCK_TOKENS and cached == 0, r
            elif turn > 1:
                assert cached >= CPU_BLOCK_TOKENS, r
        (cell,) = [c for c in rows if c["kind"] == "cell" and c["arm"] == arm]
        assert cell["sessions"] == {"sessions": 2, "turns_max": 3, "format": "session"}

    report = runner.invoke(app, ["report", str(run_dir)])
    assert report.exit_code == 0, report.output
    assert "## Sessions, by turn" in (run_dir / "report.md").read_text()
    analysis = json.loads(runner.invoke(app, ["report", str(run_dir), "--json"]).stdout)
    by_turn = {(t["arm"], t["turn"]): t for t in analysis["sessions"]}
    assert set(by_turn) == {(a, t) for a in ("plain", "ngram-k2") for t in (1, 2, 3)}
    for turn in (1, 2, 3):
        mine = [r["spec_acceptance"] for r in rows if r["kind"] == "request"
                and r["arm"] == "ngram-k2" and r["turn"] == turn]
        assert all(s and s["source"] == "vllm_response" for s in mine), mine
        steps = sum(s["steps"] for s in mine)
        want = 1 + sum(s["accepted"] for s in mine) / steps
        assert by_turn[("ngram-k2", turn)]["acceptance_length"] == pytest.approx(want)
        assert by_turn[("plain", turn)]["acceptance_length"] is None
    # greedy ngram answers every turn as plain does: the session gate leaves it standing
    assert not load_run(run_dir).meta.arm("ngram-k2").is_void
