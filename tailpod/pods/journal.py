"""A pod's journal: the record's events (`PodRecord.note`, `Ledger.update(event=...)`). Here are
the entries every kind writes the same way (the one code that records an engine serving an arm)
and the reading of the journal's last change of state, which `status` shows with its time.
The states are named once, in tailpod/ledger.py `LifeState` (a provider's word for a pod is
provision/base.py `PodState`)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from tailpod.ledger import Ledger, LifeState, PodRecord

Write = Callable[..., PodRecord]  # (event, **fields) -> the record as the ledger now holds it


def engine_healthy(ledger: Ledger, record: PodRecord, label: str, arm: dict[str, Any], *,
                   machine: dict[str, Any] | None, engine_version: str | None,
                   extra: dict[str, Any] | None = None, write: Write | None = None,
                   **fields: Any) -> PodRecord:
    """The "engine-healthy" entry: the pod is running and serves arm `label`, whose ledger entry
    `arm` (ArmStart.ledger_arm's shape: startup, startup_s, argv, checkpoints) joins the record's
    other arms and gives the record its current startup facts. `extra`: the kind's own facts
    (the pod's state dir, its dead-man switch); `fields`: the record's (endpoint, gpu);
    `write`: the caller's ledger step (cloud `up` writes back a record the ledger lost)."""
    step = write or (lambda event, **kw: ledger.update(record.run_tag, event=event, **kw))
    return step("engine-healthy", status="running", extra=dataclasses.replace(
        record.extra, startup=arm["startup"], startup_s=arm["startup_s"],
        arms={**record.extra.arms, label: arm}, machine=machine, engine_version=engine_version,
        **(extra or {})), **fields)


# The entries that change a pod's state without a `status` field of their own (arm_switch.py).
STATE_EVENTS = {"no-engine": LifeState.NO_ENGINE, "engine-restored": LifeState.RUNNING}


@dataclasses.dataclass(frozen=True)
class StateChange:
    """The last change of a pod's state in its journal (the record's events)."""

    state: str
    event: str
    at: float

    def to_json(self) -> dict[str, Any]:
        return {"state": self.state, "event": self.event, "at": self.at}


def last_change(record: PodRecord) -> StateChange | None:
    """The journal's last entry that changed the pod's state: one that set its `status`
    (Ledger.update notes it), or a state of the running pod's engine (STATE_EVENTS)."""
    for entry in reversed(record.events):
        event = str(entry.get("event", ""))
        state = entry.get("status") or STATE_EVENTS.get(event)
        if state and isinstance(entry.get("t"), (int, float)):
            return StateChange(str(state), event, float(entry["t"]))
    return None
