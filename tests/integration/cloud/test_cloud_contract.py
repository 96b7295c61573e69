"""The provider contract, run against both sandbox providers through the same tests."""

from __future__ import annotations

import json
import time

from tailpod.config import ttl_deadline
from tailpod.provision.base import PodState
from tailpod.provision.create import create_pod_safely
from tailpod.provision.teardown import PROOF_FILE, teardown

from .conftest import Cloud


def wait_for(predicate, timeout=3.0, interval=0.02):  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    raise AssertionError("condition not met in time")


def test_create_read_list_terminate_prove(cloud: Cloud) -> None:
    spec = cloud.spec(gpus=[cloud.gpu("second")])
    spec.ttl_at = ttl_deadline(2.0, time.time())
    info = create_pod_safely(cloud.provider, spec, cloud.ledger, cloud.record(spec),
                             policy=cloud.policy)
    assert info.run_tag == spec.run_tag
    assert info.gpu_type and info.gpu_type.lower() == cloud.gpu("second").lower()
    assert info.price_per_hr and info.price_per_hr > 0
    assert "fallback_from" not in info.detail
    assert len(cloud.billing()) == 1

    record = cloud.ledger.get(spec.run_tag)
    assert record is not None and record.pod_id == info.pod_id
    assert record.ttl_expires_at == spec.ttl_at  # the spec's deadline, not a second clock read
    assert record.price_per_hr == info.price_per_hr

    listed = cloud.provider.list_by_tag(spec.run_tag)
    assert [p.pod_id for p in listed] == [info.pod_id]
    ready = wait_for(lambda: (p := cloud.provider.get(info.pod_id)) and p.ssh_port
                     and p.detail.get("container_up") and p)
    assert ready.state is PodState.RUNNING and ready.ssh_host == "127.0.0.1"

    evidence = teardown(cloud.provider, cloud.ledger, record, cloud.run_dir(spec.run_tag),
                        policy=cloud.policy)
    assert evidence.proven
    assert {c.name for c in evidence.checks} >= {"tag-listing", "direct-lookup",
                                                  "other-tailpod-resources"}
    assert cloud.billing() == []
    assert cloud.provider.get(info.pod_id) is None
    assert cloud.ledger.get(spec.run_tag).status == "terminated"  # type: ignore[union-attr]
    proof = json.loads((cloud.run_dir(spec.run_tag) / PROOF_FILE).read_text())
    assert proof["proven"] is True and proof["pod_ids"] == [info.pod_id]
    assert proof["run_tag"] == spec.run_tag

    # down is idempotent: a second run re-proves without error
    again = teardown(cloud.provider, cloud.ledger, cloud.ledger.get(spec.run_tag),  # type: ignore[arg-type]
                     cloud.run_dir(spec.run_tag), policy=cloud.policy)
    assert again.proven


def test_terminate_and_get_are_idempotent_for_unknown_ids(cloud: Cloud) -> None:
    unknown = "99999999" if cloud.kind == "vastai" else "doesnotexist01"
    cloud.provider.terminate(unknown)  # not found = success
    assert cloud.provider.get(unknown) is None


def test_list_by_tag_none_lists_only_tailpod_tagged(cloud: Cloud) -> None:
    tagged = cloud.spec(gpus=[cloud.gpu("second")], run_tag="tp-contract-a")
    untagged = cloud.spec(gpus=[cloud.gpu("second")], run_tag="someone-elses-pod")
    a = cloud.provider.create(tagged)
    b = cloud.provider.create(untagged)
    everything = {p.pod_id for p in cloud.provider.list_by_tag(None)}
    assert a.pod_id in everything and b.pod_id not in everything
    assert [p.pod_id for p in cloud.provider.list_by_tag("tp-contract-a")] == [a.pod_id]
    cloud.provider.terminate(a.pod_id)
    cloud.provider.terminate(b.pod_id)
    assert cloud.billing() == []


def test_offers_in_preference_order_with_prices(cloud: Cloud) -> None:
    offers = cloud.provider.offers([cloud.gpu("second"), "NoSuchGPU 9000"], 1, 0.01)
    assert [o.available for o in offers] == [True, False]
    assert offers[0].price_per_hr and offers[0].price_per_hr > 0.01
    assert offers[0].detail["above_cap"] is True
    assert cloud.billing() == []
