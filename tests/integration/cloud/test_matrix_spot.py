"""`matrix --spot` on the sandbox cloud (issue 40): every card is rented as a spot pod and priced
and budgeted at what its bid bills; a card whose provider documents no spot route (RunPod) is
refused before anything is priced, rented or written. Expected prices are worked out from the
emulator's offers: minimum bid (half the on-demand GPU price there) plus the storage of the disk
the offers are priced for (TAILPOD_DISK_GB, 80 by default)."""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path
from typing import Any

import pytest

from tailpod.cli.matrix import run_matrix
from tailpod.config import Settings, load_settings
from tailpod.engines.base import EngineConfig
from tailpod.errors import ConfigError
from tailpod.ledger import Ledger
from tailpod.measure.matrix_run import BudgetPolicy
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


def spot_matrix(settings: Settings, steps: SandboxSteps, cards: list[str], *,
                bid: float | None = None, dry_run: bool = False,
                report: dict[str, Any] | None = None) -> Any:
    return run_matrix(dataclasses.replace(settings, spot=True, bid=bid),
                      cards=parse_cards(cards), sweep=SWEEP, cost=TINY, budget=5.0, parallel=2,
                      base=EngineConfig(engine="vllm", model="org/tiny"), steps=steps,
                      dry_run=dry_run, report=report,
                      policy=BudgetPolicy(poll_s=0.05, margin_s=0.0))


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
