"""The emulators follow the spec lines the audit found them off (issue 25, item 7), and tailpod
lists RunPod pods with includeClusterPods=true (each expected value is the spec's, cited)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest

from tailpod.provision.apiclient import ApiTimings
from tailpod.provision.providers import get_provider
from tailpod.sandbox import Sandbox

from .conftest import settings_for


def rp(sb: Sandbox, method: str, path: str, **kw: Any) -> httpx.Response:
    return httpx.request(method, sb.runpod_url + path, timeout=10,
                         headers={"Authorization": f"Bearer {sb.runpod_key}"}, **kw)


def va(sb: Sandbox, method: str, path: str, **kw: Any) -> httpx.Response:
    return httpx.request(method, sb.vast_url + path, timeout=10,
                         headers={"Authorization": f"Bearer {sb.vast_key}"}, **kw)


BASE = {"name": "tp-cuda", "image": "img"}


@pytest.mark.parametrize(("gpu", "status"), [
    ({"minCudaVersion": "12.8"}, 201),  # the sandbox A40 hosts report 12.8
    ({"minCudaVersion": "12.9"}, 400),  # "a version no machine reports yields a capacity error"
    ({"minCudaVersion": "12.10"}, 400),  # numerically above 12.8, not as a decimal
    ({"minCudaVersion": "11.8"}, 201),
    ({"allowedCudaVersions": ["12.8", "12.6"]}, 201),
    ({"allowedCudaVersions": ["12.6"]}, 400),  # "Matching is exact"
    ({"allowedCudaVersions": ["12.8"], "minCudaVersion": "12.0"}, 400),  # mutually exclusive
    ({"allowedCudaVersions": [], "minCudaVersion": "12.0"}, 201),  # `[]` may accompany a floor
    ({"minCudaVersion": "12.8.1"}, 422),  # the pattern ^\d+\.\d+$
])
def test_runpod_emulator_places_by_the_cuda_constraints(sandbox: Sandbox, gpu: dict[str, Any],
                                                        status: int) -> None:
    """CreateGpuConfig.minCudaVersion / allowedCudaVersions (openapi @ a900806e)."""
    answer = rp(sandbox, "POST", "/v2/pods",
                json={**BASE, "gpu": {"id": "NVIDIA A40", "count": 1, **gpu}})
    assert answer.status_code == status, answer.text
    if status == 201:
        assert rp(sandbox, "DELETE", f"/v2/pods/{answer.json()['id']}").status_code == 204
    assert sandbox.meter()["billing_count"] == 0


def test_runpod_emulator_shapes_follow_the_spec(sandbox: Sandbox) -> None:
    missing_image = rp(sandbox, "POST", "/v2/pods",
                       json={"name": "tp-x", "gpu": {"id": "NVIDIA A40"}})
    assert missing_image.status_code == 422  # an if/then rule of the schema: the 422 row
    created = rp(sandbox, "POST", "/v2/pods", json={**BASE, "gpu": {"id": "NVIDIA A40"}})
    assert created.status_code == 201
    # RateLimitPolicyHeader / RateLimitHeader: structured lists, one member per window
    policy, state = created.headers["RateLimit-Policy"], created.headers["RateLimit"]
    assert '"minute";q=60;w=60' in policy and '"hour";q=' in policy
    assert '"minute";r=' in state and ";t=" in state
    pod_id = created.json()["id"]
    billing = rp(sandbox, "GET", "/v2/billing/pods", params={"podId": pod_id}).json()
    assert billing["metadata"]["query"]["bucketSize"] == "day"  # BillingBucketSize default
    import time

    deadline = time.monotonic() + 10
    runtime = None
    while time.monotonic() < deadline and not runtime:
        runtime = rp(sandbox, "GET", f"/v2/pods/{pod_id}").json().get("runtime")
        time.sleep(0.05)
    assert runtime and all(set(g) == {"util", "memoryUtil"} for g in runtime["gpus"])
    rp(sandbox, "DELETE", f"/v2/pods/{pod_id}")


def test_tailpod_lists_runpod_pods_with_cluster_members(sandbox: Sandbox,
                                                        tailpod_home: Path) -> None:
    from tests.contracts.contract import Recorder, contract_for

    recorder = Recorder()
    provider = get_provider("runpod", settings_for(sandbox, tailpod_home),
                            timings=ApiTimings.fast(), transport=recorder)
    provider.list_all()
    listing = [e for e in recorder.exchanges if e.method == "GET" and e.path == "/v2/pods"]
    assert listing and listing[0].params.get("includeClusterPods") == "true"
    contract = contract_for("runpod", "GET", "/v2/pods")
    assert contract is not None and contract.query_errors(listing[0].params) == []


def test_vast_emulator_codes_follow_the_spec(sandbox: Sandbox) -> None:
    gone = va(sandbox, "DELETE", "/api/v0/instances/424242/", json={})
    assert gone.status_code == 404 and gone.json()["error"] == "not_found"  # destroy 404
    offers = list(sandbox.cloud.vast_offers)[:3]
    for offer in offers:
        made = va(sandbox, "PUT", f"/api/v0/asks/{offer}/",
                  json={"client_id": "me", "image": "img", "disk": 10, "label": "tp-x"})
        assert made.status_code == 200, made.text
    page = va(sandbox, "GET", "/api/v1/instances/", params={"limit": 2}).json()
    # "Number of instances returned in this page"
    assert page["instances_found"] == len(page["instances"]) == 2
    for row in va(sandbox, "GET", "/api/v1/instances/").json()["instances"]:
        va(sandbox, "DELETE", f"/api/v0/instances/{row['id']}/", json={})
