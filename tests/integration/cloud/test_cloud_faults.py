"""Fault scenarios: each ends with the sandbox meter at zero, or with `down` failing while naming
exactly what still bills (and the command that kills it)."""

from __future__ import annotations

import time

import pytest

from tailpod.config import ttl_deadline
from tailpod.errors import BillingNotProven, CapacityError
from tailpod.provision.base import PodInfo, PodSpec
from tailpod.provision.create import create_pod_safely
from tailpod.provision.teardown import UnprovenTeardown, teardown
from tests.helpers.api_timings import fast_timings

from .conftest import Cloud


def up(cloud: Cloud, spec: PodSpec | None = None) -> tuple[PodSpec, PodInfo]:
    spec = spec or cloud.spec()
    spec.ttl_at = ttl_deadline(1.0, time.time())
    info = create_pod_safely(cloud.provider, spec, cloud.ledger, cloud.record(spec),
                             policy=cloud.policy)
    return spec, info


def down(cloud: Cloud, tag: str) -> None:
    record = cloud.ledger.get(tag)
    assert record is not None
    evidence = teardown(cloud.provider, cloud.ledger, record, cloud.run_dir(tag),
                        policy=cloud.policy)
    assert evidence.proven
    assert cloud.billing() == [], cloud.billing()


def pods_named(cloud: Cloud, tag: str) -> list[dict[str, object]]:
    return [p for p in cloud.sandbox.cloud.pods_public() if p["name"] == tag]


def test_capacity_on_first_choice_falls_back_and_says_so(cloud: Cloud) -> None:
    capacity = cloud.fault("capacity", gpu=cloud.gpu("sandbox_name_first"))
    spec, info = up(cloud)
    assert capacity.fired >= 1
    assert info.gpu_type and info.gpu_type.lower() == cloud.gpu("second").lower()
    assert info.detail["fallback_from"].lower() == cloud.gpu("first").lower()
    assert info.detail["fallback_reasons"]
    record = cloud.ledger.get(spec.run_tag)
    assert record and record.extra.fallback_from == info.detail["fallback_from"]
    assert record.gpu == info.gpu_type and record.price_per_hr == info.price_per_hr
    down(cloud, spec.run_tag)


def test_capacity_everywhere_creates_nothing(cloud: Cloud) -> None:
    faults = [cloud.fault("capacity", gpu=cloud.gpu(which))
              for which in ("sandbox_name_first", "sandbox_name_second")]
    spec = cloud.spec()
    with pytest.raises(CapacityError) as err:
        up(cloud, spec)
    assert all(f.fired >= 1 for f in faults), [f.fired for f in faults]
    assert "capacity" in err.value.message.lower() or "no longer available" in err.value.message
    assert cloud.billing() == [] and pods_named(cloud, spec.run_tag) == []
    assert cloud.ledger.get(spec.run_tag).status == "terminated"  # type: ignore[union-attr]


def test_rate_limited_create_honours_retry_after(cloud: Cloud) -> None:
    slept = cloud.recording_sleeps(max_retry_after_s=5.0)
    limit = cloud.fault("rate_limit", op="create", times=2, retry_after=1)
    spec, info = up(cloud)
    assert limit.fired == 2
    assert_waited_per_429(cloud, slept, 2)
    assert len(pods_named(cloud, spec.run_tag)) == 1
    down(cloud, spec.run_tag)


def assert_waited_per_429(cloud: Cloud, slept: list[float], times: int) -> None:
    """RunPod's 429 carries Retry-After (1 s here), honoured once per 429; vast documents no
    Retry-After on any 429 (x-rate-limit, vast-ai/docs @ c6246226), so its 429s are met by the
    client's own backoff (tests/helpers/api_timings.py fast_timings: 0.02 s doubling, at most 0.1 s)."""
    if cloud.kind == "runpod":
        assert slept.count(1.0) == times, slept
    else:
        assert 1.0 not in slept and len([s for s in slept if 0 < s <= 0.1]) >= times, slept


def test_retry_after_longer_than_the_cap_waits_the_cap(cloud: Cloud) -> None:
    slept = cloud.recording_sleeps(max_retry_after_s=0.3)
    limit = cloud.fault("rate_limit", op="create", times=1, retry_after=3600)
    spec, info = up(cloud)
    assert limit.fired == 1
    if cloud.kind == "runpod":
        assert 0.3 in slept and max(slept) == 0.3, slept
    else:  # no Retry-After from vast: the client's backoff, under the cap
        assert max(slept) <= 0.3, slept
    assert len(pods_named(cloud, spec.run_tag)) == 1
    down(cloud, spec.run_tag)


def test_5xx_burst_on_create_retries_without_duplicates(cloud: Cloud) -> None:
    burst = cloud.fault("server_error", op="create", times=2, status=503)
    spec, info = up(cloud)
    assert burst.fired == 2
    assert len(pods_named(cloud, spec.run_tag)) == 1
    down(cloud, spec.run_tag)


def test_create_that_errors_after_creating_is_adopted_not_duplicated(cloud: Cloud) -> None:
    fault = cloud.fault("error_after_create", times=1, carry_id=False)
    spec, info = up(cloud)
    assert fault.fired == 1
    assert len(pods_named(cloud, spec.run_tag)) == 1
    # The one pod that bills, by the emulator's meter, is the one create answered with an error
    # and the one up reports and the ledger holds; it was adopted on the first choice, not
    # replaced by a second pod on the next one.
    assert [b["id"] for b in cloud.billing()] == [info.pod_id]
    record = cloud.ledger.get(spec.run_tag)
    assert record is not None and record.pod_id == info.pod_id
    assert "fallback_from" not in info.detail
    down(cloud, spec.run_tag)


def test_vast_error_carrying_new_contract_destroys_that_instance(make_cloud) -> None:  # type: ignore[no-untyped-def]
    cloud = make_cloud("vastai")
    fault = cloud.fault("error_after_create", times=1, carry_id=True)
    spec, info = up(cloud)
    assert fault.fired == 1
    pods = pods_named(cloud, spec.run_tag)
    assert len(pods) == 2  # the stray from the failed rent, then the real one
    assert [p["status"] for p in pods].count("terminated") == 1
    assert len(cloud.billing()) == 1
    record = cloud.ledger.get(spec.run_tag)
    assert record and len(record.extra.provider_ids) == 2  # the stray was recorded too
    down(cloud, spec.run_tag)


def test_create_answer_slower_than_the_client_timeout(cloud: Cloud) -> None:
    # The pod exists but the answer never arrives in time: the retry must find it by tag.
    from dataclasses import replace

    from tailpod.provision.providers import get_provider

    cloud.provider = get_provider(cloud.kind, cloud.settings,
                                  timings=replace(fast_timings(), request_timeout_s=0.4))
    slow = cloud.fault("slow_create", times=1, seconds=1.0)
    spec, info = up(cloud)
    assert slow.fired == 1
    assert len(pods_named(cloud, spec.run_tag)) == 1
    down(cloud, spec.run_tag)


def test_terminate_failing_a_few_times_still_proves(cloud: Cloud) -> None:
    spec, _info = up(cloud)
    fail = cloud.fault("terminate_fail", times=3, status=502)
    down(cloud, spec.run_tag)
    assert fail.fired == 3


def test_terminate_failing_forever_names_what_bills_then_down_again(cloud: Cloud) -> None:
    spec, info = up(cloud)
    fail = cloud.fault("terminate_fail", status=500)
    with pytest.raises(UnprovenTeardown) as err:
        teardown(cloud.provider, cloud.ledger, cloud.ledger.get(spec.run_tag),  # type: ignore[arg-type]
                 cloud.run_dir(spec.run_tag), policy=cloud.policy)
    assert fail.fired >= 1
    assert isinstance(err.value, BillingNotProven) and err.value.exit_code == 3
    assert info.pod_id in err.value.message and f"tailpod down {spec.run_tag}" in err.value.message
    assert [r["id"] for r in cloud.billing()] == [info.pod_id]
    assert cloud.ledger.get(spec.run_tag).active  # type: ignore[union-attr]
    assert (cloud.run_dir(spec.run_tag) / "billing-proof.json").exists()
    cloud.sandbox.clear_faults()
    down(cloud, spec.run_tag)


def test_terminate_silently_ignored_once_is_caught_and_resent(cloud: Cloud) -> None:
    spec, _info = up(cloud)
    noop = cloud.fault("terminate_noop", times=1)
    down(cloud, spec.run_tag)
    assert noop.fired == 1


def test_terminate_silently_ignored_forever_fails_the_proof(cloud: Cloud) -> None:
    spec, info = up(cloud)
    noop = cloud.fault("terminate_noop")
    with pytest.raises(UnprovenTeardown) as err:
        teardown(cloud.provider, cloud.ledger, cloud.ledger.get(spec.run_tag),  # type: ignore[arg-type]
                 cloud.run_dir(spec.run_tag), policy=cloud.policy)
    assert noop.fired >= 1
    assert info.pod_id in err.value.message
    failed = {c.name for c in err.value.evidence.checks if not c.passed}
    assert "tag-listing" in failed and "gone-from-provider" in failed
    assert [r["id"] for r in cloud.billing()] == [info.pod_id]
    cloud.sandbox.clear_faults()
    down(cloud, spec.run_tag)


def test_stale_listing_after_terminate_is_waited_out(cloud: Cloud) -> None:
    spec, _info = up(cloud)
    stale = cloud.fault("stale_list", op="terminate", times=1, seconds=0.6)
    down(cloud, spec.run_tag)
    assert stale.fired == 1


def test_ctrl_c_during_create_leaves_nothing_billing(cloud: Cloud) -> None:
    spec = cloud.spec()
    original = cloud.provider._read_back  # type: ignore[attr-defined]

    def interrupted(pod_id: str, run_tag: str) -> PodInfo:
        raise KeyboardInterrupt

    cloud.provider._read_back = interrupted  # type: ignore[attr-defined]
    with pytest.raises(KeyboardInterrupt):
        up(cloud, spec)
    cloud.provider._read_back = original  # type: ignore[attr-defined]
    assert cloud.billing() == []
    record = cloud.ledger.get(spec.run_tag)
    assert record is not None and record.pod_id  # the id was recorded before the interrupt
    assert record.status == "terminated"
    assert any(e["event"] == "create-failed" for e in record.events)


def test_listing_errors_during_down_are_retried(cloud: Cloud) -> None:
    spec, _info = up(cloud)
    errors = cloud.fault("server_error", op="list", times=3, status=500)
    down(cloud, spec.run_tag)
    assert errors.fired == 3


def test_rate_limited_terminate_is_retried(cloud: Cloud) -> None:
    slept = cloud.recording_sleeps(max_retry_after_s=5.0)
    spec, _info = up(cloud)
    limit = cloud.fault("rate_limit", op="terminate", times=2, retry_after=1)
    down(cloud, spec.run_tag)
    assert limit.fired == 2
    assert_waited_per_429(cloud, slept, 2)


def test_down_before_the_container_is_up_kills_the_process_too(cloud: Cloud) -> None:
    """A pod torn down while its container is still starting must never start its process.
    The check runs past the moment the container would have come up: a control pod with the
    same slow start, rented after and left alone, does start its process then (so the check can
    fail). The slow start doubles until the teardown begins with a third of it still ahead (on a
    loaded 2-core run the container was once up before the teardown began)."""
    host = cloud.sandbox.cloud.host
    pods = cloud.sandbox.cloud.pods
    for start_s in (1.5, 3.0, 6.0, 12.0):
        slow = cloud.fault("slow_start", op="create", seconds=start_s)
        spec, info = up(cloud)
        assert slow.fired == 0  # a standing condition: consulted, never counted
        pod = pods[f"{cloud.sandbox_name}:{info.pod_id}"]
        if pod.ready_at - time.time() > start_s / 3:
            break
        down(cloud, spec.run_tag)  # too slow a machine for this start: again, slower
        cloud.sandbox.cloud.faults.clear()
    else:
        pytest.fail("one create took two thirds of a 12 s slow start")
    assert not pod.is_ready(time.time())
    assert info.ssh_port is None or info.detail.get("container_up") is False
    assert host.running_pids() == []  # type: ignore[attr-defined]
    record = cloud.ledger.get(spec.run_tag)
    assert record is not None
    assert teardown(cloud.provider, cloud.ledger, record, cloud.run_dir(spec.run_tag),
                    policy=cloud.policy).proven
    control_spec, control = up(cloud)
    control_pod = pods[f"{cloud.sandbox_name}:{control.pod_id}"]
    assert [b["id"] for b in cloud.billing()] == [control.pod_id]
    # past the moment both containers come up (a lower bound on the wait, never an upper one)
    time.sleep(max(0.0, max(pod.ready_at, control_pod.ready_at) + 0.5 - time.time()))
    deadline = time.monotonic() + 30
    while not host.running_pids() and time.monotonic() < deadline:  # type: ignore[attr-defined]
        time.sleep(0.05)
    assert pod.started_at is None  # the torn-down pod's container never started
    assert control_pod.started_at is not None
    assert host.running_pids() != []  # type: ignore[attr-defined]  # the control's process
    down(cloud, control_spec.run_tag)
    assert host.running_pids() == []  # type: ignore[attr-defined]


def test_a_pod_that_keeps_running_its_process_is_killed_on_down(cloud: Cloud) -> None:
    spec, info = up(cloud)
    deadline = time.monotonic() + 3
    while not cloud.sandbox.cloud.host.running_pids() and time.monotonic() < deadline:  # type: ignore[attr-defined]
        time.sleep(0.02)
    assert cloud.sandbox.cloud.host.running_pids()  # type: ignore[attr-defined]
    down(cloud, spec.run_tag)
    assert cloud.sandbox.cloud.host.running_pids() == []  # type: ignore[attr-defined]


def test_every_create_attempt_failing_leaves_nothing(cloud: Cloud) -> None:
    errors = cloud.fault("server_error", op="create", status=500)
    spec = cloud.spec()
    with pytest.raises(CapacityError) as err:
        up(cloud, spec)
    assert errors.fired >= 2  # every candidate, every attempt
    assert "kept failing" in err.value.message
    assert cloud.billing() == [] and pods_named(cloud, spec.run_tag) == []


MONEY_CHECK = {"runpod": "account-spend-rate", "vastai": "charges-stopped"}


def test_pod_billing_while_unlisted_fails_the_proof_by_the_money(cloud: Cloud) -> None:
    # Terminate answers success and the pod leaves the listing and the lookup, but the meter
    # runs on: only the money (RunPod's spend rate, vast's balance) can show it.
    money_check = MONEY_CHECK[cloud.kind]
    spec, info = up(cloud)
    # vast bills only storage until the container is up: wait for the GPU to bill too.
    deadline = time.monotonic() + 10
    while cloud.billing()[0]["billing_what"] != "gpu+disk" and time.monotonic() < deadline:
        time.sleep(0.02)
    assert cloud.billing()[0]["billing_what"] == "gpu+disk"
    unlisted = cloud.fault("terminate_unlisted", times=1)
    with pytest.raises(UnprovenTeardown) as err:
        teardown(cloud.provider, cloud.ledger, cloud.ledger.get(spec.run_tag),  # type: ignore[arg-type]
                 cloud.run_dir(spec.run_tag), policy=cloud.policy)
    assert unlisted.fired == 1
    assert isinstance(err.value, BillingNotProven) and err.value.exit_code == 3
    failed = {c.name for c in err.value.evidence.checks if not c.passed}
    assert failed == {money_check}, failed  # listing and lookup were fooled
    assert spec.run_tag in err.value.message and "STILL" in err.value.message.upper()
    assert pods_named(cloud, spec.run_tag)[0]["status"] == "terminated"
    assert [r["id"] for r in cloud.billing()] == [info.pod_id]
    assert cloud.ledger.get(spec.run_tag).active  # type: ignore[union-attr]
