"""Check 11: the local programs the chosen path needs.

Cloud providers: the `ssh` client, which `tailpod ssh` runs (everything else speaks SSH through
paramiko). Provider local: the engine's Python (TAILPOD_ENGINE_PYTHON) can find the engine module,
asked with importlib.util.find_spec in a subprocess so the engine is never imported here; for
llama.cpp, the user's `llama-server` (TAILPOD_LLAMA_SERVER) answers `--version`.
"""

from __future__ import annotations

import shutil

from tailpod.engines.local_install import (
    ENGINE_MODULES,
    check_engine_installed,
    check_llama_server,
    engine_python,
)
from tailpod.errors import ConfigError
from tailpod.preflight.base import CheckSkipped, Context, Findings, Outcome
from tailpod.provision.providers import canonical_name


def _is_llamacpp(engine: str) -> bool:
    from tailpod.engines.adapters import get_adapter

    try:
        return get_adapter(engine).name == "llamacpp"
    except ConfigError:
        return False


def check_tools(ctx: Context) -> Outcome:
    settings = ctx.settings
    try:
        provider = canonical_name(settings.provider)
    except ConfigError:
        raise CheckSkipped(f"unknown provider {settings.provider!r} (see env)") from None
    found = Findings()
    if provider == "local" and _is_llamacpp(settings.engine):
        path, version = check_llama_server(settings.llama_server)
        found.ok(f"llama-server {path} ({version or 'no version line'})")
        return found.outcome({"llama_server": path, "version": version})
    if provider == "local":
        python = engine_python(settings)
        module = ENGINE_MODULES.get(settings.engine)
        if module is None:
            raise CheckSkipped(f"no local install check for engine {settings.engine!r}")
        check_engine_installed(python, settings.engine)
        found.ok(f"{python} finds the {module} module")
        return found.outcome({"engine_python": python, "engine": settings.engine})
    ssh = shutil.which("ssh")
    if ssh is None:
        found.warn("no `ssh` client on PATH: `tailpod ssh` cannot open a shell on the pod "
                   "(up, benchmark and down do not need it)",
                   "install the OpenSSH client (apt-get install openssh-client)")
    else:
        found.ok(f"ssh client {ssh}")
    return found.outcome({"ssh": ssh})
