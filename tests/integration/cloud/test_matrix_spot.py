"""`matrix --spot` on the sandbox cloud (issue 40): every card is rented as a spot pod and priced
and budgeted at what its bid bills; a card whose provider documents no spot route (RunPod) is
refused before anything is priced, rented or written. Expected prices are worked out from the
emulator's offers: minimum bid (half the on-demand GPU price there) plus the storage of the disk
the offers are priced for (TAILPOD_DISK_GB, 80 by default)."""

from __future__ import annotations

import dataclasses
import json
import math
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from tailpod.cli.matrix import run_matrix
from tailpod.config import Settings, load_settings
from tailpod.engines.base import EngineConfig
from tailpod.errors import ConfigError, TailpodError
from tailpod.ledger import Ledger, PodRecord
from tailpod.measure.matrix_run import BudgetPolicy
from tailpod.measure.sweep import RunDirectory
from tailpod.results.matrix import parse_cards
from tailpod.sandbox import Sandbox
from tailpod.sandbox.model import default_vast_offers

from .test_matrix_faults import A40, IMAGE, SWEEP, TINY, VAST4090, SandboxSteps, assert_all_down


@pytest.fixture()
def settings(sandbox: Sandbox, tailpod_home: Path) -> Settings:
    env = {**sandbox.env(), "TAILPOD_HOME": str(tailpod_home),
           "TAILPOD_RESULTS_DIR": str(tailpod_home / "results"), "TAILPOD_MODEL": "org/tiny",
           "TAILPOD_IMAGE": IMAGE, "TAILPOD_TTL_HOURS": "1"}
    return load_settings(env=env, dotenv_path=tailpod_home / "absent.env")


def small_matrix(settings: Settings, steps: SandboxSteps, cards: list[str], *,
                 dry_run: bool = False, report: dict[str, Any] | None = None) -> Any:
    """The tiny sweep on `cards` under a $5 budget, two pods at a time, through `steps`."""
    return run_matrix(settings, cards=parse_cards(cards), sweep=SWEEP, cost=TINY, budget=5.0,
                      parallel=2, base=EngineConfig(engine="vllm", model="org/tiny"),
                      steps=steps, dry_run=dry_run, report=report,
                      policy=BudgetPolicy(poll_s=0.05, margin_s=0.0))


def spot_matrix(settings: Settings, steps: SandboxSteps, cards: list[str], *,
                bid: float | None = None, dry_run: bool = False,
                report: dict[str, Any] | None = None) -> Any:
    return small_matrix(dataclasses.replace(settings, spot=True, bid=bid), steps, cards,
                        dry_run=dry_run, report=report)


def test_a_spot_card_is_priced_at_its_bid_and_rented_as_spot(
        sandbox: Sandbox, settings: Settings) -> None:
    report: dict[str, Any] = {}
    spot_matrix(settings, SandboxSteps(), [VAST4090], dry_run=True, report=report)
    disk = settings.disk_gb
    want = min(round(o.dph_base * 0.5, 4) + o.storage_cost * disk / 720
               for o in default_vast_offers()
               if o.gpu_name == "RTX 4090" and o.num_gpus == 1 and o.disk_space >= disk)
    entry = report["prices"][VAST4090]
    assert entry["spot"] is True
    assert entry["price_per_hr"] == pytest.approx(math.ceil(want * 1e4) / 1e4, abs=1e-9)
    # the on-demand price of the same offers is kept for the spot-versus-on-demand report
    on_demand = min(o.dph_base + o.storage_cost * disk / 720 for o in default_vast_offers()
                    if o.gpu_name == "RTX 4090" and o.num_gpus == 1 and o.disk_space >= disk)
    assert entry["on_demand_per_hr"] == pytest.approx(math.ceil(on_demand * 1e4) / 1e4, abs=1e-9)
    assert sandbox.meter()["resources"] == []  # a dry run rents nothing

    steps = SandboxSteps()
    run = spot_matrix(settings, steps, [VAST4090])
    ledger = Ledger(settings.state_dir)
    assert steps.rented
    for tag in steps.rented:
        record = ledger.get(tag)
        assert record is not None and record.extra.spot is True
        pod = sandbox.cloud.pods[f"vast:{record.pod_id}"]
        assert pod.meta["is_bid"] is True
        assert pod.compute_rate == pytest.approx(record.extra.bid)
    assert_all_down(sandbox, settings, run)


def test_a_card_whose_provider_sells_no_spot_is_refused_before_anything(
        sandbox: Sandbox, settings: Settings) -> None:
    steps = SandboxSteps()
    with pytest.raises(ConfigError, match="RunPod documents no spot route"):
        spot_matrix(settings, steps, [VAST4090, A40])
    assert steps.rented == []
    assert sandbox.meter()["resources"] == []
    assert Ledger(settings.state_dir).all() == []
    assert not list(Path(settings.results_dir).glob("*/matrix.json"))


class PreemptedHost:
    """The scripted pod side, whose pod loses its bid at the start of its `cut_at`-th cell: the
    emulator stops the instance (fault `outbid`, played on the next vast request) and the cell
    fails as a cell on a dead pod does."""

    def __init__(self, inner: Any, sandbox: Sandbox, pod_key: str, cut_at: int | None) -> None:
        self.inner, self.sandbox, self.pod_key, self.cut_at = inner, sandbox, pod_key, cut_at
        self.measured_from = inner.measured_from
        self.cells = 0
        self.references = 0

    def restart(self, arm: Any) -> Any:
        return self.inner.restart(arm)

    def run_cells(self, arm: Any, cells: Any, plan: Any, run_id: str) -> Any:
        self.cells += 1
        if self.cells == self.cut_at:
            pod = self.sandbox.cloud.pods[self.pod_key]
            deadline = time.monotonic() + 5.0
            while pod.started_at is None and time.monotonic() < deadline:
                time.sleep(0.02)
            self.sandbox.add_fault("outbid", provider="vast", times=1)
            httpx.get(f"{self.sandbox.vast_url}/api/v0/users/current/", timeout=10.0,
                      headers={"Authorization": f"Bearer {self.sandbox.vast_key}"})
            assert pod.status == "stopped"
            raise TailpodError("the pod stopped answering over SSH (connection reset)")
        return self.inner.run_cells(arm, cells, plan, run_id)

    def gate_reference(self, arm: Any, plan: Any) -> Any:
        self.references += 1
        return self.inner.gate_reference(arm, plan)

    def gate_compare(self, arm: Any, reference: Any, plan: Any) -> Any:
        return self.inner.gate_compare(arm, reference, plan)

    def bare_decode(self, arm: Any, plan: Any) -> Any:
        return self.inner.bare_decode(arm, plan)

    def close(self) -> None:
        self.inner.close()


class PreemptingSteps(SandboxSteps):
    def __init__(self, sandbox: Sandbox, cut_at: int) -> None:
        super().__init__()
        self.sandbox, self.cut_at = sandbox, cut_at
        self.wrapped: list[PreemptedHost] = []

    def host(self, settings: Settings, ledger: Ledger, record: PodRecord, cache: str) -> Any:
        first = not self.wrapped
        host = PreemptedHost(super().host(settings, ledger, record, cache), self.sandbox,
                             f"vast:{record.pod_id}", self.cut_at if first else None)
        self.wrapped.append(host)
        return host


def test_a_preempted_spot_card_goes_on_on_a_new_pod_and_the_report_says_so(
        sandbox: Sandbox, settings: Settings) -> None:
    steps = PreemptingSteps(sandbox, cut_at=3)  # cells 1 and 2 finish; the third is cut
    run = spot_matrix(settings, steps, [VAST4090])
    entry = run.state.card(VAST4090)
    assert entry["status"] == "done", entry
    assert len(steps.rented) == 2
    lost, new = steps.rented
    assert [p["pod"] for p in entry["preemptions"]] == [lost]
    assert_all_down(sandbox, settings, run)  # the stopped pod's disk too: nothing bills

    rows = RunDirectory(Path(entry["run_dir"])).read_rows()
    cells = [r for r in rows if r.get("kind") == "cell"]
    planned = len(SWEEP.ks) * len(SWEEP.concurrency) * SWEEP.reps
    assert len(cells) == planned
    assert len({r["cell"] for r in cells}) == planned  # no cell measured twice or half-counted
    by_pod = {r["cell"]: r["pod"]["run_tag"] for r in cells}
    assert sorted(by_pod.values()).count(lost) == 2 and sorted(by_pod.values()).count(new) == 2
    for row in rows:  # a cell's request rows come from the pod its summary names
        if row.get("kind") == "request":
            assert row["pod"]["run_tag"] == by_pod[row["cell"]]
    assert steps.wrapped[1].references == 1  # the gate's reference taken again on the new pod
    notes = json.loads((Path(entry["run_dir"]) / "run.json").read_text())["notes"]
    assert any(f"preempted: {lost} lost its bid" in n for n in notes)

    markdown = (run.state.path.parent / "matrix.md").read_text()
    assert "## Preemptions (spot)" in markdown
    assert f"{VAST4090}: 1 preemption(s)" in markdown
    assert f"cells by pod: {lost} 2, {new} 2" in markdown
    # spot against on-demand: the lost pod's dollars added to the spot cost, spend / (spend - lost)
    assert entry["on_demand_per_hr"] > entry["price_per_hr"]
    report = json.loads((run.state.path.parent / "matrix-report.json").read_text())
    card = next(c for c in report["cards"] if c["card"] == VAST4090)
    lost_usd = entry["preemptions"][0]["pod_usd"]
    factor = card["spend_usd"] / (card["spend_usd"] - lost_usd)
    assert report["spot_vs_on_demand"]
    for row in report["spot_vs_on_demand"]:
        assert row["overhead_factor"] == pytest.approx(factor)
        assert row["assumption"] is None
    assert "## Spot versus on-demand" in markdown
    assert f"{VAST4090}: 1 preemption(s) measured" in markdown
