"""`matrix --run-id` resumes a matrix with its cards as they were bought: an unmarked card the
first run rented on-demand is not turned into a spot card by `--spot` on the resume, and one a
`--spot` matrix rented spot is not rented on-demand by a resume that says `--no-spot` (a card's
report and its $/Mtok read one purchase; the budget was projected at it). The resume is refused
with exit 2 naming the card and how it was bought, before anything is rented or settled."""

from __future__ import annotations

import dataclasses

import pytest

from tailpod.cli.matrix import run_matrix
from tailpod.config import Settings
from tailpod.engines.base import EngineConfig
from tailpod.ledger import Ledger
from tailpod.measure.matrix_run import BudgetPolicy
from tailpod.results.matrix import parse_cards
from tailpod.sandbox import Sandbox

from .test_matrix_faults import SWEEP, TINY, SandboxSteps
from .test_mixed_spot_matrix import invoke, settings  # noqa: F401  (the fixture)

VAST = "vastai:RTX 4090"  # unmarked: on-demand, or spot under --spot


def _failed_first_run(sandbox: Sandbox, settings: Settings, spot: bool) -> str:  # noqa: F811
    sandbox.add_fault("capacity", provider="vast", gpu="RTX 4090")
    first = run_matrix(dataclasses.replace(settings, spot=spot), cards=parse_cards([VAST], spot),
                       sweep=SWEEP, cost=TINY, budget=5.0, parallel=1,
                       base=EngineConfig(engine="vllm", model="org/tiny"), steps=SandboxSteps(),
                       policy=BudgetPolicy(poll_s=0.05, margin_s=0.0))
    assert first is not None and first.state.card(VAST)["status"] == "failed"
    assert first.state.card(VAST)["spot"] is spot
    sandbox.clear_faults()
    return str(first.state.data["matrix_id"])


@pytest.mark.parametrize(("first_spot", "flag", "bought"),
                         [(False, "--spot", "on-demand"), (True, "--no-spot", "spot")])
def test_a_resume_that_changes_a_cards_purchase_is_refused_before_renting(
        sandbox: Sandbox, settings: Settings, monkeypatch: pytest.MonkeyPatch,  # noqa: F811
        first_spot: bool, flag: str, bought: str) -> None:
    matrix_id = _failed_first_run(sandbox, settings, first_spot)
    held = len(Ledger(settings.state_dir).all())
    result = invoke(sandbox, settings, monkeypatch, "--run-id", matrix_id, flag)
    said = " ".join(result.output.split())
    assert result.exit_code == 2, result.output
    assert f"card {VAST!r} was rented {bought}" in said, result.output
    assert "Traceback" not in result.output
    assert len(Ledger(settings.state_dir).all()) == held  # nothing rented
    assert sandbox.billing_now() == []


def test_a_spot_matrix_resumed_without_the_flag_keeps_renting_spot(
        sandbox: Sandbox, settings: Settings, monkeypatch: pytest.MonkeyPatch,  # noqa: F811
        ) -> None:
    matrix_id = _failed_first_run(sandbox, settings, True)
    # the plan through the CLI says so, a bid taken without --spot as for a :spot card
    dry = invoke(sandbox, settings, monkeypatch, "--run-id", matrix_id, "--bid", "0.3",
                 "--dry-run")
    assert dry.exit_code == 0, dry.output
    assert "spot at a bid of $0.3/h" in " ".join(dry.output.split()), dry.output
    steps = SandboxSteps()
    resumed = run_matrix(settings, cards=None, sweep=SWEEP, cost=TINY, budget=5.0, parallel=1,
                         base=EngineConfig(engine="vllm", model="org/tiny"), steps=steps,
                         run_id=matrix_id, policy=BudgetPolicy(poll_s=0.05, margin_s=0.0))
    assert resumed is not None and resumed.state.card(VAST)["status"] == "done"
    (tag,) = steps.rented
    record = Ledger(settings.state_dir).get(tag)
    assert record is not None and record.provider == "vastai" and record.extra.spot is True
    assert resumed.state.card(VAST)["spot"] is True
    assert sandbox.billing_now() == []
