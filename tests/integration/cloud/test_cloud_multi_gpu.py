"""A multi-GPU pod on both sandbox providers: the request asks for N GPUs and the price read back
is the whole pod's, which is what the ledger, spend and $/Mtok use."""

from __future__ import annotations

import time

import pytest

from tailpod.config import ttl_deadline
from tailpod.provision.create import create_pod_safely
from tailpod.provision.teardown import teardown

from .conftest import Cloud

ONE_GPU_PRICE = {"runpod": 0.69, "vastai": 0.42}  # RTX 4090 in the sandbox catalog, $/h
TWO_GPU_PRICE = {"runpod": 1.38, "vastai": 0.78}  # RunPod: 2 x unit; vast: the 2x offer's own


def test_two_gpu_pod_is_asked_for_and_priced_whole(cloud: Cloud) -> None:
    gpu = "NVIDIA GeForce RTX 4090" if cloud.kind == "runpod" else "RTX 4090"
    offers = cloud.provider.offers([gpu], 2, None)
    assert offers[0].gpu_count == 2
    spec = cloud.spec(gpus=[gpu], gpu_count=2)
    spec.ttl_at = ttl_deadline(1.0, time.time())
    info = create_pod_safely(cloud.provider, spec, cloud.ledger, cloud.record(spec),
                             policy=cloud.policy)
    try:
        assert cloud.billing() != []
        assert info.gpu_count == 2
        # the provider's whole-pod rate (vast adds storage to dph_total)
        assert info.price_per_hr == pytest.approx(TWO_GPU_PRICE[cloud.kind], abs=0.02)
        assert info.price_per_hr > ONE_GPU_PRICE[cloud.kind] * 1.5
        record = cloud.ledger.get(spec.run_tag)
        assert record is not None and record.gpu_count == 2
        assert record.price_per_hr == info.price_per_hr
    finally:
        record = cloud.ledger.get(spec.run_tag)
        assert record is not None
        evidence = teardown(cloud.provider, cloud.ledger, record, cloud.run_dir(spec.run_tag),
                            policy=cloud.policy)
        assert evidence.proven
    assert cloud.billing() == []
