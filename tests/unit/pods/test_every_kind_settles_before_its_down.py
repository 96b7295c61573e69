"""One owner of a pod's end (issue 37 item 1): every kind's `down` runs the kind's own settle (a
lanes run's final counts, its lanes stopped) and then the proven teardown with the caller's
deadline, so the matrix, `eval` and `deploy` (which call `kind.down`) end a lanes run as `tailpod
down` does; `down --all` settles each local run through its kind."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest

import tailpod.pods.cloud_lanes as cloud_lanes
import tailpod.pods.down as pods_down
import tailpod.pods.kinds as kinds
import tailpod.pods.lanes as lanes
import tailpod.pods.ssh_box as ssh_box
import tailpod.provision.teardown as teardown_mod
from tailpod.config import load_settings
from tailpod.ledger import Ledger, PodRecord
from tailpod.provision.base import BillingEvidence
from tailpod.provision.teardown import LifecyclePolicy

EVIDENCE = BillingEvidence(checks=[])


@pytest.mark.parametrize(("provider", "settles", "tears_down"), [
    ("runpod", (cloud_lanes, "settle_lanes_run"), (kinds, "down_remote")),
    ("vastai", (cloud_lanes, "settle_lanes_run"), (kinds, "down_remote")),
    ("ssh", (cloud_lanes, "settle_lanes_run"), (ssh_box, "down_remote")),
    ("local", (lanes, "settle_lanes"), (kinds, "down_remote")),
])
def test_each_kind_settles_then_tears_down_the_settled_record(
        tailpod_home: Path, monkeypatch: pytest.MonkeyPatch, provider: str,
        settles: tuple[Any, str], tears_down: tuple[Any, str]) -> None:
    settings = load_settings()
    ledger = Ledger(settings.state_dir)
    record = PodRecord(run_tag="tp-a", provider=provider, status="running")
    settled = dataclasses.replace(record, status="terminating")
    order: list[tuple[Any, ...]] = []

    def settle(s: Any, led: Any, rec: PodRecord) -> PodRecord:
        order.append(("settle", s, led, rec))
        return settled

    def teardown(s: Any, led: Any, rec: PodRecord, *,
                 policy: LifecyclePolicy | None = None) -> BillingEvidence:
        order.append(("teardown", s, led, rec, policy))
        return EVIDENCE

    monkeypatch.setattr(*settles, settle)
    monkeypatch.setattr(*tears_down, teardown)
    policy = LifecyclePolicy(gone_timeout_s=7.0)
    assert pods_down.down(settings, ledger, record, policy=policy) is EVIDENCE
    assert order == [("settle", settings, ledger, record),
                     ("teardown", settings, ledger, settled, policy)]


def test_down_all_settles_each_local_run_through_its_kind(
        tailpod_home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    settings = load_settings()
    ledger = Ledger(settings.state_dir)
    local = PodRecord(run_tag="tp-l", provider="local", status="running")
    settled = dataclasses.replace(local, status="terminating")
    seen: list[PodRecord] = []
    gave: list[PodRecord] = []

    def settle_lanes(_s: Any, _led: Any, rec: PodRecord) -> PodRecord:
        seen.append(rec)
        return settled

    def many(_s: Any, _led: Any, **kw: Any) -> list[Any]:
        gave.append(kw["before_local"](local))
        assert (kw["expired_only"], kw["all_homes"]) == (True, False)
        return []

    monkeypatch.setattr(lanes, "settle_lanes", settle_lanes)
    monkeypatch.setattr(teardown_mod, "down_many", many)
    assert pods_down.down_many(settings, ledger, expired_only=True) == []
    assert seen == [local] and gave == [settled]
