"""status joins ledger and provider truth; down --all and down --expired act on it."""

from __future__ import annotations

import time

import pytest

from tailpod.config import ttl_deadline
from tailpod.errors import BillingNotProven
from tailpod.ledger import PodRecord
from tailpod.provision.base import PodState
from tailpod.provision.create import create_pod_safely
from tailpod.provision.reconcile import reconcile
from tailpod.provision.teardown import (
    UnprovenTeardown,
    raise_if_unproven,
    teardown,
    teardown_all,
    teardown_expired,
)
from tests.helpers.api_timings import fast_timings
from tests.helpers.lifecycle_policy import fast_policy

from .conftest import Cloud


def test_orphans_ghosts_and_expired_are_flagged(cloud: Cloud) -> None:
    providers = {cloud.provider.name: cloud.provider}
    tracked = cloud.spec(gpus=[cloud.gpu("second")])
    tracked.ttl_at = ttl_deadline(1.0, time.time())
    info = create_pod_safely(cloud.provider, tracked, cloud.ledger, cloud.record(tracked),
                             policy=cloud.policy)
    orphan = cloud.provider.create(cloud.spec(gpus=[cloud.gpu("second")], run_tag="tp-orphan-1"))
    ghost = PodRecord(run_tag="tp-ghost-1", provider=cloud.provider.name, status="running",
                      pod_id="31999999" if cloud.kind == "vastai" else "ghostpod000001",
                      price_per_hr=0.5)
    cloud.ledger.put(ghost)
    expired = PodRecord(run_tag="tp-expired-1", provider=cloud.provider.name, status="creating",
                        ttl_expires_at=time.time() - 10)
    cloud.ledger.put(expired)

    report = reconcile(providers, cloud.ledger)
    rows = {r.run_tag: r for r in report.rows}
    assert rows[tracked.run_tag].flags == []
    assert rows[tracked.run_tag].provider_state in ("pending", "running")
    assert rows[tracked.run_tag].price_per_hr == info.price_per_hr
    assert rows[tracked.run_tag].spend_usd is not None and rows[tracked.run_tag].uptime_s >= 0
    assert "orphan" in rows["tp-orphan-1"].flags and rows["tp-orphan-1"].ledger_status is None
    assert "ghost" in rows["tp-ghost-1"].flags
    assert "expired" in rows["tp-expired-1"].flags
    assert {r.run_tag for r in report.orphans} == {"tp-orphan-1"}
    deadline = time.monotonic() + 3
    while reconcile(providers, cloud.ledger).to_json()["rate_per_hr_now"] <= 0:
        assert time.monotonic() < deadline, "the tracked pod never reported running"
        time.sleep(0.05)

    # down of the tracked run fails its proof: an untracked tailpod pod still bills
    with pytest.raises(UnprovenTeardown) as err:
        teardown(cloud.provider, cloud.ledger, cloud.ledger.get(tracked.run_tag),  # type: ignore[arg-type]
                 cloud.run_dir(tracked.run_tag), policy=cloud.policy)
    assert orphan.pod_id in err.value.message and "tp-orphan-1" in err.value.message

    outcomes = teardown_all(providers, cloud.ledger, cloud.run_dir, policy=cloud.policy)
    raise_if_unproven(outcomes)
    assert {o.run_tag for o in outcomes} >= {tracked.run_tag, "tp-orphan-1", "tp-ghost-1"}
    assert cloud.billing() == []
    assert cloud.ledger.get("tp-orphan-1").status == "terminated"  # type: ignore[union-attr]
    assert cloud.ledger.active() == []
    again = reconcile(providers, cloud.ledger)
    assert again.rows == []


def test_down_expired_kills_only_expired_runs(cloud: Cloud) -> None:
    providers = {cloud.provider.name: cloud.provider}
    old = cloud.spec(gpus=[cloud.gpu("second")])
    young = cloud.spec(gpus=[cloud.gpu("second")])
    old.ttl_at = ttl_deadline(1.0, time.time())
    create_pod_safely(cloud.provider, old, cloud.ledger, cloud.record(old), policy=cloud.policy)
    young.ttl_at = ttl_deadline(5.0, time.time())
    create_pod_safely(cloud.provider, young, cloud.ledger, cloud.record(young), policy=cloud.policy)
    outcomes = teardown_expired(providers, cloud.ledger, cloud.run_dir,
                                now=time.time() + 2 * 3600, policy=cloud.policy)
    raise_if_unproven(outcomes)
    assert [o.run_tag for o in outcomes] == [old.run_tag]
    assert [r["name"] for r in cloud.billing()] == [young.run_tag]
    assert cloud.ledger.get(old.run_tag).status == "terminated"  # type: ignore[union-attr]
    teardown(cloud.provider, cloud.ledger, cloud.ledger.get(young.run_tag),  # type: ignore[arg-type]
             cloud.run_dir(young.run_tag), policy=cloud.policy)
    assert cloud.billing() == []


def test_stopped_pod_still_bills_its_disk_and_says_so(make_cloud) -> None:  # type: ignore[no-untyped-def]
    cloud = make_cloud("vastai")
    spec = cloud.spec(gpus=[cloud.gpu("second")], run_tag="tp-stopped-1")
    info = cloud.provider.create(spec)
    import httpx

    httpx.put(f"{cloud.sandbox.vast_url}/api/v0/instances/{info.pod_id}/",
              json={"state": "stopped"},
              headers={"Authorization": f"Bearer {cloud.sandbox.vast_key}"}).raise_for_status()
    billing = cloud.billing()
    assert len(billing) == 1 and billing[0]["billing_what"] == "disk (stopped)"
    assert cloud.provider.get(info.pod_id).state is PodState.STOPPED  # type: ignore[union-attr]
    other = cloud.spec(gpus=[cloud.gpu("second")])
    create_pod_safely(cloud.provider, other, cloud.ledger, cloud.record(other),
                      policy=cloud.policy)
    with pytest.raises(BillingNotProven) as err:
        teardown(cloud.provider, cloud.ledger, cloud.ledger.get(other.run_tag),  # type: ignore[arg-type]
                 cloud.run_dir(other.run_tag), policy=cloud.policy)
    assert "its disk still bills" in err.value.message and info.pod_id in err.value.message
    raise_if_unproven(teardown_all({cloud.provider.name: cloud.provider}, cloud.ledger,
                                   cloud.run_dir, policy=cloud.policy))
    assert cloud.billing() == []


def test_teardown_of_a_record_without_pod_id_sweeps_by_tag(cloud: Cloud) -> None:
    spec = cloud.spec(gpus=[cloud.gpu("second")])
    cloud.provider.create(spec)  # as if the process died before the id reached the ledger
    record = PodRecord(run_tag=spec.run_tag, provider=cloud.provider.name, status="creating")
    cloud.ledger.put(record)
    evidence = teardown(cloud.provider, cloud.ledger, record, cloud.run_dir(spec.run_tag),
                        policy=cloud.policy)
    assert evidence.proven and cloud.billing() == []


def test_settings_level_entry_points(sandbox, tailpod_home) -> None:  # type: ignore[no-untyped-def]
    from tailpod.ledger import Ledger
    from tailpod.pods.down import down_many
    from tailpod.provision.base import PodSpec
    from tailpod.provision.create import up_remote
    from tailpod.provision.reconcile import status_remote
    from tailpod.provision.teardown import down_remote, run_dir_for

    from .conftest import settings_for

    settings = settings_for(sandbox, tailpod_home, TAILPOD_PROVIDER="vast",
                            TAILPOD_MAX_PRICE="1.0", TAILPOD_TTL_HOURS="0.5",
                            TAILPOD_RESULTS_DIR=str(tailpod_home / "results"))
    ledger = Ledger(settings.state_dir)
    opts = {"timings": fast_timings()}
    policy = fast_policy()
    spec = PodSpec(run_tag="tp-entry-1", gpu_preference=["H100 SXM", "RTX 4090"], image="img",
                   start_command=["sleep", "30"])
    record, info = up_remote(settings, ledger, spec, policy=policy, **opts)
    assert info.gpu_type == "RTX 4090"  # the H100 offers are above the $1/h cap
    assert record.ttl_expires_at and record.provider == "vastai"
    report = status_remote(settings, ledger, **opts)
    assert [r.run_tag for r in report.rows] == ["tp-entry-1"] and report.errors == []
    evidence = down_remote(settings, ledger, record, policy=policy, **opts)
    assert evidence.proven
    assert (run_dir_for(settings, "tp-entry-1") / "billing-proof.json").exists()
    assert down_many(settings, ledger, policy=policy, **opts) == []
    assert sandbox.meter()["billing_count"] == 0
