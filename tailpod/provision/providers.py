"""The one list of providers: names → adapters. Imports are lazy so `--provider local` never
loads cloud code. What each adapter can do beyond the base contract it declares on its class
(provision/base.py `capabilities`)."""

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
LOCAL = "local"
# The providers that rent pods which bill (everything but the local runner).
CLOUD_PROVIDERS: tuple[str, ...] = tuple(name for name in PROVIDERS if name != LOCAL)
ALIASES = {"vast": "vastai", "vast.ai": "vastai", "run-pod": "runpod"}


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
    cls: Any = provider_class(key)
    if key == LOCAL:
        provider: Provider = cls(settings.state_dir)
        return provider
    provider = cls(settings, **options)
    return provider


def remote_providers(settings: Settings, **options: Any) -> dict[str, Provider]:
    """Every cloud adapter whose API key is set (what `status` and `down --all` consult)."""
    keys = {"runpod": settings.runpod_api_key, "vastai": settings.vast_api_key}
    return {name: get_provider(name, settings, **options)
            for name in CLOUD_PROVIDERS if keys[name]}


def provider_class(name: str) -> type[Provider]:
    """The adapter class for `name` (imports its module; creates nothing)."""
    module_name, class_name = PROVIDERS[canonical_name(name)]
    cls: type[Provider] = getattr(importlib.import_module(module_name), class_name)
    return cls
