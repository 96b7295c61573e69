"""A measured deployment (`benchmark --deploy`, measure/deploy.py) is measured as decided or not at
all (issue 38 item 6, adversary F7 scenario 12): a deploy-lanes cell in which a lane took none of
the requests it should have (or HAProxy calls it DOWN) is void with the reason, and the deploy arm
never starts the best-K extension (a `--spec-k 0 --deploy` sweep grew K=3 and K=4)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tailpod.config import load_settings
from tailpod.ledger import Ledger, PodRecord
from tailpod.measure.deploy import DeployingHost, deploy_arm
from tailpod.measure.plan import Cell, SweepPlan, spec_arms
from tailpod.measure.sweep import RunDirectory, run_sweep
from tests.unit.measure.test_sweep import BASE, ScriptedHost, ctx

LANES = {"kind": "lanes", "admission_limit": 1,
         "lanes": [{"name": "spec", "k": 2, "method": "ngram", "maxconn": 1},
                   {"name": "plain", "k": 0, "method": None, "maxconn": None}]}


class CountedLanes(DeployingHost):
    """The deploy host with HAProxy's counters scripted: one (spec, plain) stot pair and status
    per read, in order (before the cell, after it)."""

    def __init__(self, inner: Any, tailpod_home: Path,
                 reads: list[tuple[int, int, str]]) -> None:
        settings = load_settings()
        super().__init__(inner, settings, Ledger(settings.state_dir), PodRecord(run_tag="t", provider="local"),
                         LANES, lambda _arm, _dep: [], lambda: None)
        self.reads = list(reads)

    def lane_counts(self) -> dict[str, Any] | None:
        spec, plain, status = self.reads.pop(0)
        return {"spec": {"stot": spec, "smax": 1, "status": "UP"},
                "plain": {"stot": plain, "smax": 1 if plain else 0, "status": status}}


def _cell_row(host: DeployingHost, c: int) -> dict[str, Any]:
    arm = deploy_arm(BASE, LANES)
    plan = SweepPlan(arms=[arm], concurrency=[c], reps=1)
    rows = host.run_cells(arm, [Cell(arm.label, c, 0, "prose")], plan, "r1")
    return next(r for r in rows if r["kind"] == "cell")


def test_a_deploy_lanes_cell_whose_overflow_lane_took_nothing_is_void(tailpod_home: Path) -> None:
    # c=2 over an admission limit of 1: the plain lane must take the overflow; it took 0
    # (10 -> 10) while the spec lane took the cell's requests (4 -> 12)
    host = CountedLanes(ScriptedHost({2: 50.0}), tailpod_home, [(4, 10, "UP"), (12, 10, "UP")])
    row = _cell_row(host, 2)
    assert row["void"] is True and "dead_lane" in row["flags"] and "void" in row["flags"]
    assert row["void_reason"] == ("lane plain took 0 requests at c=2, above the admission "
                                  "limit 1")
    assert row["lane_counts"]["plain"]["stot"] == 10


def test_a_lane_haproxy_calls_down_voids_the_cell(tailpod_home: Path) -> None:
    host = CountedLanes(ScriptedHost({2: 50.0}), tailpod_home, [(4, 0, "UP"), (8, 0, "DOWN")])
    row = _cell_row(host, 1)  # c=1 needs no overflow, but the deployment is not the one decided
    assert row["void"] is True and row["void_reason"] == "lane plain is DOWN (HAProxy)"


def test_a_healthy_deploy_lanes_cell_stands(tailpod_home: Path) -> None:
    host = CountedLanes(ScriptedHost({2: 50.0}), tailpod_home, [(4, 10, "UP"), (12, 13, "UP")])
    row = _cell_row(host, 2)
    assert not row.get("void") and "dead_lane" not in row.get("flags", [])
    # c=1: the plain lane takes nothing by design (limit 1) and the cell stands
    host = CountedLanes(ScriptedHost({2: 50.0}), tailpod_home, [(4, 10, "UP"), (8, 10, "UP")])
    assert not _cell_row(host, 1).get("void")


def test_the_deploy_arm_never_starts_the_k_extension(tmp_path: Path) -> None:
    # `--spec-k 0 --deploy` of a static K=2 deployment: plain and deploy-static. The deploy arm's
    # K=2 is the largest K measured and the best; it is a deployment, not a K candidate.
    host = ScriptedHost({0: 10, 2: 15, 3: 18, 4: 20, 5: 21})
    dep = {"kind": "static", "k": 2, "method": "ngram"}
    plan = SweepPlan(arms=[*spec_arms(BASE, [0], "ngram", None), deploy_arm(BASE, dep)],
                     concurrency=[1], reps=1, extend_k=True, max_k=5)
    run = run_sweep(plan, RunDirectory(tmp_path), host, ctx(), log=lambda *_: None)
    assert [a["label"] for a in run["arms"]] == ["plain", "deploy-static"]
    assert not any("extended" in n for n in run["notes"])


def test_a_spec_arm_beside_a_deploy_arm_still_extends(tmp_path: Path) -> None:
    # K=1 is the largest real K and the best of them: K=2 is measured, then K=3 (worse) stops it;
    # the deploy arm (K=4 here, the fastest) neither stops nor feeds the search
    host = ScriptedHost({0: 10, 1: 15, 2: 18, 3: 12, 4: 99, 5: 1})
    dep = {"kind": "static", "k": 4, "method": "ngram"}
    plan = SweepPlan(arms=[*spec_arms(BASE, [0, 1], "ngram", None), deploy_arm(BASE, dep)],
                     concurrency=[1], reps=1, extend_k=True, max_k=5)
    run = run_sweep(plan, RunDirectory(tmp_path), host, ctx(), log=lambda *_: None)
    assert [a["label"] for a in run["arms"]] == ["plain", "ngram-k1", "deploy-static", "ngram-k2",
                                                 "ngram-k3"]


