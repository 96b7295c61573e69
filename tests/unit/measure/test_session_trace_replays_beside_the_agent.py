"""`benchmark --trace F --trace-format session`: the sweep's plan carries the session trace, the
file travels beside the pod agent once, and the agent (a child process, as on a local pod)
replays every session turn by turn (measure/plan.py, measure/hosts.py, agent/probes/session_replay.py)."""

from __future__ import annotations

import json
from pathlib import Path

from tailpod.engines.base import EngineConfig
from tailpod.measure.plan import SweepPlan, spec_arms, trace_spec
from tailpod.results.io import parse_rows
from tailpod.results.schema import RequestRow
from tailpod.sandbox.synthetic_server import SyntheticConfig
from tests.unit.measure.test_trace_plan import run_beside_a_local_agent

SESSIONS = [
    {"session_id": "a", "shared_prefix": "Be brief.",
     "turns": [{"user": "one"}, {"user": "two", "think_s": 0.02}]},
    {"session_id": "b", "turns": [{"input_tokens": 8, "max_tokens": 3}]},
]


def test_a_session_trace_replays_beside_the_agent(tmp_path: Path) -> None:
    f = tmp_path / "s.jsonl"
    f.write_text("".join(json.dumps(s) + "\n" for s in SESSIONS))
    arms = spec_arms(EngineConfig(engine="vllm", model="m"), [0], "mtp", None)
    plan = SweepPlan(arms=arms, reps=1, max_tokens=5, trace=trace_spec(f, "session", 1.0))
    assert plan.to_json()["trace"]["requests"] == 3
    state = tmp_path / "agent-state"
    rows = run_beside_a_local_agent(
        plan, state, SyntheticConfig(rate=4000.0, ttft_s=0.002, prefix_cache=True))
    assert (state / plan.trace["name"]).read_bytes() == f.read_bytes()  # type: ignore[index]
    parsed, warnings = parse_rows([json.dumps(r) for r in rows])
    assert not warnings
    reqs = {(r.session_id, r.turn): r for r in parsed if isinstance(r, RequestRow)}
    assert set(reqs) == {("a", 1), ("a", 2), ("b", 1)} and all(r.ok for r in reqs.values())
    assert [reqs[k].completion_tokens for k in (("a", 1), ("a", 2), ("b", 1))] == [5, 5, 3]
    assert reqs[("a", 2)].cached_tokens == reqs[("a", 1)].prompt_tokens
    assert reqs[("a", 2)].turn_wait_kind == "think" and reqs[("a", 2)].cell == "plain|trace|r0|prose"
