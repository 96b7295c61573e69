"""`matrix` refuses a card past the pods' TTL before any provider is asked for offers when no
offer could bring it within the TTL; the card's own check after its offer stays (#26: bad input
before any wait). tests/unit/cli/test_matrix_ttl_before_registry.py: the same before the
registry is asked for a new matrix's image digest.

The offer can change a projection only by naming the GPU as the provider does, which may find an
earlier run's measured start under that name (measure/matrix_run.py price_cards). The providers
here are in memory and record every call; earlier runs are run.json files written by hand. The
hours are worked from CostModel's defaults (20 min setup, 1 min a cell, 2 min teardown) and the
sweep of tests/helpers/matrix_offers.py (one arm, 4 levels x 3 reps = 12 cells): 20 + 12 + 2 = 34 min
= 0.567 h."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tailpod.config import Settings
from tailpod.errors import ConfigError
from tailpod.measure.matrix_run import (
    CostModel,
    least_card_hours,
    price_cards,
)
from tests.helpers.matrix_offers import H200, PROVIDER_NAME, SWEEP, matrix_settings, recording_cloud


@pytest.fixture
def cloud(monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    return recording_cloud(monkeypatch)


def _earlier(settings: Settings, run_id: str, gpu: str, setup_s: float) -> None:
    """An earlier vllm run of one `gpu` on runpod whose start billed `setup_s` to serving."""
    run_dir = Path(settings.results_dir) / run_id
    run_dir.mkdir(parents=True)
    (run_dir / "run.json").write_text(json.dumps({
        "run_id": run_id, "created_at": "2026-12-01T10:00:00+00:00", "provider": "runpod",
        "pod": {"gpu": gpu, "gpu_count": 1}, "engine": {"name": "vllm"},
        "cold_start": {"billed_s_to_ready": setup_s}}))


def test_a_card_past_the_ttl_is_refused_before_any_offer_query(
        tmp_path: Path, cloud: dict[str, Any]) -> None:
    settings = matrix_settings(tmp_path, ttl_hours=0.5)  # 34 min > 30 min
    with pytest.raises(ConfigError) as refused:
        price_cards(settings, [H200], SWEEP, CostModel(), 50.0, "img@sha256:ab")
    assert refused.value.message.startswith(
        "runpod:H200 is projected to need 0.57 h (setup 20 min (default), restart 3 min "
        "(default)), past the pods' TTL of 0.5 h")
    assert refused.value.exit_code == 2
    assert cloud["made"] == [] and cloud["provider"].queries == []


def test_a_card_within_the_ttl_reaches_its_offer_and_is_priced(
        tmp_path: Path, cloud: dict[str, Any]) -> None:
    settings = matrix_settings(tmp_path, ttl_hours=1.0)
    prices = price_cards(settings, [H200], SWEEP, CostModel(), 50.0, "img@sha256:ab")
    assert cloud["provider"].queries == [(["H200"], 1, None)]
    # 34 min at $3.60/h = $2.04
    assert (prices["runpod:H200"]["price_per_hr"], prices["runpod:H200"]["projected_usd"]) == (
        3.6, 2.04)


def test_the_cards_own_check_after_its_offer_still_refuses(
        tmp_path: Path, cloud: dict[str, Any]) -> None:
    """Under the card's own name nothing was measured (34 min, within 1 h), so the offer is
    asked; it names the GPU as the provider does, under which an earlier start billed 60 min:
    60 + 12 + 2 = 74 min = 1.23 h, past the TTL."""
    settings = matrix_settings(tmp_path, ttl_hours=1.0)
    _earlier(settings, "slow", PROVIDER_NAME, 3600.0)
    assert least_card_hours(Path(settings.results_dir), H200, "vllm", SWEEP, CostModel())[0] \
        == pytest.approx(34 / 60)
    with pytest.raises(ConfigError, match="runpod:H200 is projected to need 1.23 h"):
        price_cards(settings, [H200], SWEEP, CostModel(), 50.0, "img@sha256:ab")
    assert cloud["provider"].queries == [(["H200"], 1, None)]


def test_an_earlier_start_under_another_name_that_could_fit_is_not_refused_up_front(
        tmp_path: Path, cloud: dict[str, Any]) -> None:
    """The default 34 min is past a 0.5 h TTL, but an earlier start under the provider's name
    billed 10 min (10 + 12 + 2 = 24 min): an offer naming that GPU fits, so the offer is asked
    and the card is priced at those 24 min ($3.60/h x 0.4 h = $1.44)."""
    settings = matrix_settings(tmp_path, ttl_hours=0.5)
    _earlier(settings, "fast", PROVIDER_NAME, 600.0)
    _earlier(settings, "other-count", "H200", 1.0)  # another engine would not count either
    path = Path(settings.results_dir) / "other-count" / "run.json"
    path.write_text(path.read_text().replace('"vllm"', '"sglang"'))
    hours, used = least_card_hours(Path(settings.results_dir), H200, "vllm", SWEEP, CostModel())
    assert hours == pytest.approx(24 / 60) and used["run_id"] == "fast"
    prices = price_cards(settings, [H200], SWEEP, CostModel(), 50.0, "img@sha256:ab")
    assert cloud["provider"].queries == [(["H200"], 1, None)]
    assert prices["runpod:H200"]["projected_usd"] == 1.44


def test_no_ttl_refuses_nothing_up_front(tmp_path: Path, cloud: dict[str, Any]) -> None:
    settings = matrix_settings(tmp_path, ttl_hours=0.0)  # --ttl-hours 0: no TTL
    price_cards(settings, [H200], SWEEP, CostModel(), 50.0, "img@sha256:ab")
    assert len(cloud["provider"].queries) == 1
