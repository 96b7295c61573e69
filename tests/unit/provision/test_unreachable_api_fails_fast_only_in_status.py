"""An API nothing answers at (connection refused) is retried with backoff as any transport failure,
except inside `fail_fast_unreachable()` (status, which only reports): there the first refusal
ends the call, naming the URL and the setting it came from (newcomer 2.28). Teardown keeps its
retries: its proof depends on reaching the provider."""

from __future__ import annotations

import httpx
import pytest

from tailpod.provision.apiclient import ApiTimings, JsonApi, Unreachable, fail_fast_unreachable
from tailpod.secrets import Secret

URL = "http://127.0.0.1:9/v1"


def _refusing(sent: list[str], sleeps: list[float]) -> JsonApi:
    def handler(request: httpx.Request) -> httpx.Response:
        sent.append(request.url.path)
        raise httpx.ConnectError("[Errno 111] Connection refused", request=request)

    return JsonApi("RunPod", URL, Secret("rpa_test"), auth_env="RUNPOD_API_KEY",
                   url_env="TAILPOD_RUNPOD_URL",
                   timings=ApiTimings(attempts=4, backoff_s=1.0, backoff_max_s=20.0),
                   transport=httpx.MockTransport(handler), sleep=sleeps.append)


def test_a_refused_connection_is_retried_with_backoff_by_default() -> None:
    sent: list[str] = []
    sleeps: list[float] = []
    with pytest.raises(Unreachable):
        _refusing(sent, sleeps).call("GET", "/pods", "listing pods")
    assert len(sent) == 4 and sleeps == [1.0, 2.0, 4.0]


def test_under_fail_fast_a_refused_connection_ends_the_call_naming_the_url() -> None:
    sent: list[str] = []
    sleeps: list[float] = []
    with fail_fast_unreachable(), pytest.raises(Unreachable) as caught:
        _refusing(sent, sleeps).call("GET", "/pods", "listing pods")
    assert len(sent) == 1 and sleeps == []
    assert str(caught.value) == (
        "RunPod: listing pods failed (no answer: ConnectError at http://127.0.0.1:9/v1 (from "
        "TAILPOD_RUNPOD_URL: a stopped sandbox or a stale value?))")
    # the switch is the block's only: afterwards the retries are back
    with pytest.raises(Unreachable):
        _refusing(sent, sleeps).call("GET", "/pods", "listing pods")
    assert len(sent) == 5
