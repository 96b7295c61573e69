"""A new `matrix` whose card no offer could bring within the pods' TTL is refused before the
registry is asked for the image's digest and before any provider is asked for offers (#26: bad
input before any wait); the projection's hours are worked out in
tests/unit/measure/test_matrix_ttl_first.py (34 min for this sweep, default cost model)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import tailpod.pods.cloud as cloud_up
from tailpod.cli.matrix import run_matrix
from tailpod.engines.base import EngineConfig
from tailpod.errors import ConfigError
from tailpod.measure.matrix_run import CloudSteps, CostModel
from tests.helpers.matrix_offers import H200, SWEEP, matrix_settings, recording_cloud


@pytest.fixture
def cloud(monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    return recording_cloud(monkeypatch)


def test_a_new_matrix_past_the_ttl_asks_neither_the_registry_nor_a_provider(
        tmp_path: Path, cloud: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> None:
    pinned: list[Any] = []

    def pinned_image(*args: Any) -> tuple[str, None]:
        pinned.append(args)
        return "img@sha256:ab", None

    monkeypatch.setattr(cloud_up, "pinned_image", pinned_image)
    settings = matrix_settings(tmp_path, ttl_hours=0.5)
    with pytest.raises(ConfigError, match="past the pods' TTL of 0.5 h"):
        run_matrix(settings, cards=[H200], sweep=SWEEP, cost=CostModel(), budget=50.0,
                   parallel=1, base=EngineConfig(engine="vllm", model="org/m"),
                   steps=CloudSteps(), dry_run=True)
    assert pinned == [] and cloud["made"] == []
    assert not Path(settings.results_dir).exists()  # no matrix state written either
    ok = matrix_settings(tmp_path, ttl_hours=1.0)
    assert run_matrix(ok, cards=[H200], sweep=SWEEP, cost=CostModel(), budget=50.0, parallel=1,
                      base=EngineConfig(engine="vllm", model="org/m"), steps=CloudSteps(),
                      dry_run=True) is None
    assert len(pinned) == 1 and len(cloud["provider"].queries) == 1
