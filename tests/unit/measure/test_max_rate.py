"""`benchmark --find-max-rate`: per arm, bisection on the request rate for the highest rate whose
median SLO attainment meets the percentile; recorded in run.json and shown by results/slo.py."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from tailpod.agent.probes.rows import SCHEMA_VERSION
from tailpod.agent_client.driver import ArmStart
from tailpod.cli.main import app
from tailpod.engines.base import EngineConfig
from tailpod.measure.max_rate import find_max_rates
from tailpod.measure.plan import Arm, Cell, SweepPlan, max_rate_step, spec_arms
from tailpod.measure.sweep import GateResult, RunContext, RunDirectory, run_sweep
from tailpod.results.io import load_run
from tailpod.results.slo import compute, render
from tests.helpers.probe_rows import request_row

# Worked by hand for "passes iff rate <= 5.3" between 1 and 16 at tol 0.05:
# 1 pass, 16 fail; 8.5 fail; 4.75 pass; 6.625 fail; 5.6875 fail; 5.21875 pass;
# 5.453125 fail; then 5.453125 / 5.21875 - 1 = 0.0449 <= 0.05: the answer is 5.21875.
PROBES = [1.0, 16.0, 8.5, 4.75, 6.625, 5.6875, 5.21875, 5.453125]


def test_bisection_probes_the_hand_worked_sequence() -> None:
    passed: dict[float, bool] = {}
    seen = []
    for _ in range(20):
        nxt, answer = max_rate_step(1.0, 16.0, passed, 0.05)
        if answer is not None:
            break
        assert nxt is not None
        seen.append(nxt)
        passed[nxt] = nxt <= 5.3
    assert seen == PROBES
    assert answer == {"max_rate": 5.21875, "bracket": [5.21875, 5.453125], "status": "found"}


def test_bisection_edges() -> None:
    assert max_rate_step(1, 8, {1: False, 8: False}, 0.1)[1] == {
        "max_rate": None, "bracket": [None, 1], "status": "below_low"}
    assert max_rate_step(1, 8, {1: True, 8: True}, 0.1)[1] == {
        "max_rate": 8, "bracket": [8, None], "status": "at_least_high"}
    # a pass above a failing rate (noise) does not move the bracket past the failure
    assert max_rate_step(1, 8, {1: True, 8: True, 4: False}, 0.1) == (2.5, None)


class RateHost:
    """Attainment by arm and rate: plain meets 90% up to 5.3 req/s; reps vary around it."""

    measured_from = "pod"

    def __init__(self) -> None:
        self.cells: list[str] = []

    def restart(self, arm: Arm) -> ArmStart:
        return ArmStart(startup={"engine": "vllm", "facts": {}, "lines": []}, argv=["x"],
                        startup_s=0.0)

    def run_cells(self, arm: Arm, cells: list[Cell], plan: SweepPlan,
                  run_id: str) -> list[dict[str, Any]]:
        out = []
        for cell in cells:
            assert cell.rate is not None
            self.cells.append(cell.cell_id)
            att = (0.95 if cell.rate <= 5.3 else 0.5) + (0.01 if cell.rep else -0.01)
            out.append({"kind": "cell", "schema_version": SCHEMA_VERSION, "cell": cell.cell_id, "arm": arm.label,
                        "concurrency": 0, "rep": cell.rep, "prompt_class": cell.prompt_class,
                        "run_id": run_id, "requests": 10, "wall_s": 1.0, "output_tok_s": 10.0, "output_tokens": 10,
                        "failed": 0, "arrival": {"process": "poisson", "rate": cell.rate,
                                                 "seed": cell.rep, "requests": 10},
                        "slo": {"ttft_ms": 500.0}, "slo_percentile": 90.0,
                        "slo_attainment": att, "goodput_rps": att * 10})
        return out

    def gate_reference(self, arm: Arm, plan: SweepPlan) -> dict[str, Any]:
        return {}

    def gate_compare(self, arm: Arm, reference: dict[str, Any], plan: SweepPlan) -> GateResult:
        return GateResult("pass", "token_ids", 1)

    def bare_decode(self, arm: Arm, plan: SweepPlan) -> dict[str, Any]:
        return {"status": "not_measured"}

    def close(self) -> None:
        pass


def test_find_max_rates_records_the_answer_per_arm(tmp_path: Path) -> None:
    plan = SweepPlan(arms=spec_arms(EngineConfig(engine="vllm", model="/m"), [0], "mtp", None),
                     reps=2, request_rates=[16.0, 1.0], slo={"ttft_ms": 500.0},
                     slo_percentile=90.0, extend_k=False)
    run_dir = RunDirectory(tmp_path / "run")
    host = RateHost()
    ctx = RunContext(run_id="r1", provider="local", model="/m", engine="vllm")
    got = find_max_rates(plan, run_dir, host, ctx, tol=0.05, rounds=10, log=lambda m: None)
    assert got["arms"]["plain"]["max_rate"] == 5.21875
    assert got["arms"]["plain"]["probed"] == sorted(PROBES)
    # every probed rate measured at both reps, none twice
    assert len(host.cells) == len(set(host.cells)) == 2 * len(PROBES)
    saved = json.loads((tmp_path / "run" / "run.json").read_text())
    assert saved["max_rate_search"]["arms"]["plain"]["status"] == "found"
    section = compute(load_run(tmp_path / "run"))
    assert section is not None and section["search"]["arms"]["plain"]["max_rate"] == 5.21875
    md = "\n".join(render(section))
    assert "| plain | 5.21875 | [5.21875, 5.45312) | found |" in md


@pytest.mark.parametrize("args", [
    ["--find-max-rate", "--request-rate", "1,8"],  # no SLO
    ["--find-max-rate", "--request-rate", "4", "--slo", "ttft_ms=500"],  # one bound
    ["--find-max-rate", "--request-rate", "1,inf", "--slo", "ttft_ms=500"],
])
def test_bad_search_flags_exit_2_before_the_ledger(args: list[str], tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TAILPOD_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("TAILPOD_ENV_FILE", os.devnull)
    result = CliRunner().invoke(app, ["benchmark", *args])
    assert result.exit_code == 2 and "--find-max-rate needs" in " ".join(result.output.split())


class SaturatingHost(RateHost):
    """A server of capacity 5 req/s: below it every request waits 0.2 s from its schedule; at 8
    req/s and above the queue grows by 0.1 s a request (request i waits 0.2 + 0.1 i s)."""

    def run_cells(self, arm: Arm, cells: list[Cell], plan: SweepPlan,
                  run_id: str) -> list[dict[str, Any]]:
        out = []
        for row, cell in zip(super().run_cells(arm, cells, plan, run_id), cells, strict=True):
            assert cell.rate is not None
            grows = cell.rate > 5
            out += [request_row(arm=arm.label, cell=cell.cell_id, index=i, ok=True,
                                e2e_sched_s=0.2 + (0.1 * i if grows else 0.0))
                    for i in range(10)]
            out.append(row)
        return out


def test_the_ladder_stops_above_the_saturated_rate(tmp_path: Path) -> None:
    from tailpod.measure.sweep import saturated_rate

    plan = SweepPlan(arms=spec_arms(EngineConfig(engine="vllm", model="m"), [0], "mtp", None),
                     reps=2, request_rates=[2.0, 4.0, 8.0, 16.0, float("inf")])
    host = SaturatingHost()
    run_dir = RunDirectory(tmp_path / "run")
    run = run_sweep(plan, run_dir, host, RunContext(run_id="r", provider="local", model="m",
                                                    engine="vllm"), log=lambda *_: None)
    # rep 0 climbs 2, 4, 8 (saturated: second half 0.2 + 0.1 * 7 = 0.9 s at the median against
    # 0.4 s for the first), skips 16, still runs inf; rep 1
    # descends from inf, skips 16, and measures 8 (the saturated rate itself) again
    assert host.cells == ["plain|rate2|r0|prose", "plain|rate4|r0|prose", "plain|rate8|r0|prose",
                          "plain|rateinf|r0|prose", "plain|rateinf|r1|prose",
                          "plain|rate8|r1|prose", "plain|rate4|r1|prose", "plain|rate2|r1|prose"]
    assert saturated_rate(run_dir.read_rows(), "plain") == 8.0
    skipped = [n for n in run["notes"] if "skipped" in n]  # once, though both reps skip 16
    assert skipped == ["plain: rate 16 skipped, the ladder saturated at 8 req/s (latency "
                       "from the schedule grew across the cell)"]
    host.cells.clear()  # a resume skips the same cells again, measures nothing new
    run_sweep(plan, run_dir, host, RunContext(run_id="r", provider="local", model="m",
                                              engine="vllm"), log=lambda *_: None)
    assert host.cells == []
    off = SweepPlan(arms=plan.arms, reps=1, request_rates=[2.0, 8.0, 16.0], saturation_stop=False)
    host2 = SaturatingHost()
    run_sweep(off, RunDirectory(tmp_path / "off"), host2, RunContext(
        run_id="o", provider="local", model="m", engine="vllm"), log=lambda *_: None)
    assert host2.cells == ["plain|rate2|r0|prose", "plain|rate8|r0|prose", "plain|rate16|r0|prose"]
    assert off.to_json()["saturation_stop"] is False
