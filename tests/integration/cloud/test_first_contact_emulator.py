"""The emulators follow the spec lines the audit found them off (issue 25, item 7), and tailpod
lists RunPod pods with includeClusterPods=true (each expected value is the spec's, cited)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest

from tailpod.provision.providers import get_provider
from tailpod.sandbox import Sandbox
from tests.helpers.api_timings import fast_timings

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
    from tests.integration.contracts.contract import Recorder, contract_for

    recorder = Recorder()
    provider = get_provider("runpod", settings_for(sandbox, tailpod_home),
                            timings=fast_timings(), transport=recorder)
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


def _utc(*parts: int) -> float:
    from datetime import datetime, timezone

    return datetime(*parts, tzinfo=timezone.utc).timestamp()  # type: ignore[misc]


@pytest.mark.parametrize(("size", "start", "end"), [
    ("hour", (2026, 12, 2, 5), (2026, 12, 2, 6)),
    ("day", (2026, 12, 2), (2026, 12, 3)),
    ("week", (2026, 11, 30), (2026, 12, 7)),  # 2026-11-30 is a Monday
    ("month", (2026, 12, 1), (2027, 1, 1)),
    ("year", (2026, 1, 1), (2027, 1, 1)),
])
def test_billing_buckets_follow_bucket_size(size: str, start: tuple[int, ...],
                                            end: tuple[int, ...]) -> None:
    """BillingBucketSize (hour, day, week, month, year) and BillingTimeRange's half-open
    [startTime, endTime) (openapi @ a900806e)."""
    from tailpod.sandbox.runpod_api import bucket_end, bucket_start

    at = _utc(2026, 12, 2, 5, 7, 3)
    assert bucket_start(at, size) == _utc(*start)
    assert bucket_end(bucket_start(at, size), size) == _utc(*end)
    assert bucket_start(_utc(*end), size) == _utc(*end)  # a boundary starts its own bucket


def test_the_meter_splits_a_pods_spend_by_bucket() -> None:
    from tailpod.sandbox.meter import BillingMeter

    now = [_utc(2026, 12, 2, 4, 30)]
    meter = BillingMeter(clock=lambda: now[0])
    meter.open("runpod", "p1", "tp-x", "acct", 3.6, "gpu")  # $3.60/h = $0.001 a second
    now[0] = _utc(2026, 12, 2, 5, 15)
    first = meter.reported_between("runpod", "p1", _utc(2026, 12, 2, 4), _utc(2026, 12, 2, 5))
    second = meter.reported_between("runpod", "p1", _utc(2026, 12, 2, 5), _utc(2026, 12, 2, 6))
    assert first == pytest.approx(1800 * 0.001) and second == pytest.approx(900 * 0.001)
    meter.close("runpod", "p1")
    now[0] = _utc(2026, 12, 2, 7)
    assert meter.reported_between("runpod", "p1", _utc(2026, 12, 2, 5),
                                  _utc(2026, 12, 2, 6)) == pytest.approx(0.9)


def test_runpod_billing_answers_per_bucket_and_refuses_a_bad_query(sandbox: Sandbox) -> None:
    from tests.integration.contracts.contract import contract_for

    contract = contract_for("runpod", "GET", "/v2/billing/pods")
    assert contract is not None
    created = rp(sandbox, "POST", "/v2/pods", json={**BASE, "gpu": {"id": "NVIDIA A40"}})
    pod_id = created.json()["id"]
    try:
        answer = rp(sandbox, "GET", "/v2/billing/pods",
                    params={"podId": pod_id, "bucketSize": "hour"})
        body = answer.json()
        assert answer.status_code == 200 and contract.response_errors(200, body) == []
        for record in body["records"]:
            start, end = (_parse(record[k]) for k in ("startTime", "endTime"))
            assert start % 3600 == 0 and end - start == 3600
        assert body["metadata"]["recordCount"] == len(body["records"])
        assert body["metadata"]["totals"]["totalAmount"] == pytest.approx(
            sum(r["totalAmount"] for r in body["records"]))
        query = body["metadata"]["query"]
        assert query["bucketSize"] == "hour" and _parse(query["startTime"]) % 3600 == 0
        last = rp(sandbox, "GET", "/v2/billing/pods",
                  params={"podId": pod_id, "bucketSize": "day", "lastN": 2}).json()
        window = [_parse(last["metadata"]["query"][k]) for k in ("startTime", "endTime")]
        assert window[1] - window[0] == 2 * 86400  # the current day and the one before
        for bad in ({"bucketSize": "minute"},
                    {"lastN": 2, "startTime": "2026-12-01T00:00:00Z"},  # mutually exclusive
                    {"lastN": 0}, {"startTime": "yesterday"}):
            assert rp(sandbox, "GET", "/v2/billing/pods", params=bad).status_code == 400, bad
    finally:
        rp(sandbox, "DELETE", f"/v2/pods/{pod_id}")


def _parse(text: str) -> float:
    from datetime import datetime

    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


def test_runpod_catalog_scopes_availability_by_cloud_and_count(sandbox: Sandbox) -> None:
    """`cloud` and `count`: "for availability and lowest-price calculations. Valid only with
    include=AVAILABILITY" (components.parameters @ a900806e); maxCount is per cloud."""
    from tests.integration.contracts.contract import contract_for

    contract = contract_for("runpod", "GET", "/v2/catalog/gpus")
    assert contract is not None
    scope = {"include": "AVAILABILITY", "product": "POD"}

    def a40(**query: Any) -> dict[str, Any]:
        answer = rp(sandbox, "GET", "/v2/catalog/gpus", params={**scope, **query})
        assert answer.status_code == 200 and contract.response_errors(200, answer.json()) == []
        return next(g for g in answer.json()["gpus"] if g["id"] == "NVIDIA A40")

    top = a40()["maxCount"]
    assert a40(count=top["secure"])["availability"] != "NONE"
    assert a40(count=top["secure"] + 1)["availability"] == "NONE"
    over = a40(count=top["community"] + 1, cloud="COMMUNITY")
    assert over["availability"] == "NONE" and "cudaVersions" not in over
    for bad, status in (({"cloud": "SECURE"}, 400), ({"count": 2}, 400),
                        ({**scope, "cloud": "ALL"}, 422), ({**scope, "count": 0}, 422)):
        got = rp(sandbox, "GET", "/v2/catalog/gpus", params=bad).status_code
        assert got == status, (bad, got)
    assert rp(sandbox, "GET", "/v2/catalog/gpus/NO%20SUCH%20GPU").status_code == 404


def test_vast_without_credit_answers_a_documented_code_and_tailpod_stops(
        sandbox: Sandbox, tailpod_home: Path) -> None:
    """The create's 400 enum (paths./api/v0/asks/{id}.put.responses.400 @ c624622) has no
    credit code: the emulator answers `invalid_args` with the words, tailpod stops on them."""
    from tailpod.errors import ProviderError
    from tailpod.provision.base import PodSpec
    from tests.integration.contracts.contract import contract_for

    sandbox.set_account("vast", sandbox.vast_key, balance=0.0)
    offer = next(iter(sandbox.cloud.vast_offers))
    answer = va(sandbox, "PUT", f"/api/v0/asks/{offer}/",
                json={"client_id": "me", "image": "img", "disk": 10, "label": "tp-x"})
    contract = contract_for("vast", "PUT", f"/api/v0/asks/{offer}/")
    assert contract is not None
    assert answer.status_code == 400 and contract.response_errors(400, answer.json()) == []
    assert answer.json()["error"] == "invalid_args" and "credit" in answer.json()["msg"]
    provider = get_provider("vastai", settings_for(sandbox, tailpod_home),
                            timings=fast_timings())
    gpu = sandbox.cloud.vast_offers[offer].gpu_name
    with pytest.raises(ProviderError) as stopped:
        provider.create(PodSpec(run_tag="tp-credit", gpu_preference=[gpu], image="img",
                                start_command=["sleep", "1"]))
    assert "cannot pay" in stopped.value.message and "nothing was created" in \
        stopped.value.message
    assert sandbox.cloud.pods_public() == []


def test_runpod_log_tail_outside_log_tail_is_refused(sandbox: Sandbox) -> None:
    """components.parameters.LogTail (@ a900806e): an integer, minimum 0, maximum 5000,
    default 100; outside it the answer is the `default` error (400), not a stream."""
    created = rp(sandbox, "POST", "/v2/pods", json={**BASE, "gpu": {"id": "NVIDIA A40"}})
    pod_id = created.json()["id"]
    try:
        for bad in ("-1", "5001", "ten"):
            answer = rp(sandbox, "GET", f"/v2/pods/{pod_id}/logs",
                        params={"source": "container", "tail": bad})
            assert answer.status_code == 400, (bad, answer.status_code)
        ok = rp(sandbox, "GET", f"/v2/pods/{pod_id}/logs", params={"source": "container",
                                                                  "tail": "5000"})
        assert ok.status_code == 200
    finally:
        rp(sandbox, "DELETE", f"/v2/pods/{pod_id}")
