"""Engine name → adapter."""

from __future__ import annotations

from tailpod.bootstrap.engines.base import EngineAdapter
from tailpod.errors import ConfigError


def _adapters() -> dict[str, type[EngineAdapter]]:
    from tailpod.bootstrap.engines.vllm import VllmAdapter

    return {"vllm": VllmAdapter}


def get_adapter(name: str) -> EngineAdapter:
    adapters = _adapters()
    if name not in adapters:
        raise ConfigError(f"unknown engine {name!r}", hint=f"choose one of: {', '.join(adapters)}")
    return adapters[name]()
