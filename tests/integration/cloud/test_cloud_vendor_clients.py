"""The vendors' own Python clients work against the sandbox, unmodified."""

from __future__ import annotations

import importlib.metadata

import pytest

from tailpod.sandbox import Sandbox


def _version(name: str) -> tuple[int, ...]:
    try:
        raw = importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return ()
    return tuple(int(p) for p in raw.split(".")[:2] if p.isdigit())


@pytest.fixture()
def runpod_client(sandbox: Sandbox, monkeypatch: pytest.MonkeyPatch):  # type: ignore[no-untyped-def]
    if not _version("runpod"):
        pytest.skip("runpod is not installed")
    import runpod

    monkeypatch.setenv("RUNPOD_API_BASE_URL", sandbox.runpod_url)
    monkeypatch.setattr(runpod, "api_key", sandbox.runpod_key)
    return runpod


def test_runpod_package_full_cycle(runpod_client, sandbox: Sandbox) -> None:  # type: ignore[no-untyped-def]
    runpod = runpod_client
    gpus = runpod.get_gpus()
    assert any(g["id"] == "NVIDIA A40" for g in gpus)
    assert runpod.get_gpu("NVIDIA A40")["lowestPrice"]["uninterruptablePrice"] > 0
    pod = runpod.create_pod("tp-vendor-rp", "runpod/base:latest", "NVIDIA A40",
                            ports="22/tcp,8000/http", env={"A": "1"}, docker_args="sleep 30",
                            volume_in_gb=10)
    assert pod["id"] and pod["env"] == ["A=1"] and pod["machine"]["podHostId"]
    assert [p["id"] for p in runpod.get_pods()] == [pod["id"]]
    fetched = runpod.get_pod(pod["id"])
    assert fetched["desiredStatus"] == "RUNNING" and fetched["costPerHr"] == 0.4
    assert len(sandbox.billing_now()) == 1
    # stop keeps billing the volume (RunPod's stopped-storage rate); terminate ends it
    runpod.stop_pod(pod["id"])
    assert sandbox.billing_now()[0]["billing_what"] == "disk (stopped)"
    assert runpod.terminate_pod(pod["id"]) is None
    assert runpod.get_pod(pod["id"]) is None
    assert runpod.get_pods() == []
    assert sandbox.meter()["billing_count"] == 0


def test_runpod_package_errors(runpod_client, sandbox: Sandbox) -> None:  # type: ignore[no-untyped-def]
    runpod = runpod_client
    from runpod import error

    with pytest.raises(ValueError):
        runpod.create_pod("tp-x", "img", "NVIDIA NoSuchGPU")
    sandbox.add_fault("capacity", provider="runpod", gpu="NVIDIA A40")
    with pytest.raises(error.QueryError, match="no longer any instances"):
        runpod.create_pod("tp-x", "img", "NVIDIA A40")
    # runpod-python 1.12.0 (runpod/api/mutations/pods.py) pastes values into the query text
    # unescaped; a quote breaks it.
    # (This is why tailpod sends JSON bodies and GraphQL variables instead.)
    with pytest.raises(error.QueryError):
        runpod.create_pod('tp-"quoted"', "img", "NVIDIA RTX A6000")
    runpod.api_key = "wrong-key-123456"
    with pytest.raises(error.AuthenticationError):
        runpod.get_pods()
    assert sandbox.meter()["billing_count"] == 0


@pytest.fixture()
def vast_client(sandbox: Sandbox):  # type: ignore[no-untyped-def]
    # vastai < 1.9 reaches the network at import time; only the 1.9 SDK takes server_url.
    if _version("vastai") < (1, 9):
        pytest.skip("vastai>=1.9 is not installed")
    from vastai import VastAI

    return VastAI(api_key=sandbox.vast_key, server_url=sandbox.vast_url, retry=2)


def test_vastai_sdk_full_cycle(vast_client, sandbox: Sandbox) -> None:  # type: ignore[no-untyped-def]
    offers = vast_client.search_offers(query="gpu_name=RTX_4090 num_gpus=1 reliability>0.98",
                                       order="dph_total")
    assert offers and {o["gpu_name"] for o in offers} == {"RTX 4090"}
    assert offers == sorted(offers, key=lambda o: o["dph_total"])
    created = vast_client.create_instance(offers[0]["id"], image="vastai/base:latest", disk=16,
                                          label="tp-vendor-vast", onstart_cmd="sleep 30",
                                          env={"A": "1"}, cancel_unavail=True)
    assert created["success"] is True
    instance_id = created["new_contract"]
    rows = vast_client.show_instances()
    assert [r["id"] for r in rows] == [instance_id]
    assert rows[0]["label"] == "tp-vendor-vast" and rows[0]["extra_env"] == {"A": "1"}
    one = vast_client.show_instance(instance_id)
    assert one is not None and one["gpu_name"] == "RTX 4090" and one["duration"] >= 0
    assert len(sandbox.billing_now()) == 1
    assert vast_client.destroy_instance(instance_id)["success"] is True
    assert vast_client.show_instance(instance_id) is None
    assert vast_client.show_instances() == []
    assert sandbox.meter()["billing_count"] == 0


def test_vastai_sdk_sees_errors(vast_client, sandbox: Sandbox) -> None:  # type: ignore[no-untyped-def]
    import requests
    from vastai import VastAI

    offer = vast_client.search_offers(query="gpu_name=RTX_3090")[0]
    sandbox.add_fault("capacity", provider="vast", gpu="RTX 3090")
    with pytest.raises(requests.HTTPError) as err:
        vast_client.create_instance(offer["id"], image="img", disk=10, label="tp-x")
    assert err.value.response.status_code == 410
    assert err.value.response.json()["error"] == "no_such_ask"
    bad = VastAI(api_key="not-a-real-key-0000", server_url=sandbox.vast_url, retry=1)
    with pytest.raises(requests.HTTPError) as err:
        bad.show_instances()
    assert err.value.response.status_code == 401
    assert sandbox.meter()["billing_count"] == 0
