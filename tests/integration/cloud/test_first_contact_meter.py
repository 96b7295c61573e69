"""Proofs say what they saw (issue 25, work item 4): a meter comparison (RunPod's billing
history once GraphQL is gone, vast's `credit`) is evidence only over a window longer than the
meter's update delay; under an emulated meter lag a few-second comparison is recorded "not
informative" and the proof rests on the listing and the direct lookup. Growth is evidence of
billing whatever the delay."""

from __future__ import annotations

import time
from pathlib import Path

import httpx
import pytest

from tailpod.provision import proof
from tailpod.provision.runpod import first_contact as fc
from tailpod.sandbox import Sandbox

from .conftest import Cloud, settings_for
from .test_cloud_accounts import rent_without_graphql, vanish_but_bill

HOUR = 3600.0


def _lag(sb: Sandbox, seconds: float) -> None:
    answer = httpx.post(f"{sb.admin_url}/admin/settings", json={"meter_lag_s": seconds},
                        timeout=5)
    assert answer.status_code == 200 and answer.json()["meter_lag_s"] == seconds


def _record_meter_delay(sb: Sandbox, home: Path, delay_s: float) -> None:
    settings = settings_for(sb, home)
    fc.save(settings, fc.FirstContactFacts(
        account=fc.account_id(sb.runpod_key), image="img", checked_at=time.time(),
        start_form="json", start_command_ran=True, pod_key_self_kill=True,
        meter_delay_s=delay_s, meter_bound_s=delay_s))


def _history(sb: Sandbox, home: Path, *, billing: bool) -> proof.ProofCheck:
    cloud, spec, info = rent_without_graphql(sb, settings_for(sb, home))
    pod = sb.cloud.find("runpod", info.pod_id)
    assert pod is not None
    if billing:  # gone from every listing and lookup, its meter running at $3600/h
        sb.cloud.meter.set_rate("runpod", info.pod_id, HOUR, "gpu+disk")
        vanish_but_bill(pod)
    else:
        cloud.provider.terminate(info.pod_id)
    evidence = cloud.provider.billing_evidence(spec.run_tag, info.pod_id, info.price_per_hr)
    if billing:
        sb.cloud.meter.close("runpod", info.pod_id)
    return next(c for c in evidence.checks if c.name == "billing-history")


def test_the_emulated_meter_lags_and_the_truth_does_not(retired: Sandbox) -> None:
    retired.cloud.meter.open("runpod", "p1", "tp-x", "acct", HOUR, "gpu")  # $1 a second
    _lag(retired, 3600.0)
    time.sleep(0.3)
    assert retired.cloud.meter.accrued(resource_id="p1") > 0.2  # the truth: per second
    shown = retired.cloud.meter.reported(resource_id="p1")
    opened = retired.cloud.meter.accrued(resource_id="p1")
    # the shown figure is the accrual at the last whole hour: at most what accrued so far
    # and frozen between updates
    time.sleep(0.2)
    assert retired.cloud.meter.reported(resource_id="p1") == shown <= opened
    _lag(retired, 0.0)
    assert retired.cloud.meter.reported(resource_id="p1") > 0.4


def test_a_short_comparison_under_meter_lag_is_not_evidence(retired: Sandbox,
                                                            tailpod_home: Path) -> None:
    """The pod is gone from the listing and the lookup but still bills; the meter updates
    hourly, so its history shows no growth in the window: the check says so instead of calling
    it evidence, and passes only because listing and lookup (fooled here) carry the proof."""
    _lag(retired, HOUR)
    # measured: longer than tailpod waits out (METER_WAIT_MAX_S), so the window stays short
    _record_meter_delay(retired, tailpod_home, 600.0)
    began = time.monotonic()
    check = _history(retired, tailpod_home, billing=True)
    assert time.monotonic() - began < proof.METER_WAIT_MAX_S
    assert check.informative is False and check.passed
    assert check.detail.startswith("not informative") and "600s" in check.detail
    assert "rests on the listing and the direct lookup" in check.detail


def test_without_a_measured_delay_no_growth_is_not_evidence(retired: Sandbox,
                                                            tailpod_home: Path) -> None:
    check = _history(retired, tailpod_home, billing=False)
    assert check.informative is False and "unknown" in check.detail


def test_over_a_window_past_the_measured_delay_no_growth_is_evidence(retired: Sandbox,
                                                                      tailpod_home: Path) -> None:
    _record_meter_delay(retired, tailpod_home, 0.05)  # the emulator's meter: no lag
    check = _history(retired, tailpod_home, billing=False)
    assert check.passed and check.informative, check.detail
    assert "longer than the meter's update delay" in check.detail


def test_growth_is_evidence_of_billing_whatever_the_delay(retired: Sandbox,
                                                          tailpod_home: Path) -> None:
    check = _history(retired, tailpod_home, billing=True)  # no lag, no measured delay
    assert not check.passed and check.informative


def test_vast_credit_under_lag_is_not_evidence_and_without_lag_catches_billing(
        make_cloud) -> None:  # type: ignore[no-untyped-def]
    from .test_cloud_accounts import vanish_but_bill as vanish

    for lag, expect_pass in ((HOUR, True), (0.0, False)):
        cloud: Cloud = make_cloud("vastai")
        _lag(cloud.sandbox, lag)
        spec = cloud.spec(gpus=[cloud.gpu("second")])
        info = cloud.provider.create(spec)
        pod = cloud.sandbox.cloud.find("vast", info.pod_id)
        assert pod is not None
        cloud.sandbox.cloud.meter.set_rate("vast", info.pod_id, HOUR, "gpu+disk")
        vanish(pod)
        evidence = cloud.provider.billing_evidence(  # type: ignore[attr-defined]
            spec.run_tag, info.pod_id, info.price_per_hr)
        charges = next(c for c in evidence.checks if c.name == "charges-stopped")
        cloud.sandbox.cloud.meter.close("vast", info.pod_id)
        assert charges.passed is expect_pass, charges.detail
        assert charges.informative is (not expect_pass)
        if expect_pass:
            assert charges.detail.startswith("not informative")


@pytest.mark.parametrize(("base", "delay", "window"), [
    (5.0, None, 5.0),  # unknown: the base window
    (5.0, 2.0, 5.0),  # already longer than the delay
    (5.0, 12.0, 13.0),  # a short measured delay is waited out
    (5.0, 3600.0, 5.0),  # an hour is not waited: the check will say it is not informative
])
def test_meter_window(base: float, delay: float | None, window: float) -> None:
    assert proof.meter_window_s(base, delay) == window


def test_a_meter_lag_setting_is_checked(retired: Sandbox) -> None:
    bad = httpx.post(f"{retired.admin_url}/admin/settings", json={"meter_lag_s": -1}, timeout=5)
    assert bad.status_code == 400
