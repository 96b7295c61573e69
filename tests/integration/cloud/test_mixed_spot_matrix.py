"""A matrix of spot and on-demand cards on the sandbox cloud (issue 40's done-when): the user marks
which cards are spot (`vastai:RTX 4090:spot`) beside an on-demand RunPod card, the plan says each
card's purchase and price before anything rents, each card is budgeted at what it bills, and when
the vast card's bid is lost mid-sweep (the emulator's `outbid` fault) the matrix still finishes:
every pod proven down (the stopped pod with its disk), the report naming the preemption and its
minutes and dollars, and no cell's rows coming from two pods. Expected prices are worked out from
the emulator's offers (tailpod/sandbox/model.py): RunPod's A40 at $0.40/h on-demand, vast's spot
at the minimum bid (half the on-demand GPU price) plus the storage of the disk offers are priced
for (TAILPOD_DISK_GB, 80 by default)."""

from __future__ import annotations

import json
import math
import re
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from tailpod.cli.main import app
from tailpod.cli.matrix import run_matrix
from tailpod.config import Settings, load_settings
from tailpod.engines.base import EngineConfig
from tailpod.ledger import Ledger, PodRecord
from tailpod.measure.matrix_run import BudgetPolicy
from tailpod.measure.sweep import RunDirectory
from tailpod.sandbox import Sandbox
from tailpod.sandbox.model import default_vast_offers

from .test_matrix_faults import A40, IMAGE, SWEEP, TINY, SandboxSteps, assert_all_down
from .test_matrix_spot import PreemptedHost, small_matrix

VAST_SPOT = "vastai:RTX 4090:spot"


@pytest.fixture()
def settings(sandbox: Sandbox, tailpod_home: Path) -> Settings:
    env = {**sandbox.env(), "TAILPOD_HOME": str(tailpod_home),
           "TAILPOD_RESULTS_DIR": str(tailpod_home / "results"), "TAILPOD_MODEL": "org/tiny",
           "TAILPOD_IMAGE": IMAGE, "TAILPOD_TTL_HOURS": "1"}
    return load_settings(env=env, dotenv_path=tailpod_home / "absent.env")


def vast_4090_prices(disk_gb: int) -> tuple[float, float]:
    """(spot, on-demand) $/h of the cheapest single RTX 4090 vast offer, storage included, as
    the provider rounds a price up to 1e-4."""
    offers = [o for o in default_vast_offers()
              if o.gpu_name == "RTX 4090" and o.num_gpus == 1 and o.disk_space >= disk_gb]
    spot = min(round(o.dph_base * 0.5, 4) + o.storage_cost * disk_gb / 720 for o in offers)
    demand = min(o.dph_base + o.storage_cost * disk_gb / 720 for o in offers)
    return math.ceil(spot * 1e4) / 1e4, math.ceil(demand * 1e4) / 1e4


class OutbidOnVast(SandboxSteps):
    """The vast card's first pod loses its bid at the start of its third cell; every other pod
    (the RunPod card's, the vast card's replacement) measures undisturbed."""

    def __init__(self, sandbox: Sandbox) -> None:
        super().__init__()
        self.sandbox = sandbox
        self.cut: PreemptedHost | None = None

    def host(self, settings: Settings, ledger: Ledger, record: PodRecord, cache: str) -> Any:
        inner = super().host(settings, ledger, record, cache)
        if record.provider != "vastai" or self.cut is not None:
            return inner
        self.cut = PreemptedHost(inner, self.sandbox, f"vast:{record.pod_id}", cut_at=3)
        return self.cut


def mixed(settings: Settings, steps: SandboxSteps, *, dry_run: bool = False,
          report: dict[str, Any] | None = None) -> Any:
    return small_matrix(settings, steps, [A40, VAST_SPOT], dry_run=dry_run, report=report)


def test_each_card_is_priced_and_budgeted_at_its_own_purchase(
        sandbox: Sandbox, settings: Settings) -> None:
    report: dict[str, Any] = {}
    mixed(settings, SandboxSteps(), dry_run=True, report=report)
    spot, demand = vast_4090_prices(settings.disk_gb)
    runpod, vast = report["prices"][A40], report["prices"][VAST_SPOT]
    assert (runpod["spot"], runpod["price_per_hr"]) == (False, pytest.approx(0.40))
    assert (vast["spot"], vast["price_per_hr"]) == (True, pytest.approx(spot, abs=1e-9))
    assert vast["on_demand_per_hr"] == pytest.approx(demand, abs=1e-9)
    # the budget counts each card at what it bills: on-demand for one, the bid for the other
    assert report["projected_usd"] == pytest.approx(
        round(0.40 * runpod["hours"], 4) + round(spot * vast["hours"], 4), abs=1e-9)
    assert sandbox.meter()["resources"] == []


def test_a_mixed_matrix_survives_a_preemption_and_proves_every_pod_down(
        sandbox: Sandbox, settings: Settings) -> None:
    steps = OutbidOnVast(sandbox)
    run = mixed(settings, steps)
    state = run.state.data["cards"]
    assert {label: e["status"] for label, e in state.items()} == \
        {A40: "done", VAST_SPOT: "done"}
    ledger = Ledger(settings.state_dir)
    (runpod_tag,) = state[A40]["pods"]
    lost, new = state[VAST_SPOT]["pods"]
    # each pod bought as its card says: the RunPod card on-demand, the vast card as a bid
    runpod_pod = ledger.get(runpod_tag)
    assert runpod_pod is not None and not runpod_pod.extra.spot
    for tag in (lost, new):
        record = ledger.get(tag)
        assert record is not None and record.extra.spot is True
        assert sandbox.cloud.pods[f"vast:{record.pod_id}"].meta["is_bid"] is True

    # every pod proven down, the stopped pod's disk too: nothing on the meter bills or is open
    assert_all_down(sandbox, settings, run)
    assert all(r["closed"] and not r["billing"] for r in sandbox.meter()["resources"])

    # no cell mixes two pods, and each card's cells come from its own pods only
    for label, entry in state.items():
        rows = RunDirectory(Path(entry["run_dir"])).read_rows()
        pods_of_cell: dict[str, set[str]] = defaultdict(set)
        for row in rows:
            if row.get("kind") in ("cell", "request"):
                pods_of_cell[row["cell"]].add(row["pod"]["run_tag"])
        planned = len(SWEEP.ks) * len(SWEEP.concurrency) * SWEEP.reps
        assert len(pods_of_cell) == planned, label
        assert all(len(pods) == 1 for pods in pods_of_cell.values()), (label, pods_of_cell)
        assert set().union(*pods_of_cell.values()) <= set(entry["pods"]), label
    vast_cells = RunDirectory(Path(state[VAST_SPOT]["run_dir"])).read_rows()
    measured_on = [r["pod"]["run_tag"] for r in vast_cells if r.get("kind") == "cell"]
    assert sorted(measured_on) == sorted([lost, lost, new, new])  # 2 before the cut, 2 after

    # the report names the preemption, its minutes and dollars: the lost pod's whole time (from
    # its ledger record to the preemption) and its bid's price over the time from its create
    # request, both from the ledger
    (cut,) = state[VAST_SPOT]["preemptions"]
    assert cut["pod"] == lost
    lost_pod = ledger.get(lost)
    assert lost_pod is not None and lost_pod.price_per_hr is not None
    assert cut["pod_minutes"] == pytest.approx((cut["at"] - lost_pod.created_at) / 60.0,
                                               abs=0.01)
    asked = next(e["t"] for e in lost_pod.events if e["event"] == "creating")
    assert cut["pod_usd"] == pytest.approx(
        (cut["at"] - asked) / 3600.0 * lost_pod.price_per_hr, abs=2e-6)
    # the bid and the storage of the 20 GB disk SandboxSteps rents (the plan prices 80 GB)
    assert lost_pod.price_per_hr == pytest.approx(vast_4090_prices(20)[0], abs=1e-4)
    assert "preemptions" not in state[A40] or not state[A40]["preemptions"]
    markdown = (run.state.path.parent / "matrix.md").read_text()
    assert "## Preemptions (spot)" in markdown
    assert (f"- {VAST_SPOT}: 1 preemption(s); the lost pods ran {cut['pod_minutes']:.1f} min "
            f"for ${cut['pod_usd']:.4f}") in markdown
    assert f"cells by pod: {lost} 2, {new} 2" in markdown
    assert f"- {A40}:" not in markdown.split("## Preemptions (spot)")[1].split("##")[0]

    # the cards table and `cost --matrix` say how each card was bought
    spot, demand = vast_4090_prices(settings.disk_gb)
    bought = f"spot at each offer's minimum bid (+ storage); on-demand ${demand:.2f}/h"
    table = markdown.split("## Cards")[1].split("\n## ")[0]
    assert f"| {A40} | done |" in table and "| on-demand |" in table
    assert f"| {bought} |" in table
    cost = CliRunner().invoke(app, ["cost", "--matrix", str(run.state.path.parent), "--json"])
    assert cost.exit_code == 0, cost.output
    doc = json.loads(cost.output)
    assert doc["purchase"] == {A40: "on-demand", VAST_SPOT: bought}
    assert {row["card"] for row in doc["spot_vs_on_demand"]} == {VAST_SPOT}


def invoke(sandbox: Sandbox, settings: Settings, monkeypatch: pytest.MonkeyPatch,
           *args: str) -> Any:
    for key, value in {**sandbox.env(), "TAILPOD_HOME": str(settings.home),
                       "TAILPOD_RESULTS_DIR": str(settings.results_dir),
                       "TAILPOD_IMAGE": IMAGE, "TAILPOD_MODEL": "org/tiny",
                       "TAILPOD_TTL_HOURS": "1"}.items():
        monkeypatch.setenv(key, value)
    return CliRunner().invoke(app, ["matrix", "--budget", "5", "--spec-k", "0,1",
                                    "--spec-method", "ngram", "--concurrency", "1,2",
                                    "--reps", "1", *args])


def test_the_plan_names_each_cards_purchase_before_renting(
        sandbox: Sandbox, settings: Settings, monkeypatch: pytest.MonkeyPatch) -> None:
    dry = invoke(sandbox, settings, monkeypatch, "--card", A40, "--card", VAST_SPOT,
                 "--bid", "0.3", "--dry-run")
    assert dry.exit_code == 0, dry.output
    _spot, demand = vast_4090_prices(settings.disk_gb)
    said = " ".join(dry.output.split())  # the console wraps long lines
    assert re.search(rf"{re.escape(A40)}: \$0\.40/h, projected \$\d+\.\d\d \(on-demand\)",
                     said), dry.output
    # the bid is priced with the storage it bills on top: more than the bid, below on-demand
    found = re.search(rf"{re.escape(VAST_SPOT)}: \$(\d+\.\d\d)/h, projected \$\d+\.\d\d "
                      rf"\(spot at a bid of \$0\.3/h \(\+ storage\); on-demand "
                      rf"\${demand:.2f}/h\)", said)
    assert found is not None, dry.output
    assert 0.30 < float(found.group(1)) < demand
    assert sandbox.meter()["resources"] == [] and Ledger(settings.state_dir).all() == []


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--card", A40, "--card", "vastai:RTX 4090:spto"], "the purchase 'spto' is not spot"),
        (["--card", "runpod:NVIDIA A40:spot"], "RunPod documents no spot route"),
        (["--spot", "--card", "runpod:NVIDIA A40:on-demand", "--card", "vastai:RTX 4090"],
         "marked on-demand, but --spot rents every card spot"),
        (["--card", A40, "--bid", "0.3"], "needs --spot"),
        (["--card", VAST_SPOT, "--bid", "0.5", "--max-price", "0.4"], "above the price cap"),
    ],
)
def test_a_bad_purchase_is_refused_with_exit_2_before_anything(
        sandbox: Sandbox, settings: Settings, monkeypatch: pytest.MonkeyPatch,
        args: list[str], message: str) -> None:
    result = invoke(sandbox, settings, monkeypatch, *args)
    assert result.exit_code == 2, result.output
    assert message in " ".join(result.output.split()), result.output
    assert "Traceback" not in result.output
    assert sandbox.meter()["resources"] == [] and Ledger(settings.state_dir).all() == []
    assert not list(Path(settings.results_dir).glob("*/matrix.json"))


def test_a_resumed_mixed_matrix_rents_each_card_as_it_was_marked(
        sandbox: Sandbox, settings: Settings, monkeypatch: pytest.MonkeyPatch) -> None:
    sandbox.add_fault("capacity", provider="vast", gpu="RTX 4090")
    first = mixed(settings, SandboxSteps())
    assert first.state.card(VAST_SPOT)["status"] == "failed"
    assert first.state.card(A40)["status"] == "done"
    matrix_id = first.state.data["matrix_id"]
    sandbox.clear_faults()
    # the purchase comes from matrix.json: a bid is taken without --spot, as for the :spot card
    dry = invoke(sandbox, settings, monkeypatch, "--run-id", matrix_id, "--bid", "0.3",
                 "--dry-run")
    assert dry.exit_code == 0, dry.output
    assert "(spot at a bid of $0.3/h (+ storage)" in " ".join(dry.output.split())
    steps = SandboxSteps()
    resumed = run_matrix(settings, cards=None, sweep=SWEEP, cost=TINY, budget=5.0, parallel=2,
                         base=EngineConfig(engine="vllm", model="org/tiny"), steps=steps,
                         run_id=matrix_id, policy=BudgetPolicy(poll_s=0.05, margin_s=0.0))
    assert resumed is not None and resumed.state.card(VAST_SPOT)["status"] == "done"
    (tag,) = steps.rented  # only the vast card again, and as a spot pod
    record = Ledger(settings.state_dir).get(tag)
    assert record is not None and record.provider == "vastai" and record.extra.spot is True
    assert_all_down(sandbox, settings, resumed)
