"""A provider in memory for `matrix`'s TTL tests (tests/unit/measure/test_matrix_ttl_first.py,
tests/unit/cli/test_matrix_ttl_before_registry.py): its offers name the card's GPU as the provider
does, at $3.60/h, and it records every offer query and every provider made."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import tailpod.provision.providers as providers_mod
from tailpod.config import Settings
from tailpod.measure.matrix_run import SweepSpec
from tailpod.provision.base import Offer
from tailpod.results.matrix import Card

# one arm, 4 levels x 3 reps = 12 cells: with CostModel's defaults (20 min setup, 1 min a cell,
# 2 min teardown) 20 + 12 + 2 = 34 min = 0.567 h a card
SWEEP = SweepSpec(ks=(0,), concurrency=(1, 2, 4, 8), reps=3)
H200 = Card("runpod", "H200")
PROVIDER_NAME = "NVIDIA H200 SXM"  # how the provider's offer names the card's GPU


class Recording:
    """A provider whose offers name `gpu` at $3.60/h; every query is logged."""

    def __init__(self, gpu: str = PROVIDER_NAME) -> None:
        self.gpu = gpu
        self.queries: list[tuple[list[str], int, float | None]] = []

    def offers(self, gpu_preference: list[str], gpu_count: int,
               max_price: float | None) -> list[Offer]:
        self.queries.append((gpu_preference, gpu_count, max_price))
        return [Offer("runpod", self.gpu, gpu_count, 3.6, True)]


def recording_cloud(monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """`get_provider` answers one Recording (`state["provider"]`); each name asked for is kept
    in `state["made"]`."""
    state: dict[str, Any] = {"made": [], "provider": Recording()}

    def get_provider(name: str, settings: Settings, **options: Any) -> Recording:
        state["made"].append(name)
        provider: Recording = state["provider"]
        return provider

    monkeypatch.setattr(providers_mod, "get_provider", get_provider)
    return state


def matrix_settings(tmp_path: Path, ttl_hours: float) -> Settings:
    return Settings(home=tmp_path / "home", results_dir=tmp_path / "results",
                    ttl_hours=ttl_hours, engine="vllm", model="org/m")
