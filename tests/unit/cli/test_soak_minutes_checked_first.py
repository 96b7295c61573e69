"""`benchmark --soak MINUTES` (issue 39 item 4) is checked before anything waits on a pod: a
number of minutes > 0 and finite, one soak cell no longer than a `probe run` call may take, every
arm's soak ending before the pod's TTL, each inside the pod's dead-man heartbeat timeout. A bad
value is one line, exit 2, with neither the SSH wait nor the sweep reached."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from tailpod.cli import benchmark as benchmark_cli
from tailpod.cli.main import app
from tailpod.engines.base import EngineConfig
from tailpod.ledger import PodRecord
from tailpod.measure.hosts import probe_cells
from tailpod.measure.plan import Cell, SweepPlan, schedule
from tests.helpers.benchmark_stops import stop_at_the_pod


def _pod(ttl_in_s: float | None = None, heartbeat_s: float | None = None) -> PodRecord:
    record = PodRecord(run_tag="tp-x", status="running", provider="runpod",
                       engine=EngineConfig(engine="vllm", model="org/m").to_json(),
                       ttl_expires_at=None if ttl_in_s is None else time.time() + ttl_in_s)
    if heartbeat_s is not None:
        record.extra.deadman = {"ttl_at": 0, "pid": 1, "heartbeat_timeout_s": heartbeat_s}
    return record


@pytest.fixture()
def reach(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Any:
    """Point the ledger at `record`; the SSH wait and the sweep are recorded and stopped."""
    pod = [_pod()]
    seen = stop_at_the_pod(monkeypatch, tmp_path / "home", lambda: pod[0])
    # whether the arms' checkpoints can run is another check's (engines/checkpoint.py)
    monkeypatch.setattr(benchmark_cli, "check_arms", lambda configs, settings: None)

    def run(flags: list[str], record: PodRecord | None = None) -> tuple[Any, list[str]]:
        if record is not None:
            pod[0] = record
        return CliRunner().invoke(app, ["benchmark", "tp-x", *flags]), seen

    return run


@pytest.mark.parametrize(("minutes", "says"), [
    ("0", "--soak must be a number of minutes > 0, got 0"),
    ("-5", "--soak must be a number of minutes > 0, got -5"),
    ("nan", "--soak must be a number of minutes > 0, got nan"),
    ("inf", "--soak must be a number of minutes > 0, got inf"),
    ("56", "--soak 56 is longer than one soak cell may run (55 minutes)"),
])
def test_a_soak_that_is_no_time_or_too_long_is_refused_before_the_ledger(
        reach: Any, minutes: str, says: str) -> None:
    result, seen = reach(["--soak", minutes])
    assert result.exit_code == 2, result.output
    assert says in " ".join(result.output.split())
    assert "╭" not in result.output and seen == []


def test_a_soak_past_the_pods_ttl_is_refused_before_the_ssh_wait(reach: Any) -> None:
    # two arms (plain and K=2) of 30 minutes each need 60 minutes; the TTL ends in 45
    result, seen = reach(["--soak", "30", "--spec-k", "0,2"], _pod(ttl_in_s=45 * 60))
    assert result.exit_code == 2, result.output
    said = " ".join(result.output.split())
    assert "--soak 30 minutes for 2 arm(s) needs 60 minutes, but tp-x's TTL ends in 45" in said
    assert seen == ["ledger"]


def test_a_soak_beyond_the_heartbeat_timeout_is_refused(reach: Any) -> None:
    result, seen = reach(["--soak", "31", "--spec-k", "0"], _pod(heartbeat_s=1800.0))
    assert result.exit_code == 2, result.output
    assert "is not shorter than the heartbeat timeout (30 minutes)" in " ".join(
        result.output.split())
    assert seen == ["ledger"]


def test_a_soak_that_fits_reaches_the_pod(reach: Any) -> None:
    result, seen = reach(["--soak", "20", "--spec-k", "0,2"],
                         _pod(ttl_in_s=45 * 60, heartbeat_s=1800.0))
    assert seen == ["ledger", "ssh wait"], result.output


def test_each_arm_ends_with_one_soak_cell_at_the_lowest_concurrency() -> None:
    from tailpod.measure.plan import Arm, Restart

    arms = [Arm("plain", EngineConfig(engine="vllm", model="m")),
            Arm("mtp-k2", EngineConfig(engine="vllm", model="m"))]
    plan = SweepPlan(arms=arms, concurrency=[4, 1, 2], prompt_classes=["code", "prose"],
                     reps=2, soak_s=600.0)
    steps = schedule(plan)
    soaks = [s for s in steps if isinstance(s, Cell) and s.soak]
    assert [s.cell_id for s in soaks] == ["plain|soak|c1|r0|code", "mtp-k2|soak|c1|r0|code"]
    # each right after its arm's last rep, before the next arm's restart
    for soak in soaks:
        i = steps.index(soak)
        assert i + 1 == len(steps) or isinstance(steps[i + 1], Restart)
    assert plan.to_json()["soak_s"] == 600.0
    # the agent is told to run it for the plan's time
    (sent,) = probe_cells(arms[1], [soak for soak in soaks if soak.arm == "mtp-k2"], "cold", plan)
    assert (sent["cell"], sent["concurrency"], sent["soak_s"]) == ("mtp-k2|soak|c1|r0|code", 1,
                                                                  600.0)
