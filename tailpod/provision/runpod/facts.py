"""What first contact learned, kept per account (a hash of its key, never the key) and image in
TAILPOD_HOME/first-contact.json: read by check-requirements, by `up` (preflight) and by the
billing proof (the meter's measured delay), written by provision/runpod/first_contact.py."""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from tailpod.config import Settings
from tailpod.errors import ConfigError

FACTS_FILE = "first-contact.json"
FACTS_SCHEMA = "tailpod.first-contact/1"


@dataclass
class FirstContactFacts:
    account: str  # sha256 of the key, first 16 hex digits
    image: str
    checked_at: float
    start_form: str  # "json" (entrypoint replaced) or "plain"
    start_command_ran: bool | None  # the marker showed in the container log
    pod_key_self_kill: bool | None  # the pod deleted itself with the pod-scoped key over REST v2
    self_kill_answers: list[str] = field(default_factory=list)  # "DELETE /v2/pods/{id} 204"
    meter_delay_s: float | None = None  # pod created -> billing history first shows spend
    meter_bound_s: float = 0.0  # how long the meter was watched
    cost_estimate_usd: float | None = None
    cost_usd: float | None = None
    pod_id: str | None = None
    run_tag: str | None = None
    cpu: str | None = None
    notes: list[str] = field(default_factory=list)

    def meter_line(self) -> str:
        if self.meter_delay_s is not None:
            return f"the meter showed spend {self.meter_delay_s:.0f} s after create"
        return f"the meter showed no spend within {self.meter_bound_s:.0f} s"

    def summary(self) -> str:
        def word(value: bool | None, yes: str, no: str) -> str:
            return "not checked" if value is None else (yes if value else no)

        return "; ".join([
            f"start command ({self.start_form} form): "
            + word(self.start_command_ran, "ran", "did NOT run"),
            "pod key self-kill over REST v2: "
            + word(self.pod_key_self_kill, "works", "REFUSED")
            + (f" ({', '.join(self.self_kill_answers)})" if self.self_kill_answers else ""),
            self.meter_line(),
        ])


def account_id(key: str | None) -> str:
    """Which account the facts belong to: a hash of its key, never the key."""
    if not key:
        raise ConfigError("no RunPod API key", hint="set RUNPOD_API_KEY")
    return hashlib.sha256(key.encode()).hexdigest()[:16]


def _facts_path(settings: Settings) -> Path:
    return Path(settings.home) / FACTS_FILE


def load_all(settings: Settings) -> list[FirstContactFacts]:
    try:
        data = json.loads(_facts_path(settings).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return []
    out = []
    for item in data.get("facts", []) if isinstance(data, dict) else []:
        try:
            out.append(FirstContactFacts(**item))
        except TypeError:
            continue
    return out


def facts_for(settings: Settings, image: str | None = None) -> list[FirstContactFacts]:
    """This account's recorded facts (for `image` only when given), newest first."""
    try:
        account = account_id(settings.runpod_api_key.reveal()
                             if settings.runpod_api_key else None)
    except ConfigError:
        return []
    found = [f for f in load_all(settings) if f.account == account
             and (image is None or f.image == image)]
    return sorted(found, key=lambda f: -f.checked_at)


def save(settings: Settings, facts: FirstContactFacts) -> Path:
    path = _facts_path(settings)
    kept = [f for f in load_all(settings)
            if not (f.account == facts.account and f.image == facts.image)]
    kept.append(facts)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps({"schema": FACTS_SCHEMA, "facts": [asdict(f) for f in kept]},
                              indent=2), encoding="utf-8")
    tmp.replace(path)
    return path


def run_stamp(settings: Settings, image: str) -> dict[str, Any]:
    """What first contact knows of this account, as each run records it (ledger `extra`):
    the newest facts for `image` (else the account's newest, marked so), or `verified: False`."""
    known = facts_for(settings)
    mine = [f for f in known if f.image == image]
    chosen = (mine or known)[:1]
    if not chosen:
        return {"verified": False, "why": "no first contact on this account "
                "(`tailpod check-requirements --live`)"}
    f = chosen[0]
    return {"verified": True, "account": f.account, "image": f.image,
            "same_image": bool(mine), "checked_at": f.checked_at, "start_form": f.start_form,
            "start_command_ran": f.start_command_ran, "pod_key_self_kill": f.pod_key_self_kill,
            "meter_delay_s": f.meter_delay_s, "meter_bound_s": f.meter_bound_s}
