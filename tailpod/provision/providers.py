"""The one list of providers: names → adapters. Imports are lazy so `--provider local` never
loads cloud code. What each adapter can do beyond the base contract it declares on its class
(provision/base.py `capabilities`)."""

from __future__ import annotations

import importlib
from typing import Any

from tailpod.agent.bootstrap.terminate import ALIASES as POD_ALIASES
from tailpod.config import Settings
from tailpod.errors import ConfigError
from tailpod.provision.base import Provider

# canonical name -> (module, class)
PROVIDERS: dict[str, tuple[str, str]] = {
    "local": ("tailpod.provision.local.provider", "LocalProvider"),
    "runpod": ("tailpod.provision.runpod.provider", "RunPodProvider"),
    "vastai": ("tailpod.provision.vastai.provider", "VastProvider"),
    "ssh": ("tailpod.provision.ssh_box.provider", "SshBoxProvider"),
}
LOCAL = "local"
SSH_BOX = "ssh"
# The providers that rent pods which bill (not this machine, not your own box over SSH).
CLOUD_PROVIDERS: tuple[str, ...] = tuple(name for name in PROVIDERS if name not in (LOCAL, SSH_BOX))
# The pod agent holds the cloud aliases (it parses --provider on the pod, without tailpod).
ALIASES = {alias: name for alias, name in POD_ALIASES.items() if alias != name}


def canonical_name(name: str) -> str:
    key = (name or "").strip().lower()
    key = ALIASES.get(key, key)
    if key not in PROVIDERS:
        raise ConfigError(
            f"unknown provider {name!r}",
            hint="choose one of: " + ", ".join(sorted(PROVIDERS)) + " (alias: vast)",
        )
    return key


def check_spot_route(settings: Settings) -> None:
    """`--spot` on a provider whose vendor documents no spot route: exit 2 before anything rents
    (provision/base.py Provider.spot_route, docs/providers.md "Spot")."""
    if not settings.spot:
        return
    cls = provider_class(settings.provider)
    if cls.spot_route is None:
        raise ConfigError(cls.no_spot + "; nothing was rented",
                          hint="leave out --spot (and TAILPOD_SPOT)")


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
    return {name: get_provider(name, settings, **options)
            for name in CLOUD_PROVIDERS if api_key(settings, name)}


def api_key(settings: Settings, name: str) -> Any:
    """The provider's API key from `settings` (a Secret, or None when not set)."""
    setting = provider_class(name).key_setting
    return getattr(settings, setting) if setting else None


def api_url(settings: Settings, name: str) -> str:
    """The provider API tailpod (and the pod it rents) calls: the vendor's or the sandbox's."""
    setting = provider_class(name).url_setting
    if setting is None:
        raise ConfigError(f"{name} has no API")
    url: str = getattr(settings, setting)
    return url


def cloud_key_envs() -> list[str]:
    """The variables that hold the cloud accounts' API keys (each class's key_env), for hints."""
    return [env for env in (provider_class(n).key_env for n in CLOUD_PROVIDERS) if env]


def any_cloud_key(settings: Settings) -> bool:
    """True when some cloud account is configured."""
    return any(api_key(settings, name) for name in CLOUD_PROVIDERS)


def provider_class(name: str) -> type[Provider]:
    """The adapter class for `name` (imports its module; creates nothing)."""
    module_name, class_name = PROVIDERS[canonical_name(name)]
    cls: type[Provider] = getattr(importlib.import_module(module_name), class_name)
    return cls
