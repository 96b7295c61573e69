"""Checking the user's Tailscale auth key before anything bills.

The key id is embedded in the secret (`tskey-auth-<keyId>-<secret>`), so the key can be looked up
with `GET /api/v2/tailnet/{tailnet}/keys/{keyId}` without ever sending the secret anywhere.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from tailpod.errors import ConfigError
from tailpod.provision.tailnet.api import TailnetError, TailnetNotFound, TailscaleAPI
from tailpod.secrets import Secret

AUTH_KEY_PREFIX = "tskey-auth-"
CREATE_KEY_HINT = (
    "create an auth key in the Tailscale admin console (Settings > Keys) that is ephemeral, "
    "pre-approved and tagged (e.g. tag:tailpod), and put it in TAILSCALE_AUTH_KEY"
)


def normalise_tag(tag: str) -> str:
    tag = tag.strip()
    return tag if tag.startswith("tag:") else f"tag:{tag}"


def auth_key_id(auth_key: Secret) -> str:
    """The key id inside `tskey-auth-<keyId>-<secret>`; ConfigError for anything else."""
    value = auth_key.reveal().strip()
    if value.startswith("tskey-client-"):
        raise ConfigError(
            "TAILSCALE_AUTH_KEY holds an OAuth client secret (tskey-client-...), not an auth key",
            hint=CREATE_KEY_HINT,
        )
    if value.startswith("tskey-api-"):
        raise ConfigError(
            "TAILSCALE_AUTH_KEY holds an API access token (tskey-api-...), not an auth key",
            hint="the API token belongs in TAILSCALE_API_KEY; " + CREATE_KEY_HINT,
        )
    key_id, sep, rest = value[len(AUTH_KEY_PREFIX) :].partition("-")
    if not value.startswith(AUTH_KEY_PREFIX) or not sep or not rest or not key_id.isalnum():
        raise ConfigError(
            "TAILSCALE_AUTH_KEY is not a Tailscale auth key (expected tskey-auth-<id>-<secret>)",
            hint=CREATE_KEY_HINT,
        )
    return key_id


@dataclass(frozen=True)
class AuthKeyCheck:
    """What the API says about the auth key; holds the key id, never the secret."""

    key_id: str
    ephemeral: bool
    preauthorized: bool
    reusable: bool
    tags: tuple[str, ...]
    expires: str | None
    warnings: list[str] = field(default_factory=list)
    # False when the API cannot show the key: Tailscale lists and looks up keys "relative to the
    # user that owns the API key" (tailscale/tailscale-client-go-v2 keys.go @ 4f50555), so a key
    # another user of the tailnet made answers 404 although it works.
    verified: bool = True


def parse_time(value: Any) -> dt.datetime | None:
    """Tailscale timestamps are RFC 3339 (Go), sometimes with nanoseconds, sometimes ""."""
    if not isinstance(value, str) or not value.strip():
        return None
    text = value.strip().replace("Z", "+00:00")
    if "." in text:  # trim fractional seconds to microseconds for fromisoformat on 3.10
        head, _, tail = text.partition(".")
        digits = "".join(c for c in tail if c.isdigit())
        zone = tail[len(digits) :]
        text = f"{head}.{digits[:6].ljust(6, '0')}{zone}"
    try:
        parsed = dt.datetime.fromisoformat(text)
    except ValueError:
        return None
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=dt.timezone.utc)


def check_auth_key(
    api: TailscaleAPI,
    auth_key: Secret,
    advertise_tags: Sequence[str] = (),
    *,
    allow_nonephemeral: bool = False,
    now: dt.datetime | None = None,
) -> AuthKeyCheck:
    """Refuse a key that is unknown, revoked, expired, untagged, not pre-approved, not covering the
    tags the pod will advertise, or (unless allowed) not ephemeral. Returns the facts otherwise."""
    key_id = auth_key_id(auth_key)
    try:
        data = api.get_key(key_id)
    except TailnetNotFound:
        # 404 is also the answer for a key made by another user: it may well work, so say what
        # is known (nothing) instead of "does not exist".
        return AuthKeyCheck(
            key_id=key_id, ephemeral=False, preauthorized=False, reusable=False, tags=(),
            expires=None, verified=False,
            warnings=[f"cannot verify this key: Tailscale answers 404 for auth key {key_id} in "
                      f"tailnet {api.tailnet}. Keys are visible only to the user who made them, "
                      "so it may belong to another user (then it can still work) or be deleted; "
                      "its expiry, tags, ephemerality and pre-approval are unchecked"],
        )
    now = now or dt.datetime.now(dt.timezone.utc)
    label = f"Tailscale auth key {key_id}"

    expires = parse_time(data.get("expires"))
    if data.get("invalid") or data.get("revoked"):
        raise TailnetError(f"{label} is revoked or expired", hint=CREATE_KEY_HINT)
    if expires is not None and expires <= now:
        raise TailnetError(f"{label} expired at {data.get('expires')}", hint=CREATE_KEY_HINT)
    key_type = data.get("keyType")
    if key_type not in (None, "", "auth"):
        raise TailnetError(f"{label} is a {key_type} key, not an auth key", hint=CREATE_KEY_HINT)

    create = ((data.get("capabilities") or {}).get("devices") or {}).get("create") or {}
    ephemeral = bool(create.get("ephemeral"))
    reusable = bool(create.get("reusable"))
    preauthorized = bool(create.get("preauthorized"))
    tags = tuple(normalise_tag(t) for t in create.get("tags") or [])

    if not ephemeral and not allow_nonephemeral:
        kind = "reusable and not ephemeral" if reusable else "not ephemeral"
        raise TailnetError(
            f"{label} is {kind}: a pod that dies without logging out would stay in the tailnet",
            hint="use an ephemeral key, or pass --allow-nonephemeral to accept that risk",
        )
    if not preauthorized:
        raise TailnetError(
            f"{label} is not pre-approved: the pod would wait for manual device approval",
            hint=CREATE_KEY_HINT,
        )
    if not tags:
        raise TailnetError(
            f"{label} has no tags: the pod would join as your user, with your access rights",
            hint=CREATE_KEY_HINT,
        )
    wanted = [normalise_tag(t) for t in advertise_tags]
    missing = [t for t in wanted if t not in tags]
    if missing:
        raise TailnetError(
            f"{label} does not carry {', '.join(missing)}, which the pod would advertise "
            f"(the key has {', '.join(tags)})",
            hint=f"set TAILPOD_TAILSCALE_TAGS={','.join(tags)} or use a key with those tags",
        )

    warnings: list[str] = []
    if expires is not None and (expires - now) < dt.timedelta(hours=1):
        warnings.append(f"{label} expires within the hour ({data.get('expires')})")
    if not reusable:
        warnings.append(f"{label} is single-use: a second `up` needs a new key")
    return AuthKeyCheck(
        key_id=key_id,
        ephemeral=ephemeral,
        preauthorized=preauthorized,
        reusable=reusable,
        tags=tags,
        expires=data.get("expires") or None,
        warnings=warnings,
    )
