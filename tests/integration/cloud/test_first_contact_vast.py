"""vast.ai as published (issue 25, work item 3): the limits of create_instance.yaml's
x-input-validation in the client and the emulator, a PUBLIC_KEY that breaks them refused before
renting, `unknown`/`offline` destroyed and rented again, `frozen` counted as billing the GPU,
a 429 without Retry-After met with backoff, and offer searches paced to 10 a minute."""

from __future__ import annotations

import time
from dataclasses import replace
from pathlib import Path

import httpx
import pytest

from tailpod.errors import ConfigError
from tailpod.provision import proof
from tailpod.provision.base import PodInfo, PodState
from tailpod.provision.vastai import limits
from tailpod.provision.vastai import provider as vast_provider
from tailpod.sandbox import Sandbox
from tailpod.secrets import Secret

from .conftest import Cloud

# The published numbers, as read from vast-ai/docs @ c624622622496828c1ae58edec481bba1f5d675d
# api-reference/openapi/yaml/create_instance.yaml lines 299-319 (x-input-validation) and
# search_offers.yaml lines 428-431 (x-rate-limit): written here, not imported, so a changed
# constant fails.
PUBLISHED = {"image": 1024, "args": 4096, "label": 256, "env": 256, "env_total": 32768,
             "disk_min": 8.0, "onstart": 4048, "search_per_minute": 10}

# ssh-keygen -t rsa -b 2048: 372 characters of "ssh-rsa AAAA..." before any comment.
RSA_2048_PUBLIC = "ssh-rsa " + "A" * 364 + " user@laptop"
ED25519_PUBLIC = "ssh-ed25519 " + "A" * 68 + " user@laptop"


def test_the_constants_are_the_published_numbers() -> None:
    assert PUBLISHED["image"] == limits.IMAGE_MAX_CHARS
    assert PUBLISHED["args"] == limits.ARGS_AND_ONSTART_MAX_CHARS
    assert PUBLISHED["label"] == limits.LABEL_MAX_CHARS
    assert PUBLISHED["env"] == limits.ENV_ENTRY_MAX_CHARS
    assert PUBLISHED["env_total"] == limits.ENV_TOTAL_MAX_CHARS
    assert PUBLISHED["disk_min"] == limits.DISK_MIN_GB
    assert PUBLISHED["onstart"] == limits.ONSTART_MAX_CHARS
    assert PUBLISHED["search_per_minute"] == limits.SEARCH_PER_MINUTE


def rent(sandbox: Sandbox, **body: object) -> httpx.Response:
    offer = next(iter(sandbox.cloud.vast_offers))
    base: dict[str, object] = {"client_id": "me", "image": "img", "disk": 10, "label": "tp-x",
                               "runtype": "ssh_direct"}
    return httpx.put(f"{sandbox.vast_url}/api/v0/asks/{offer}/", json={**base, **body},
                     timeout=5, headers={"Authorization": f"Bearer {sandbox.vast_key}"})


@pytest.mark.parametrize(("body", "named"), [
    ({"env": {"K": "v" * (PUBLISHED["env"] - 2 + 1)}}, "K is 257"),  # "K=" + 255 = 257
    ({"env": {f"K{i:03d}": "v" * 250 for i in range(140)}}, "32768"),  # 140 x 255 > 32768
    ({"image": "i" * (PUBLISHED["image"] + 1)}, "image name"),
    ({"label": "l" * (PUBLISHED["label"] + 1)}, "label"),
    ({"onstart": "o" * 3000, "args_str": "a" * 1097}, "4096"),  # 4097 together
])
def test_the_emulator_refuses_what_vast_publishes_it_refuses(sandbox: Sandbox,
                                                             body: dict[str, object],
                                                             named: str) -> None:
    answer = rent(sandbox, **body)
    assert answer.status_code == 400, answer.text
    assert answer.json()["error"] == "invalid_args" and named in answer.json()["msg"]
    assert "vvvv" not in answer.text
    assert sandbox.meter()["billing_count"] == 0


def test_the_emulator_takes_what_fits_exactly(sandbox: Sandbox) -> None:
    exact = {"K": "v" * (PUBLISHED["env"] - 2)}  # "K=" + 254 = 256
    assert rent(sandbox, env=exact, onstart="o" * 3000, args_str="a" * 1096).status_code == 200


def test_an_rsa_public_key_is_refused_before_renting_and_ed25519_fits(
        make_cloud) -> None:  # type: ignore[no-untyped-def]
    cloud: Cloud = make_cloud("vastai")
    spec = cloud.spec(gpus=[cloud.gpu("second")])
    rsa = replace(spec, env={**spec.env, "PUBLIC_KEY": RSA_2048_PUBLIC})
    with pytest.raises(ConfigError) as err:
        cloud.provider.create(rsa)
    assert "PUBLIC_KEY" in err.value.message and "ed25519" in err.value.message
    assert "AAAA" not in err.value.message
    assert cloud.sandbox.cloud.pods == {}
    ok = replace(spec, env={**spec.env, "PUBLIC_KEY": Secret(ED25519_PUBLIC)})
    info = cloud.provider.create(ok)
    cloud.provider.terminate(info.pod_id)


def test_unknown_and_offline_are_a_failed_boot_and_frozen_bills_the_gpu(
        make_cloud) -> None:  # type: ignore[no-untyped-def]
    cloud: Cloud = make_cloud("vastai")
    provider = cloud.provider
    row = {"id": 7, "label": "tp-x", "dph_total": 0.5, "machine_id": 99}
    for status in ("unknown", "offline"):
        info = provider.to_info({**row, "actual_status": status})  # type: ignore[attr-defined]
        assert info.state is PodState.ERROR and info.detail["never_running"]
    frozen = provider.to_info({**row, "actual_status": "frozen"})  # type: ignore[attr-defined]
    assert frozen.state is PodState.STOPPED and frozen.detail["gpu_billing"]
    assert "GPU still bills" in proof.describe(frozen)
    stopped = provider.to_info({**row, "actual_status": "stopped"})  # type: ignore[attr-defined]
    assert not stopped.detail["gpu_billing"] and "GPU released" in proof.describe(stopped)


def test_a_frozen_neighbour_is_counted_at_its_gpu_price_in_the_charges_check(
        make_cloud) -> None:  # type: ignore[no-untyped-def]
    """A neighbour frozen (GPU charges apply) explains its GPU's drain, not only its disk:
    the credit drops by its price and the check must not blame the destroyed instance."""
    cloud: Cloud = make_cloud("vastai")
    cloud.fault("vast_state", op="create", times=1, state="frozen")
    neighbour_spec = cloud.spec(gpus=[cloud.gpu("second")])
    neighbour = cloud.provider.create(neighbour_spec)
    mine = cloud.provider.create(cloud.spec(gpus=[cloud.gpu("second")]))
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        seen = cloud.provider.get(neighbour.pod_id)
        if seen is not None and seen.detail["status"] == "frozen":
            break
        time.sleep(0.05)
    assert seen is not None and seen.detail["gpu_billing"]
    cloud.provider.terminate(mine.pod_id)
    cloud.recording_sleeps(evidence_window_s=1.0)
    evidence = cloud.provider.billing_evidence(  # type: ignore[attr-defined]
        mine.run_tag, mine.pod_id, mine.price_per_hr, known_active_tags=[neighbour_spec.run_tag])
    charges = next(c for c in evidence.checks if c.name == "charges-stopped")
    assert charges.passed, charges.detail
    cloud.provider.terminate(neighbour.pod_id)


def test_a_429_without_retry_after_is_met_with_backoff(make_cloud) -> None:  # type: ignore[no-untyped-def]
    cloud: Cloud = make_cloud("vastai")
    slept = cloud.recording_sleeps(backoff_s=0.05, backoff_max_s=0.2)
    fault = cloud.fault("rate_limit", op="search", times=2)
    offers = cloud.provider.offers([cloud.gpu("second")], 1, None)
    assert fault.fired == 2 and offers and offers[0].available
    assert len([s for s in slept if s > 0]) >= 2  # it waited before each retry
    raw = httpx.post(f"{cloud.sandbox.vast_url}/api/v0/bundles/", json={}, timeout=5,
                     headers={"Authorization": f"Bearer {cloud.sandbox.vast_key}"})
    assert raw.status_code == 200
    cloud.fault("rate_limit", op="search", times=1)
    limited = httpx.post(f"{cloud.sandbox.vast_url}/api/v0/bundles/", json={}, timeout=5,
                         headers={"Authorization": f"Bearer {cloud.sandbox.vast_key}"})
    assert limited.status_code == 429 and "retry-after" not in limited.headers  # as vast


def test_searches_are_paced_to_ten_a_minute() -> None:
    now = [0.0]
    slept: list[float] = []

    def sleep(seconds: float) -> None:
        slept.append(seconds)
        now[0] += seconds

    pacer = limits.WindowPacer(PUBLISHED["search_per_minute"], 60.0, clock=lambda: now[0],
                               sleep=sleep)
    for _ in range(10):
        pacer.wait()
        now[0] += 1.0
    assert slept == []  # ten in ten seconds: within the window
    pacer.wait()  # the eleventh waits until the first is a minute old
    assert slept == [pytest.approx(50.0)]
    assert vast_provider.SEARCH_PACER.requests == PUBLISHED["search_per_minute"]


def test_the_vendor_url_is_paced_and_an_emulator_is_not(sandbox: Sandbox,
                                                        tailpod_home: Path) -> None:
    from .conftest import settings_for

    emulated = vast_provider.VastProvider(settings_for(sandbox, tailpod_home))
    assert emulated.search_pacer is None
    vendor = vast_provider.VastProvider(settings_for(sandbox, tailpod_home,
                                                     TAILPOD_VAST_URL="https://console.vast.ai"))
    assert vendor.search_pacer is vast_provider.SEARCH_PACER


def test_an_offline_instance_is_destroyed_and_rented_again(
        sandbox: Sandbox, tailpod_home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from tailpod.engines.base import EngineConfig
    from tailpod.ledger import Ledger
    from tailpod.pods import cloud as cloud_up

    from .test_first_contact_start_form import _fake_pod_side, _settings

    _fake_pod_side(monkeypatch)
    monkeypatch.setattr(cloud_up, "pinned_image", lambda *_a: ("vllm/vllm-openai@sha256:"
                                                              + "cd" * 32, None))
    monkeypatch.setattr(vast_provider, "AVOIDED_MACHINES", set())
    fault = sandbox.add_fault("vast_state", provider="vast", op="create", times=1,
                              state="offline")
    settings = _settings(sandbox, tailpod_home, TAILPOD_PROVIDER="vastai",
                         TAILPOD_GPUS="RTX 4090", TAILSCALE_AUTH_KEY="")
    ledger = Ledger(settings.state_dir)
    said: list[str] = []
    record, info = cloud_up.up_cloud(settings, EngineConfig(engine="vllm", model="org/m"),
                                     ledger, said.append, preflight=False, use_tailnet=False)
    try:
        assert fault.fired == 1
        assert any("offline" in line and "renting once more" in line for line in said), said
        first = next(r for r in ledger.all() if r.run_tag != record.run_tag)
        assert first.status in ("terminated", "proven") or first.extra.other.get("proof") is not None
        assert sandbox.cloud.pods[f"vast:{first.pod_id}"].status == "terminated"
        gone = sandbox.cloud.pods[f"vast:{first.pod_id}"].meta["machine_id"]
        assert str(gone) in vast_provider.AVOIDED_MACHINES
        assert sandbox.cloud.pods[f"vast:{record.pod_id}"].meta["machine_id"] != gone
        assert info.state is PodState.RUNNING
    finally:
        from tailpod.provision.teardown import down_remote

        down_remote(settings, ledger, ledger.get(record.run_tag) or record)
    assert sandbox.meter()["billing_count"] == 0


def test_describe_keeps_other_states_unchanged() -> None:
    info = PodInfo("1", None, PodState.RUNNING, detail={"gpu_billing": True})
    assert "running" in proof.describe(info)
