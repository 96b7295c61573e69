"""One owner of a pod's end (issue 37 item 1): every kind's `down` runs the kind's own settle (a
lanes run's final counts, its lanes stopped) and then the proven teardown with the caller's
deadline, so the matrix, `eval` and `deploy` (which call `kind.down`) end a lanes run as `tailpod
down` does; `down --all` downs each local run through its kind (pods/base.py
`settle_then_teardown`, the one `down` of every kind)."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest

import tailpod.pods.base as pods_base
import tailpod.pods.cloud_lanes as cloud_lanes
import tailpod.pods.down as pods_down
import tailpod.pods.lanes as lanes
import tailpod.provision.teardown as teardown_mod
from tailpod.config import load_settings
from tailpod.ledger import Ledger, PodRecord
from tailpod.provision.base import BillingEvidence
from tailpod.provision.teardown import DownAllPlan, LifecyclePolicy, TeardownOutcome

EVIDENCE = BillingEvidence(checks=[])


@pytest.mark.parametrize(("provider", "settles", "tears_down"), [
    ("runpod", (cloud_lanes, "settle_lanes_run"), (pods_base, "down_remote")),
    ("vastai", (cloud_lanes, "settle_lanes_run"), (pods_base, "down_remote")),
    ("ssh", (cloud_lanes, "settle_lanes_run"), (pods_base, "down_remote")),
    ("local", (lanes, "settle_lanes"), (pods_base, "down_remote")),
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
    clouds: list[dict[str, Any]] = []

    def settle_lanes(_s: Any, _led: Any, rec: PodRecord) -> PodRecord:
        seen.append(rec)
        return settled

    def teardown(_s: Any, _led: Any, rec: PodRecord, *,
                 policy: LifecyclePolicy | None = None) -> BillingEvidence:
        gave.append(rec)
        return EVIDENCE

    def plan(_s: Any, _led: Any, *, expired_only: bool) -> DownAllPlan:
        assert expired_only
        return DownAllPlan([local], {})

    def down_clouds(_s: Any, _led: Any, providers: Any, **kw: Any) -> list[TeardownOutcome]:
        clouds.append({"providers": providers, **kw})
        return []

    monkeypatch.setattr(lanes, "settle_lanes", settle_lanes)
    monkeypatch.setattr(pods_base, "down_remote", teardown)
    monkeypatch.setattr(teardown_mod, "plan_down_many", plan)
    monkeypatch.setattr(teardown_mod, "down_clouds", down_clouds)
    assert [(o.run_tag, o.evidence) for o in pods_down.down_many(
        settings, ledger, expired_only=True)] == [("tp-l", EVIDENCE)]
    assert seen == [local] and gave == [settled]
    assert [(c["providers"], c["expired_only"], c["all_homes"]) for c in clouds] == [
        ({}, True, False)]
