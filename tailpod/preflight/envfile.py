"""Check 1: the .env file and the settings it feeds, and a settings loader that cannot crash.

`up` stops at the first malformed line; preflight must instead report it (with its line number)
next to everything else that is wrong, so the loader falls back to the environment alone and the
check names the problem. Key values are only ever tested, never kept or printed.
"""

from __future__ import annotations

import dataclasses
import io
import os
import stat
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from dotenv.parser import parse_stream

from tailpod.config import Settings, check_env_file_named, load_settings, read_dotenv
from tailpod.errors import ConfigError, TailpodError
from tailpod.preflight.base import Context, Findings, Outcome
from tailpod.provision.providers import canonical_name, provider_class
from tailpod.provision.tailnet.keys import auth_key_id
from tailpod.secrets import Secret


def required_keys(provider: str) -> tuple[str, ...]:
    """What `provider` needs set before anything can be rented: its class's key and the settings
    its pods need (the tailnet's, for the clouds; provision/base.py). HF_TOKEN only for gated
    models: the Hugging Face check says when it is needed."""
    return provider_class(provider).required_key_envs()


# How copied-and-not-edited example values begin (random keys practically never do).
_PLACEHOLDERS = ("your", "change", "replace", "insert", "paste", "xxx", "todo", "placeholder",
                 "example")


def env_file_path(plan_path: Path | None, env: Mapping[str, str] | None = None) -> Path:
    env = os.environ if env is None else env
    return plan_path if plan_path is not None else Path(env.get("TAILPOD_ENV_FILE", ".env"))


def load_preflight_settings(
    overrides: Mapping[str, Any] | None = None,
    env: Mapping[str, str] | None = None,
    dotenv_path: Path | None = None,
) -> tuple[Settings, list[TailpodError]]:
    """Settings with `load_settings`' precedence, where a malformed .env or a non-numeric value
    drops only what is broken. Returns the problems for the settings check to report."""
    env = dict(os.environ if env is None else env)
    path = env_file_path(dotenv_path, env)
    named_problems: list[TailpodError] = []
    if dotenv_path is None:
        try:
            check_env_file_named(env)
        except ConfigError as exc:
            named_problems.append(exc)
    try:
        dotenv = read_dotenv(path)
    except ConfigError:
        # Not half-read: the settings check re-reads the file, reports the bad line, and says
        # of each key the file does hold that it is there but unread (not "not set").
        dotenv = {}
    merged = {**dotenv, **env}  # the environment wins over .env, as in load_settings
    problems: list[TailpodError] = named_problems
    for f in dataclasses.fields(Settings):
        name, kind = f.metadata["env"], f.metadata["kind"]
        raw = merged.get(name)
        if kind not in ("int", "float") or raw is None or not raw.strip():
            continue
        try:
            int(raw) if kind == "int" else float(raw)
        except ValueError:
            source = "the environment" if name in env else str(path)
            problems.append(ConfigError(f"{name} from {source} must be a number",
                                        hint=f"fix {name} in {source}"))
            del merged[name]
    devnull = Path(os.devnull)
    try:
        settings = load_settings(overrides, env=merged, dotenv_path=devnull)
    except ConfigError as exc:  # a flag that could not be converted: keep going without it all
        problems.append(exc)
        settings = load_settings({}, env=merged, dotenv_path=devnull)
    return settings, problems


def key_lines(path: Path) -> dict[str, int]:
    """KEY -> line number in the .env (values are not kept)."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return {}
    return {b.key: b.original.line for b in parse_stream(io.StringIO(text))
            if b.key is not None and not b.error}


def malformed(name: str, secret: Secret) -> str | None:
    """Why a key cannot be right, judged from its shape alone; None when it looks plausible."""
    value = secret.reveal()
    if value[:1] in "'\"" or value[-1:] in "'\"":
        return f"{name} still has quote characters around it"
    if any(ch.isspace() for ch in value):
        return f"{name} contains whitespace"
    if not value.isascii() or not value.isprintable():
        return f"{name} contains characters an API key never has"
    lowered = value.lower()
    if "<" in value or ">" in value or "..." in value or lowered.startswith(_PLACEHOLDERS):
        return f"{name} looks like a placeholder, not a key"
    if len(value) < 8:
        return f"{name} is too short to be a key ({len(value)} characters)"
    if name == "TAILSCALE_API_KEY" and not value.startswith("tskey-api-"):
        if value.startswith("tskey-auth-"):
            return "TAILSCALE_API_KEY holds an auth key (tskey-auth-...); it needs an API token"
        return "TAILSCALE_API_KEY is not a Tailscale API access token (tskey-api-...)"
    if name == "TAILSCALE_AUTH_KEY":
        try:
            auth_key_id(secret)
        except ConfigError as exc:
            return exc.message
    if name == "HF_TOKEN" and not value.startswith("hf_"):
        return "HF_TOKEN does not start with hf_ (Hugging Face user access tokens do)"
    return None


def _secret_fields() -> dict[str, str]:
    return {f.metadata["env"]: f.name for f in dataclasses.fields(Settings)
            if f.metadata["secret"]}


def check_settings(ctx: Context) -> Outcome:
    settings = ctx.settings
    path = env_file_path(ctx.plan.env_file)
    found = Findings()
    lines: dict[str, int] = {}
    unreadable: str | None = None  # the bad line, when the file could not be read
    if not path.exists():
        found.warn(f"no {path}: settings come from the environment and flags only",
                   f"cp .env.example {path} && chmod 600 {path}")
    else:
        try:
            read_dotenv(path)
        except ConfigError as exc:
            found.fail(exc.message, exc.hint or f"fix {path}")
            unreadable = exc.message
        lines = key_lines(path)
        try:
            mode = stat.S_IMODE(path.stat().st_mode)
        except OSError as exc:
            found.fail(f"cannot stat {path} ({exc.strerror})")
        else:
            secrets_in_file = [k for k in lines if k in _secret_fields()]
            if mode & 0o077 and secrets_in_file:
                found.warn(f"{path} is readable by other users (mode {mode:04o}) and holds "
                           f"keys ({', '.join(secrets_in_file)})", f"chmod 600 {path}")
            elif not lines and not found.items:
                size = path.stat().st_size
                found.warn(f"{path} is empty" if size == 0 else f"{path} sets nothing",
                           "add the keys (see .env.example) or unset TAILPOD_ENV_FILE")
            elif mode & 0o077:
                found.ok(f"{path} (mode {mode:04o}, no keys in it)")
            else:
                found.ok(f"{path} (mode {mode:04o})")
    for error in ctx.settings_problems:
        found.fail(error.message, error.hint or "")

    try:
        provider = canonical_name(settings.provider)
    except ConfigError as exc:
        found.fail(exc.message, exc.hint or "")
        return found.outcome({"env_file": str(path)})
    found.ok(f"provider {provider}")

    fields = _secret_fields()
    keys: dict[str, str] = {}

    def source(name: str) -> str:
        if name in os.environ or name not in lines:
            return "from the environment"
        return f"from {path.name} line {lines[name]}"

    for name in required_keys(provider):
        secret = getattr(settings, fields[name])
        if not secret:
            keys[name] = "missing"
            if unreadable and name in lines:
                keys[name] = "unread"
                found.fail(f"{name} is in {path.name} line {lines[name]}, but the file was not "
                           "read because of its broken line", f"fix that line of {path}")
            else:
                found.fail(f"{name} is not set (provider {provider} needs it)",
                           f"add {name}=... to {path}")
            continue
        problem = malformed(name, secret)
        keys[name] = "malformed" if problem else "set"
        if problem:
            found.fail(f"{problem} ({source(name)})", f"fix {name} in {path}")
        else:
            found.ok(f"{name} set ({source(name)})")
    for name, field_name in fields.items():
        secret = getattr(settings, field_name)
        if name in keys or not secret or name == "TAILPOD_SSH_KEY_PASSPHRASE":
            continue
        problem = malformed(name, secret)
        keys[name] = "malformed" if problem else "set"
        if problem:
            found.warn(f"{problem} ({source(name)})", f"fix {name} in {path}")
    return found.outcome({"env_file": str(path), "provider": provider, "keys": keys})
