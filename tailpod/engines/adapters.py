"""Engine name → adapter."""

from __future__ import annotations

from tailpod.engines.base import EngineAdapter
from tailpod.engines.llamacpp import LlamaCppAdapter
from tailpod.engines.vllm import VllmAdapter
from tailpod.errors import ConfigError


def _adapters() -> dict[str, type[EngineAdapter]]:
    # lazy: kept off what `tailpod --help` imports (docs/architecture.md)
    from tailpod.engines.sglang import SglangAdapter

    return {"vllm": VllmAdapter, "sglang": SglangAdapter, "llamacpp": LlamaCppAdapter}


# What a rented pod serves from its image. llama.cpp runs on your own GPU box only
# (`up --provider local --engine llamacpp`): no cloud bootstrap installs or checks its server.
CLOUD_ENGINES = ("vllm", "sglang")


def get_adapter(name: str) -> EngineAdapter:
    adapters = _adapters()
    # "llama.cpp", "llama-cpp" and "llama_cpp" all name the llamacpp adapter.
    key = (name or "").strip().lower().replace(".", "").replace("-", "").replace("_", "")
    if key not in adapters:
        known = ", ".join(adapters)
        raise ConfigError(
            f"unknown engine {name!r} (known: {known})", hint=f"choose one of: {known}"
        )
    return adapters[key]()


def require_cloud_engine(name: str) -> EngineAdapter:
    """The adapter for `name` when a rented pod can serve it; ConfigError (exit 2) otherwise,
    naming the command that serves llama.cpp."""
    adapter = get_adapter(name)
    if adapter.name not in CLOUD_ENGINES:
        raise ConfigError(
            f"a rented pod serves {' or '.join(CLOUD_ENGINES)}, not {name}; nothing was rented",
            hint="on your own GPU box: tailpod up --provider local --engine llamacpp")
    return adapter
