"""Provider names → adapters. Imports are lazy so `--provider local` never loads cloud code."""

from __future__ import annotations

import importlib
from typing import Any

from tailpod.config import Settings
from tailpod.errors import ConfigError
from tailpod.provision.base import Provider

# canonical name -> (module, class)
PROVIDERS: dict[str, tuple[str, str]] = {
    "local": ("tailpod.provision.local.provider", "LocalProvider"),
    "runpod": ("tailpod.provision.runpod.provider", "RunPodProvider"),
    "vastai": ("tailpod.provision.vastai.provider", "VastProvider"),
}
ALIASES = {"vast": "vastai", "vast.ai": "vastai", "run-pod": "runpod"}
REMOTE = ("runpod", "vastai")


def canonical_name(name: str) -> str:
    key = (name or "").strip().lower()
    key = ALIASES.get(key, key)
    if key not in PROVIDERS:
        raise ConfigError(
            f"unknown provider {name!r}",
            hint="choose one of: " + ", ".join(sorted(PROVIDERS)) + " (alias: vast)",
        )
    return key


def get_provider(name: str, settings: Settings, **options: Any) -> Provider:
    """The adapter for `name`; `options` go to the cloud adapters (timings, transport, …)."""
    key = canonical_name(name)
    module_name, class_name = PROVIDERS[key]
    cls = getattr(importlib.import_module(module_name), class_name)
    if key == "local":
        provider: Provider = cls(settings.state_dir)
        return provider
    provider = cls(settings, **options)
    return provider


def remote_providers(settings: Settings, **options: Any) -> dict[str, Provider]:
    """Every cloud adapter whose API key is set (what `status` and `down --all` consult)."""
    out: dict[str, Provider] = {}
    if settings.runpod_api_key:
        out["runpod"] = get_provider("runpod", settings, **options)
    if settings.vast_api_key:
        out["vastai"] = get_provider("vastai", settings, **options)
    return out
