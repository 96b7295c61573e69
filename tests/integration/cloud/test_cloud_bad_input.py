"""Bad input fails early and clearly, and nothing is ever created (the meter stays at zero)."""

from __future__ import annotations

import pytest

from tailpod.errors import AuthError, CapacityError, ConfigError, TailpodError
from tailpod.provision.create import create_pod_safely
from tailpod.provision.providers import get_provider

from .conftest import Cloud, settings_for


def attempt(cloud: Cloud, **spec_kw: object) -> TailpodError:
    spec = cloud.spec(**spec_kw)  # type: ignore[arg-type]
    with pytest.raises(TailpodError) as err:
        create_pod_safely(cloud.provider, spec, cloud.ledger, cloud.record(spec),
                          policy=cloud.policy)
    assert cloud.billing() == []
    assert cloud.sandbox.cloud.pods_public() == []
    return err.value


def test_invalid_api_key_is_401(cloud: Cloud) -> None:
    env_key = "RUNPOD_API_KEY" if cloud.kind == "runpod" else "VAST_API_KEY"
    cloud.provider = cloud.new_provider(**{env_key: "definitely-not-a-key-123"})
    echo = cloud.fault("echo_key")  # the error body quotes the key: tailpod must not
    err = attempt(cloud)
    assert isinstance(err, AuthError) and "401" in err.message
    assert env_key in (err.hint or "")
    assert echo.fired >= 1  # the body tailpod read did carry the key
    assert "definitely-not-a-key-123" not in str(err) + repr(err) + (err.hint or "")


def test_key_without_access_is_403(cloud: Cloud) -> None:
    env_key = "RUNPOD_API_KEY" if cloud.kind == "runpod" else "VAST_API_KEY"
    cloud.sandbox.set_account(cloud.sandbox_name, "restricted-key-abc123", restricted=True)
    cloud.provider = cloud.new_provider(**{env_key: "restricted-key-abc123"})
    echo = cloud.fault("echo_key")
    err = attempt(cloud)
    assert isinstance(err, AuthError) and "403" in err.message
    assert echo.fired >= 1
    assert "restricted-key-abc123" not in str(err) + repr(err) + (err.hint or "")


def test_unknown_gpu_name(cloud: Cloud) -> None:
    err = attempt(cloud, gpus=["Quantum GPU 9000"])
    assert isinstance(err, (ConfigError, CapacityError))
    assert "Quantum GPU 9000" in err.message


def test_unknown_gpu_name_suggests_a_close_runpod_id(make_cloud) -> None:  # type: ignore[no-untyped-def]
    cloud = make_cloud("runpod")
    err = attempt(cloud, gpus=["NVIDIA A4O"])
    assert isinstance(err, ConfigError) and "NVIDIA A40" in (err.hint or "")


def test_price_cap_below_every_offer(cloud: Cloud) -> None:
    err = attempt(cloud, max_price=0.05)
    assert isinstance(err, CapacityError)
    assert "price cap $0.05/h is below every" in err.message and "cheapest" in err.message


def test_empty_preference_list(cloud: Cloud) -> None:
    spec = cloud.spec(gpus=[])
    with pytest.raises(ConfigError) as err:
        create_pod_safely(cloud.provider, spec, cloud.ledger, cloud.record(spec))
    assert "empty" in err.value.message
    assert cloud.ledger.get(spec.run_tag) is None  # refused before anything was written
    with pytest.raises(ConfigError):
        cloud.provider.create(cloud.spec(gpus=["  "]))
    assert cloud.billing() == []


def test_missing_api_key_and_unknown_provider(sandbox, tailpod_home) -> None:  # type: ignore[no-untyped-def]
    settings = settings_for(sandbox, tailpod_home, RUNPOD_API_KEY="", VAST_API_KEY="")
    for name, env in (("runpod", "RUNPOD_API_KEY"), ("vast", "VAST_API_KEY")):
        with pytest.raises(ConfigError) as err:
            get_provider(name, settings)
        assert env in err.value.message
    with pytest.raises(ConfigError) as err:
        get_provider("aws", settings)
    assert "runpod" in (err.value.hint or "")


def test_insufficient_balance_stops_without_creating(cloud: Cloud) -> None:
    key = "poor-account-key-42"
    env_key = "RUNPOD_API_KEY" if cloud.kind == "runpod" else "VAST_API_KEY"
    cloud.sandbox.set_account(cloud.sandbox_name, key, balance=0.01)
    cloud.provider = cloud.new_provider(**{env_key: key})
    err = attempt(cloud)
    assert "credit" in err.message or "balance" in err.message
