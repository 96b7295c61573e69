"""The ledger entries of a pod's life that every kind writes the same way (design review 2026-12,
§5 step 4): the one code that records an engine serving an arm."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from tailpod.ledger import Ledger, PodRecord

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
