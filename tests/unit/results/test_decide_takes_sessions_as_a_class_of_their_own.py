"""`decide` takes session workloads as a class of their own (issue 39 item 6): the cells of a
session trace's replay form the `session` class, whichever prompt class their turns were built
from; a speculative arm that the session gate voids (the stand-in server plants a divergence, with
speculation on only, where a turn's conversation holds a marker) cannot win it, nor the pooled
view, but still wins the prose class it is faster on; decision.json's `by_class` says which arm
serves sessions."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tailpod.agent.probes.load import RunOptions, run_cells
from tailpod.agent.probes.rows import CellPlan
from tailpod.results import decide
from tailpod.results.analysis import analyze
from tailpod.results.deployment import Decision
from tailpod.results.io import Run, load_run, write_run
from tailpod.results.schema import ROW_ADAPTER, CellRow, RequestRow
from tailpod.sandbox.synthetic_server import SyntheticConfig, SyntheticServer
from tests.helpers.run_builder import build_run

SESSIONS = [
    {"session_id": "a", "turns": [{"user": "first"}, {"user": "second MARK"}, {"user": "third"}]},
    {"session_id": "b", "turns": [{"user": "other"}, {"user": "other again"}]},
]
# the speculative arm is 50 % faster in every closed-loop cell: only a gate keeps it out
SWEEP = {"plain": {1: [100.0, 101.0, 99.0]}, "mtp-k2": {1: [150.0, 151.0, 149.0]}}
DIVERGES = "session gate failed on prose: session 'a' turn 2 (rep 0) answers differently " \
           "from plain, after 1 identical turn(s)"


def _replay(tmp_path: Path, arm: str, cfg: SyntheticConfig, pclass: str = "prose"
            ) -> tuple[CellRow, list[RequestRow]]:
    """One session cell of `arm`, measured by the probe against the stand-in server."""
    trace = tmp_path / "s.jsonl"
    trace.write_text("".join(json.dumps(s) + "\n" for s in SESSIONS))
    with SyntheticServer(cfg) as server:
        opts = RunOptions(base_url=server.base_url, max_tokens=6, engine="vllm", warmup=0)
        plan = CellPlan(arm, 1, 0, pclass, "cold", cell_id=f"{arm}|trace|r0|{pclass}",
                        arrival={"process": "trace", "trace": {"path": str(trace),
                                                               "format": "session"}})
        _, raw = run_cells(opts, [plan])
    rows = [ROW_ADAPTER.validate_python(r) for r in raw]
    (cell,) = [r for r in rows if isinstance(r, CellRow)]
    return cell, [r for r in rows if isinstance(r, RequestRow)]


@pytest.fixture(scope="module")
def replays(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    tmp = tmp_path_factory.mktemp("sessions")
    fast = {"ttft_s": 0.002, "rate": 2000.0}
    return {
        "plain": _replay(tmp, "plain", SyntheticConfig(**fast)),
        "diverging": _replay(tmp, "mtp-k2", SyntheticConfig(
            **fast, spec_k=2, diverge_position=2, diverge_marker="MARK")),
        "faithful": _replay(tmp, "mtp-k2", SyntheticConfig(**fast, spec_k=2)),
    }


def _run(tmp_path: Path, cells: list[tuple[CellRow, list[RequestRow]]],
         tok_s: dict[str, float]) -> Run:
    """The closed-loop sweep plus the session cells, each session cell's throughput set to
    `tok_s[arm]` so the figures are known here; read back from disk as `report` would."""
    run = build_run(SWEEP)
    for cell, reqs in cells:
        run.cells.append(cell.model_copy(update={"output_tok_s": tok_s[cell.arm]}))
        run.requests.extend(reqs)
    return load_run(write_run(run, tmp_path / "run"))


def _band(dec: dict[str, Any], pc: str, axis: str) -> dict[str, Any]:
    (band,) = [b for b in dec["bands"] if b["prompt_class"] == pc and b["axis"] == axis]
    return band


def _decide(run: Run) -> dict[str, Any]:
    return decide.compute([run], analyses=[analyze(run)])


def test_an_arm_the_session_gate_voids_cannot_serve_sessions(
    tmp_path: Path, replays: dict[str, Any]
) -> None:
    run = _run(tmp_path, [replays["plain"], replays["diverging"]],
               {"plain": 100.0, "mtp-k2": 150.0})
    assert run.meta.arm("mtp-k2").void_reason == DIVERGES  # type: ignore[union-attr]
    dec = _decide(run)
    session = _band(dec, decide.SESSION_CLASS, "trace")
    assert session["arm"] == "plain" and session["compared"] == ["plain"]
    assert session["void_here"] == {"mtp-k2": DIVERGES}
    # the session cells were built from prose turns, but they are not prose's: the prose class is
    # the closed-loop cells alone, where the arm is faster and behaved
    assert [b["axis"] for b in dec["bands"] if b["prompt_class"] == "prose"] == ["concurrency"]
    assert _band(dec, "prose", "concurrency")["arm"] == "mtp-k2"
    assert {b["arm"] for b in dec["bands"] if b["prompt_class"] == decide.POOLED} == {"plain"}
    serves = dec["by_class"]
    assert serves["prose"]["arm"] == "mtp-k2"
    assert serves[decide.SESSION_CLASS]["arm"] == "plain"
    assert serves[decide.SESSION_CLASS]["excluded"] == {"mtp-k2": DIVERGES}
    Decision.model_validate(dec)
    text = "\n".join(decide.render(dec))
    assert "- session → plain (mtp-k2 void here: session gate failed on prose" in text
    assert "- prose → mtp-k2" in text


def test_an_arm_that_replays_faithfully_wins_sessions_it_is_faster_on(
    tmp_path: Path, replays: dict[str, Any]
) -> None:
    run = _run(tmp_path, [replays["plain"], replays["faithful"]],
               {"plain": 100.0, "mtp-k2": 150.0})
    assert not run.meta.arm("mtp-k2").is_void  # type: ignore[union-attr]
    dec = _decide(run)
    assert _band(dec, decide.SESSION_CLASS, "trace")["arm"] == "mtp-k2"
    assert dec["by_class"][decide.SESSION_CLASS]["arm"] == "mtp-k2"


def test_session_cells_of_several_prompt_classes_pool_into_one_session_class(
    tmp_path: Path, replays: dict[str, Any]
) -> None:
    cell, reqs = replays["plain"]
    # plain replayed the sessions twice, built from prose and from code turns: 100 tok/s over
    # 10 s and 200 tok/s over 30 s are one session workload at (100*10 + 200*30) / 40 tok/s
    prose = cell.model_copy(update={"output_tok_s": 100.0, "wall_s": 10.0})
    code = cell.model_copy(update={"output_tok_s": 200.0, "wall_s": 30.0, "prompt_class": "code",
                                   "cell": "plain|trace|r0|code"})
    run = build_run(SWEEP)
    run.cells += [prose, code]
    run.requests += reqs
    dec = _decide(run)
    session = _band(dec, decide.SESSION_CLASS, "trace")
    assert session["candidates"]["plain"]["median"] == pytest.approx(175.0)
    assert session["candidates"]["plain"]["n"] == 1  # one rep, not two
    assert not [b for b in dec["bands"] if b["prompt_class"] == "code"]
