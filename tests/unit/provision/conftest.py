"""Fixtures of the provision tests."""

from __future__ import annotations

from typing import Any

import pytest

import tailpod.provision.providers as providers_mod
from tailpod.config import Settings
from tailpod.errors import ConfigError
from tailpod.provision.base import Provider


@pytest.fixture
def made(monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """get_provider answers the scripted cloud put in `made[name]` (else "no API key"); each call
    is logged in `made["calls"]` and the settings it was given in `made["settings"]`."""
    made: dict[str, Any] = {"calls": []}

    def get_provider(name: str, settings: Settings, **options: Any) -> Provider:
        made["calls"].append((name, options))
        made.setdefault("settings", []).append(settings)
        if name not in made:
            raise ConfigError(f"{name}: no API key")
        provider: Provider = made[name]
        return provider

    monkeypatch.setattr(providers_mod, "get_provider", get_provider)
    return made
