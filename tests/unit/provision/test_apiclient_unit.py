"""The shared HTTP plumbing of the cloud adapters (provision/apiclient.py), one behaviour at a
time, seen from an httpx.MockTransport: what each call sends, how long it may wait, which
answers are retried, how errors read, and create's never-create-twice protocol. Written to kill
the mutants `make mutate` found surviving (docs/testing.md); every expected value is written out
by hand from the rule it checks, never taken from the code under test."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import httpx
import pytest

from tailpod.config import Settings, load_settings
from tailpod.errors import AuthError, ConfigError, ProviderError
from tailpod.provision.apiclient import (
    ApiError,
    ApiProvider,
    ApiTimings,
    DeadlineReached,
    JsonApi,
    TransientApiError,
    call_deadline,
    parse_retry_after,
    summarize_body,
    time_left,
)
from tailpod.provision.base import PodInfo, PodState, SupportsPodScopedTermination
from tailpod.secrets import Secret

KEY = "rp_APICLIENTunitKEY_0123456789"
TIMINGS = ApiTimings(request_timeout_s=7.0, attempts=4, backoff_s=0.5, backoff_max_s=1.5,
                     max_retry_after_s=3.0, create_attempts=3, readback_attempts=3,
                     readback_interval_s=0.25)

Handler = Callable[[httpx.Request], httpx.Response]


def _api(handler: Handler, sleeps: list[float] | None = None, key: str | None = KEY,
         timings: ApiTimings = TIMINGS) -> JsonApi:
    record = sleeps if sleeps is not None else []
    return JsonApi("RunPod", "http://api.invalid/v1/", Secret(key) if key else None,
                   timings=timings, auth_env="RUNPOD_API_KEY",
                   transport=httpx.MockTransport(handler), sleep=record.append)


# -- summarize_body ----------------------------------------------------------------------------

@pytest.mark.parametrize(("body", "want"), [
    (None, ""),
    ({"detail": "d", "msg": "m", "message": "me", "error": "e", "title": "t"}, "d"),
    ({"msg": "m", "message": "me", "error": "e", "title": "t"}, "e: m"),  # vast's error + msg
    ({"msg": "m"}, "m"),
    ({"msg": "m", "error": 5}, "m"),
    ({"message": "me", "error": "e", "title": "t"}, "me"),
    ({"error": "e", "title": "t"}, "e"),
    ({"title": "t"}, "t"),
    ({"detail": "", "message": "second"}, "second"),  # an empty value is passed over
    ({"detail": 7, "message": "second"}, "second"),  # so is one that is not text
    ({"errors": [{"message": "first"}, {"message": "second"}]}, "first"),  # GraphQL errors
    ({"errors": [{"code": 3}]}, "{'code': 3}"),
    ({"errors": ["plain"]}, "{'errors': ['plain']}"),
    ({"errors": []}, "{'errors': []}"),
    ({"other": 1}, "{'other': 1}"),
    ("  line one\n\tline   two  ", "line one line two"),
    (404, "404"),
])
def test_summarize_body_picks_the_message_field_and_folds_whitespace(body: Any, want: str) -> None:
    assert summarize_body(body) == want


def test_summarize_body_is_cut_to_its_limit_with_an_ellipsis() -> None:
    assert summarize_body("x" * 300) == "x" * 300
    assert summarize_body("x" * 301) == "x" * 299 + "…"
    assert summarize_body("abcdefgh", limit=5) == "abcd…"
    assert summarize_body("abcde", limit=5) == "abcde"


@pytest.mark.parametrize(("value", "want"), [
    (None, None), ("", None), ("3", 3.0), ("1.5", 1.5), ("-2", 0.0), ("soon", None),
])
def test_retry_after_reads_seconds_and_never_goes_below_zero(value: str | None,
                                                            want: float | None) -> None:
    assert parse_retry_after(value) == want


# -- the errors' text --------------------------------------------------------------------------

def test_api_error_names_provider_call_status_and_the_bodys_message() -> None:
    err = ApiError("RunPod", "creating a pod", 400, {"message": "no  such\ngpu"}, retry_after=2.0)
    assert str(err) == "RunPod: creating a pod failed (HTTP 400: no such gpu)"
    assert (err.provider, err.status, err.body, err.retry_after) == (
        "RunPod", 400, {"message": "no  such\ngpu"}, 2.0)
    assert str(ApiError("vast.ai", "listing", 500, None)) == "vast.ai: listing failed (HTTP 500)"
    assert str(TransientApiError("vast.ai", "listing", None, "timed out")) == \
        "vast.ai: listing failed (no answer: timed out)"
    assert ApiError("RunPod", "x", 400, None).retry_after is None


def test_api_error_text_never_carries_the_key() -> None:
    Secret(KEY)
    err = ApiError("RunPod", f"call with {KEY}", 400, {"message": f"bad {KEY}"})
    assert KEY not in str(err)


def test_deadline_reached_names_the_call() -> None:
    err = DeadlineReached("RunPod", "listing pods")
    assert str(err) == "RunPod: listing pods not answered: the command's deadline passed"
    assert err.provider == "RunPod"


# -- the deadline ------------------------------------------------------------------------------

def test_time_left_is_none_outside_a_deadline_and_counts_down_inside() -> None:
    assert time_left() is None
    with call_deadline(time.monotonic() + 10.0):
        left = time_left()
        assert left is not None and 9.0 < left <= 10.0
        with call_deadline(time.monotonic() - 5.0):
            assert time_left() == 0.0  # never below zero
        left = time_left()
        assert left is not None and 9.0 < left <= 10.0  # the outer deadline is back
    assert time_left() is None


# -- one exchange ------------------------------------------------------------------------------

def test_send_carries_the_key_only_in_the_authorization_header() -> None:
    seen: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(200, json={})

    _api(handler).send("GET", "/pods", "listing pods", params={"a": "1"})
    request = seen[0]
    assert str(request.url) == "http://api.invalid/v1/pods?a=1"
    assert request.headers["Authorization"] == f"Bearer {KEY}"
    assert request.headers["User-Agent"] == "tailpod"
    assert request.headers["Accept"] == "application/json"
    assert KEY not in str(request.url)
    _api(handler, key=None).send("GET", "/pods", "listing pods")
    assert "Authorization" not in seen[1].headers


def test_send_waits_the_request_timeout_or_what_the_deadline_leaves() -> None:
    timeouts: list[dict[str, float]] = []

    def handler(request: httpx.Request) -> httpx.Response:
        timeouts.append(dict(request.extensions["timeout"]))
        return httpx.Response(200)

    api = _api(handler)
    api.send("GET", "/pods", "listing pods")
    assert timeouts[-1] == {"connect": 7.0, "read": 7.0, "write": 7.0, "pool": 7.0}
    with call_deadline(time.monotonic() + 60.0):
        api.send("GET", "/pods", "listing pods")
    assert set(timeouts[-1].values()) == {7.0}  # a far deadline leaves the request timeout
    with call_deadline(time.monotonic() + 2.0):
        api.send("GET", "/pods", "listing pods")
    assert all(1.5 < value <= 2.0 for value in timeouts[-1].values()), timeouts[-1]


def test_no_exchange_starts_once_the_deadline_is_50_ms_away() -> None:
    sent: list[str] = []

    def handler(request: httpx.Request) -> httpx.Response:
        sent.append(request.url.path)
        return httpx.Response(200)

    api = _api(handler)
    with call_deadline(time.monotonic() + 0.04), pytest.raises(DeadlineReached):
        api.send("GET", "/pods", "listing pods")
    with call_deadline(time.monotonic() + 0.04), pytest.raises(DeadlineReached):
        api.read_stream("/logs", "reading logs")
    assert sent == []
    with call_deadline(time.monotonic() + 5.0):
        api.send("GET", "/pods", "listing pods")
    assert sent == ["/v1/pods"]


def test_a_timeout_is_transient_and_at_the_deadline_it_is_the_deadline() -> None:
    def timing_out(request: httpx.Request) -> httpx.Response:
        raise httpx.ReadTimeout("read timed out", request=request)

    api = _api(timing_out)
    with pytest.raises(TransientApiError) as caught:
        api.send("GET", "/pods", "listing pods")
    assert str(caught.value) == "RunPod: listing pods failed (no answer: timed out)"
    assert caught.value.status is None

    def slow_then_timeout(request: httpx.Request) -> httpx.Response:
        time.sleep(0.15)  # the deadline passes during the exchange
        raise httpx.ReadTimeout("read timed out", request=request)

    with call_deadline(time.monotonic() + 0.1), pytest.raises(DeadlineReached):
        _api(slow_then_timeout).send("GET", "/pods", "listing pods")
    with call_deadline(time.monotonic() + 30.0), pytest.raises(TransientApiError):
        api.send("GET", "/pods", "listing pods")  # time is left: an ordinary timeout


def test_a_transport_failure_is_transient_and_named_by_its_class_only() -> None:
    def refused(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError(f"connection refused with {KEY}", request=request)

    Secret(KEY)
    with pytest.raises(TransientApiError) as caught:
        _api(refused).send("GET", "/pods", "listing pods")
    assert str(caught.value) == "RunPod: listing pods failed (no answer: ConnectError at http://api.invalid/v1)"


def test_body_of_reads_json_text_or_nothing() -> None:
    assert JsonApi.body_of(httpx.Response(204)) is None
    assert JsonApi.body_of(httpx.Response(200, json={"a": 1})) == {"a": 1}
    assert JsonApi.body_of(httpx.Response(502, text="y" * 600)) == "y" * 500


# -- statuses ----------------------------------------------------------------------------------

def _raised(status: int, body: Any = None, headers: dict[str, str] | None = None) -> Exception:
    api = _api(lambda r: httpx.Response(200))
    response = httpx.Response(status, json=body, headers=headers) if body is not None else \
        httpx.Response(status, headers=headers)
    with pytest.raises(ProviderError) as caught:
        api.raise_for(response, "creating a pod")
    return caught.value


def test_401_and_403_are_auth_errors_that_name_the_key_setting() -> None:
    err = _raised(401, {"message": "bad"})
    assert type(err) is AuthError
    assert err.message == "RunPod rejected the API key (HTTP 401) during creating a pod"  # type: ignore[attr-defined]
    assert err.hint == "check RUNPOD_API_KEY"  # type: ignore[attr-defined]
    err = _raised(403, {"message": "no  scope"})
    assert type(err) is AuthError
    assert err.message == "RunPod refused access (HTTP 403) during creating a pod: no scope"  # type: ignore[attr-defined]
    assert err.hint == "the key in RUNPOD_API_KEY lacks a permission this needs"  # type: ignore[attr-defined]
    assert _raised(403).message == "RunPod refused access (HTTP 403) during creating a pod: forbidden"  # type: ignore[attr-defined]


@pytest.mark.parametrize(("status", "transient"), [
    (400, False), (404, False), (428, False), (429, True), (430, False), (499, False),
    (500, True), (503, True),
])
def test_429_and_5xx_are_transient_other_statuses_are_not(status: int, transient: bool) -> None:
    err = _raised(status, {"message": "m"}, headers={"Retry-After": "2"})
    assert isinstance(err, ApiError) and err.status == status
    assert isinstance(err, TransientApiError) is transient
    assert err.retry_after == (2.0 if transient else None)  # only a retried answer keeps it
    assert str(err) == f"RunPod: creating a pod failed (HTTP {status}: m)"


# -- retries -----------------------------------------------------------------------------------

def _answers(*statuses: int, headers: dict[str, str] | None = None) -> tuple[Handler, list[int]]:
    sent: list[int] = []

    def handler(request: httpx.Request) -> httpx.Response:
        status = statuses[min(len(sent), len(statuses) - 1)]
        sent.append(status)
        return httpx.Response(status, json={"message": f"s{status}"}, headers=headers)

    return handler, sent


def test_a_call_retries_5xx_with_doubling_capped_backoff_then_raises() -> None:
    handler, sent = _answers(503)
    sleeps: list[float] = []
    with pytest.raises(TransientApiError):
        _api(handler, sleeps).call("GET", "/pods", "listing pods")
    assert len(sent) == 4  # TIMINGS.attempts
    assert sleeps == [0.5, 1.0, 1.5]  # 0.5 * 2**(n-1), capped at 1.5


def test_a_call_honours_retry_after_up_to_its_cap() -> None:
    for header, want in (("2", 2.0), ("30", 3.0)):
        handler, sent = _answers(429, 200, headers={"Retry-After": header})
        sleeps: list[float] = []
        response = _api(handler, sleeps).call("GET", "/pods", "listing pods")
        assert response.status_code == 200 and sent == [429, 200]
        assert sleeps == [want]


def test_a_calls_backoff_never_outlasts_the_deadline() -> None:
    handler, sent = _answers(503, 200)
    sleeps: list[float] = []
    slow = ApiTimings(request_timeout_s=7.0, attempts=3, backoff_s=50.0, backoff_max_s=100.0)
    with call_deadline(time.monotonic() + 5.0):
        _api(handler, sleeps, timings=slow).call("GET", "/pods", "listing pods")
    assert len(sleeps) == 1 and 4.0 < sleeps[0] <= 5.0


def test_a_call_does_not_retry_a_refusal_and_returns_passthrough_statuses() -> None:
    handler, sent = _answers(404)
    with pytest.raises(ApiError) as caught:
        _api(handler).call("GET", "/pods/x", "reading a pod")
    assert not isinstance(caught.value, TransientApiError) and sent == [404]
    handler, sent = _answers(404)
    response = _api(handler).call("GET", "/pods/x", "reading a pod", passthrough=(404,))
    assert response.status_code == 404 and sent == [404]
    for status in (200, 201, 204):
        handler, sent = _answers(status)
        assert _api(handler).call("DELETE", "/pods/x", "deleting").status_code == status


def test_retrying_takes_an_explicit_attempt_count() -> None:
    handler, sent = _answers(500)
    api = _api(handler, [])
    with pytest.raises(TransientApiError):
        for attempt in api.retrying(2):
            with attempt:
                api.raise_for(api.send("GET", "/p", "x"), "x")
    assert len(sent) == 2


# -- a stream ----------------------------------------------------------------------------------

class _Chunks(httpx.SyncByteStream):
    """A body that arrives in pieces, as a live log stream does (read once, with iter_raw)."""

    def __init__(self, *chunks: bytes) -> None:
        self.chunks = chunks

    def __iter__(self):  # type: ignore[no-untyped-def]
        yield from self.chunks


def test_read_stream_returns_status_and_text_and_stops_at_max_bytes() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, stream=_Chunks(b"data: one\n\n", b"data: two\n\n"))

    status, text = _api(handler).read_stream("/logs", "reading logs")
    assert (status, text) == (200, "data: one\n\ndata: two\n\n")

    def chunked(request: httpx.Request) -> httpx.Response:
        return httpx.Response(206, stream=_Chunks(b"aaaa", b"bbbb", b"cccc", b"dddd"))

    status, text = _api(chunked).read_stream("/logs", "reading logs", max_bytes=8)
    assert (status, text) == (206, "aaaabbbb")
    status, text = _api(chunked).read_stream("/logs", "reading logs", max_bytes=9)
    assert text == "aaaabbbbcccc"


def test_read_stream_failures_are_transient() -> None:
    def refused(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("refused", request=request)

    def timing_out(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectTimeout("slow", request=request)

    with pytest.raises(TransientApiError) as caught:
        _api(refused).read_stream("/logs", "reading logs")
    assert str(caught.value) == "RunPod: reading logs failed (no answer: ConnectError)"
    with pytest.raises(TransientApiError) as caught:
        _api(timing_out).read_stream("/logs", "reading logs")
    assert str(caught.value) == "RunPod: reading logs failed (no answer: timed out)"


def test_read_stream_timeouts_are_cut_to_the_deadline() -> None:
    timeouts: list[dict[str, float]] = []

    def handler(request: httpx.Request) -> httpx.Response:
        timeouts.append(dict(request.extensions["timeout"]))
        return httpx.Response(200, stream=_Chunks(b"x"))

    api = _api(handler)
    api.read_stream("/logs", "reading logs", idle_s=3.0)
    assert timeouts[-1] == {"connect": 7.0, "read": 3.0, "write": 7.0, "pool": 7.0}
    with call_deadline(time.monotonic() + 2.0):
        api.read_stream("/logs", "reading logs", idle_s=3.0)
    assert all(1.5 < value <= 2.0 for value in timeouts[-1].values()), timeouts[-1]


# -- create's protocol ---------------------------------------------------------------------------

class _Adapter(ApiProvider):
    """The shared parts of an adapter, with a listing the test controls."""

    name = "runpod"
    label = "RunPod"
    key_setting = "runpod_api_key"
    url_setting = "runpod_url"
    key_env = "RUNPOD_API_KEY"

    def __init__(self, settings: Settings, handler: Handler, sleeps: list[float]) -> None:
        super().__init__(settings, timings=TIMINGS, transport=httpx.MockTransport(handler),
                         sleep=sleeps.append)
        self.listed: list[list[PodInfo]] = []  # what each list_by_tag answers, in turn
        self.lookups = 0
        self.reads: list[PodInfo | None | Exception] = []
        self.asked_tags: list[str | None] = []  # each look-up's run tag: never "all pods"
        self.asked_ids: list[str] = []

    def list_by_tag(self, run_tag: str | None = None) -> list[PodInfo]:
        self.lookups += 1
        self.asked_tags.append(run_tag)
        return self.listed.pop(0) if self.listed else []

    def get(self, pod_id: str) -> PodInfo | None:
        self.asked_ids.append(pod_id)
        answer = self.reads.pop(0) if self.reads else None
        if isinstance(answer, Exception):
            raise answer
        return answer

    def offers(self, gpu_preference: list[str], gpu_count: int,
               max_price: float | None) -> list[Any]:
        raise NotImplementedError

    def create(self, spec: Any) -> PodInfo:
        raise NotImplementedError

    def terminate(self, pod_id: str) -> None:
        raise NotImplementedError

    def billing_evidence(self, run_tag: str, pod_id: str | None, price_per_hr: float | None,
                         *, known_active_tags: Any = ()) -> Any:
        raise NotImplementedError


def _settings(**env: str) -> Settings:
    return load_settings(env={"TAILPOD_RUNPOD_URL": "http://api.invalid/v1/", **env},
                         dotenv_path=None)  # type: ignore[arg-type]


def _adapter(statuses: list[tuple[int, dict[str, Any]]],
             headers: dict[str, str] | None = None) -> tuple[_Adapter, list[float], list[int]]:
    sleeps: list[float] = []
    sent: list[int] = []

    def handler(request: httpx.Request) -> httpx.Response:
        status, body = statuses[min(len(sent), len(statuses) - 1)]
        sent.append(status)
        return httpx.Response(status, json=body, headers=headers)

    adapter = _Adapter(_settings(RUNPOD_API_KEY=KEY), handler, sleeps)
    notified: list[str] = []
    adapter.on_created = notified.append
    adapter.notified = notified  # type: ignore[attr-defined]
    return adapter, sleeps, sent


def _create(adapter: _Adapter, reasons: list[str], retry_ok: tuple[int, ...] = (),
            left_behind: Any = None) -> str | None:
    return adapter._create_candidate(
        "tp-tag", "RTX 4090", reasons,
        send=lambda: adapter.api.send("POST", "/pods", "creating a pod"),
        created=lambda status, body: body.get("id") if status == 200 else None,
        refused=lambda status, body, detail: f"RTX 4090: refused (HTTP {status}: {detail}; "
                                             f"code {body.get('code')})",
        retry_ok=retry_ok, left_behind=left_behind)


def test_an_adapter_without_its_key_is_a_config_error_naming_the_variable() -> None:
    with pytest.raises(ConfigError) as caught:
        _Adapter(_settings(), lambda r: httpx.Response(200), [])
    assert caught.value.message == "RUNPOD_API_KEY is not set"
    adapter = _Adapter(_settings(RUNPOD_API_KEY=KEY), lambda r: httpx.Response(200), [])
    assert adapter.base_url == "http://api.invalid/v1" and adapter.timings is TIMINGS


def test_a_created_pod_is_announced_and_returned_on_the_first_try() -> None:
    adapter, sleeps, sent = _adapter([(200, {"id": "pod-1"})])
    reasons: list[str] = []
    assert _create(adapter, reasons) == "pod-1"
    assert adapter.notified == ["pod-1"] and reasons == [] and sent == [200]  # type: ignore[attr-defined]
    assert adapter.lookups == 0 and sleeps == []


def test_after_a_5xx_the_tag_is_looked_up_before_creating_again() -> None:
    """A 5xx on create can mean the pod exists and bills: adopt it, never create twice."""
    adapter, sleeps, sent = _adapter([(500, {"message": "boom"}), (200, {"id": "pod-2"})])
    adapter.listed = [[PodInfo("pod-made", "tp-tag", PodState.RUNNING)]]
    reasons: list[str] = []
    assert _create(adapter, reasons) == "pod-made"
    assert sent == [500] and adapter.lookups == 1
    assert adapter.asked_tags == ["tp-tag"]  # this run's tag, never every tailpod pod
    assert adapter.notified == ["pod-made"]  # type: ignore[attr-defined]
    assert reasons == ["RTX 4090: created despite an error (HTTP 500: boom)"]
    assert sleeps == [0.5]


def test_create_keeps_trying_while_the_lookup_finds_nothing() -> None:
    adapter, sleeps, sent = _adapter([(502, {"message": "bad gateway"}), (200, {"id": "pod-3"})])
    reasons: list[str] = []
    assert _create(adapter, reasons) == "pod-3"
    assert sent == [502, 200] and adapter.lookups == 1 and reasons == []


def test_a_create_that_keeps_failing_is_looked_up_once_more_at_the_end() -> None:
    adapter, sleeps, sent = _adapter([(503, {"message": "busy"})])
    adapter.listed = [[], [], [PodInfo("pod-late", "tp-tag", PodState.RUNNING)]]
    reasons: list[str] = []
    assert _create(adapter, reasons) == "pod-late"
    assert sent == [503, 503, 503] and adapter.lookups == 3  # TIMINGS.create_attempts
    assert adapter.asked_tags == ["tp-tag"] * 3
    assert reasons == ["RTX 4090: created despite errors (HTTP 503: busy)"]
    assert sleeps == [0.5, 1.0, 1.5]


def test_a_create_that_keeps_failing_and_made_nothing_says_so() -> None:
    adapter, sleeps, sent = _adapter([(503, {"message": "busy"})])
    reasons: list[str] = []
    assert _create(adapter, reasons) is None
    assert reasons == ["RTX 4090: the API kept failing (HTTP 503: busy)"]
    assert adapter.notified == []  # type: ignore[attr-defined]


def test_a_transport_failure_on_create_backs_off_and_looks_up() -> None:
    sleeps: list[float] = []
    calls: list[int] = []

    def handler(request: httpx.Request) -> httpx.Response:
        calls.append(1)
        if len(calls) == 1:
            raise httpx.ConnectError("reset", request=request)
        return httpx.Response(200, json={"id": "pod-4"})

    adapter = _Adapter(_settings(RUNPOD_API_KEY=KEY), handler, sleeps)
    reasons: list[str] = []
    assert _create(adapter, reasons) == "pod-4"  # type: ignore[arg-type]
    assert len(calls) == 2 and adapter.lookups == 1 and sleeps == [0.5]


def test_a_refusal_moves_to_the_next_candidate_without_retrying() -> None:
    adapter, sleeps, sent = _adapter([(400, {"message": "no  capacity", "code": 7})])
    reasons: list[str] = []
    assert _create(adapter, reasons) is None
    assert sent == [400] and adapter.lookups == 0 and sleeps == []
    assert reasons == ["RTX 4090: refused (HTTP 400: no capacity; code 7)"]


def test_a_retry_ok_status_is_tried_again() -> None:
    adapter, sleeps, sent = _adapter([(409, {"message": "conflict"}), (200, {"id": "pod-5"})])
    assert _create(adapter, [], retry_ok=(409,)) == "pod-5"
    assert sent == [409, 200] and sleeps == [0.5]


def test_an_error_answer_that_left_a_pod_behind_ends_the_candidate() -> None:
    adapter, sleeps, sent = _adapter([(500, {"message": "half made", "new_contract": 9})])
    seen: list[tuple[int, Any, str]] = []

    def left_behind(status: int, body: Any, detail: str) -> str | None:
        seen.append((status, body, detail))
        return "RTX 4090: a pod was left behind and removed"

    reasons: list[str] = []
    assert _create(adapter, reasons, left_behind=left_behind) is None
    assert seen == [(500, {"message": "half made", "new_contract": 9}, "half made")]
    assert sent == [500]
    assert reasons == ["RTX 4090: a pod was left behind and removed"]


def test_rate_limits_wait_for_retry_after_and_do_not_use_up_the_tries() -> None:
    adapter, sleeps, sent = _adapter([(429, {}), (429, {}), (429, {}), (200, {"id": "pod-6"})],
                                     headers={"Retry-After": "2"})
    assert _create(adapter, []) == "pod-6"
    assert sent == [429, 429, 429, 200]  # three 429s, yet create_attempts is 3
    assert sleeps == [2.0, 2.0, 2.0]


def test_a_long_retry_after_is_capped_and_a_missing_one_backs_off() -> None:
    adapter, sleeps, sent = _adapter([(429, {}), (200, {"id": "pod-7"})],
                                     headers={"Retry-After": "100"})
    assert _create(adapter, []) == "pod-7"
    assert sleeps == [3.0]  # max_retry_after_s
    adapter, sleeps, sent = _adapter([(429, {}), (429, {}), (200, {"id": "pod-8"})])
    assert _create(adapter, []) == "pod-8"
    assert sleeps == [0.5, 1.0]  # no Retry-After: the backoff of the nth rate limit


def test_endless_rate_limits_use_up_the_tries_after_the_429_allowance() -> None:
    # 429 fifty times, then a refusal: a count that never ran out would end on the refusal
    adapter, sleeps, sent = _adapter([(429, {})] * 50 + [(400, {"message": "x"})],
                                     headers={"Retry-After": "1"})
    reasons: list[str] = []
    assert _create(adapter, reasons) is None
    # 4 (TIMINGS.attempts) rate limits are free, then each counts: 4 + 3 tries in all
    assert len(sent) == 7
    assert reasons == ["RTX 4090: the API kept failing (HTTP 429)"]


def test_backoff_doubles_from_its_base_up_to_its_cap() -> None:
    adapter, _, _ = _adapter([(200, {})])
    assert [adapter._backoff(n) for n in (1, 2, 3, 4)] == [0.5, 1.0, 1.5, 1.5]


def test_read_back_returns_the_pod_and_waits_between_tries() -> None:
    adapter, sleeps, _ = _adapter([(200, {})])
    pod = PodInfo("pod-9", "tp-tag", PodState.RUNNING, price_per_hr=0.4)
    adapter.reads = [None, ProviderError("hiccup"), pod]
    assert adapter._read_back("pod-9", "tp-tag") is pod
    assert sleeps == [0.0, 0.25] and adapter.asked_ids == ["pod-9"] * 3


def test_read_back_of_a_pod_never_visible_keeps_its_id_as_unknown() -> None:
    adapter, sleeps, _ = _adapter([(200, {})])
    adapter.reads = [None, ProviderError("first"), ProviderError("last words")]
    info = adapter._read_back("pod-10", "tp-tag")
    assert (info.pod_id, info.run_tag, info.state) == ("pod-10", "tp-tag", PodState.UNKNOWN)
    assert info.detail == {"readback_error": "last words"}
    assert sleeps == [0.0, 0.25, 0.25]
    adapter.reads = [None, None, None]
    assert adapter._read_back("pod-10", "tp-tag").detail == {"readback_error": "not visible"}


def test_one_create_attempt_and_one_read_back_mean_one() -> None:
    adapter, sleeps, sent = _adapter([(503, {"message": "busy"})])
    adapter.timings = replace(TIMINGS, create_attempts=1, readback_attempts=1)
    assert _create(adapter, []) is None
    assert sent == [503] and adapter.lookups == 1  # the one try, then the final look-up
    adapter.reads = [None, PodInfo("p", "tp-tag", PodState.RUNNING)]
    assert adapter._read_back("p", "tp-tag").state is PodState.UNKNOWN
    assert adapter.asked_ids == ["p"]


def test_a_create_whose_transport_keeps_failing_says_what_failed() -> None:
    sleeps: list[float] = []

    def handler(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("reset", request=request)

    adapter = _Adapter(_settings(RUNPOD_API_KEY=KEY), handler, sleeps)
    reasons: list[str] = []
    assert _create(adapter, reasons) is None
    assert reasons == ["RTX 4090: the API kept failing (RunPod: creating a pod failed "
                       "(no answer: ConnectError at http://api.invalid/v1 (from TAILPOD_RUNPOD_URL: a "
                       "stopped sandbox or a stale value?)))"]


def test_the_adapter_wires_its_client_with_label_key_env_and_sleep() -> None:
    slept: list[float] = []
    seen: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(401) if request.url.path.endswith("/auth") else \
            httpx.Response(503, headers={"Retry-After": "0.5"})

    adapter = _Adapter(_settings(RUNPOD_API_KEY=KEY), handler, slept)
    assert adapter.api.provider == "RunPod" and adapter.api.auth_env == "RUNPOD_API_KEY"
    with pytest.raises(AuthError) as caught:
        adapter.api.call("GET", "/auth", "checking the key")
    assert caught.value.hint == "check RUNPOD_API_KEY"
    assert seen[-1].headers["Authorization"] == f"Bearer {KEY}"
    with pytest.raises(TransientApiError):
        adapter.api.call("GET", "/busy", "listing")
    assert slept == [0.5, 0.5, 0.5]  # the adapter's own sleep, not time.sleep


def test_the_missing_key_error_says_where_to_put_it() -> None:
    with pytest.raises(ConfigError) as caught:
        _Adapter(_settings(), lambda r: httpx.Response(200), [])
    assert caught.value.hint == ("put it in .env or the environment (`tailpod sandbox serve` "
                                 "prints a key for the local sandbox)")


def test_an_adapter_class_missing_its_declarations_is_a_bug_caught_at_once() -> None:
    for missing in ("key_setting", "url_setting"):
        broken = type("Broken", (_Adapter,), {missing: None})
        with pytest.raises(AssertionError):
            broken(_settings(RUNPOD_API_KEY=KEY), lambda r: httpx.Response(200), [])
    # the key's variable is its setting's own (config.py), never declared a second time
    assert type("Spelled", (_Adapter,), {"key_env": "WRONG"}).key_env == "RUNPOD_API_KEY"


def test_a_call_sends_its_body_and_params_and_names_itself_in_errors() -> None:
    seen: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        if request.url.path.endswith("/refused"):
            return httpx.Response(401)
        if request.url.path.endswith("/down"):
            raise httpx.ConnectError("x", request=request)
        return httpx.Response(200)

    api = _api(handler)
    api.call("POST", "/pods", "creating a pod", json={"name": "tp-x"}, params={"q": "1"})
    assert json.loads(seen[-1].content) == {"name": "tp-x"} and seen[-1].url.params["q"] == "1"
    api.send("PUT", "/pods", "updating", json={"a": 2})
    assert json.loads(seen[-1].content) == {"a": 2} and seen[-1].method == "PUT"
    with pytest.raises(AuthError) as caught:
        api.call("GET", "/refused", "reading pod p1")
    assert caught.value.message == "RunPod rejected the API key (HTTP 401) during reading pod p1"
    with pytest.raises(TransientApiError) as transient:
        api.call("GET", "/down", "reading pod p2")
    assert str(transient.value) == ("RunPod: reading pod p2 failed "
                                    "(no answer: ConnectError at http://api.invalid/v1)")
    assert api.base_url == "http://api.invalid/v1"


def test_a_deadline_error_names_provider_and_call() -> None:
    api = _api(lambda r: httpx.Response(200))
    for run in (lambda: api.send("GET", "/p", "listing pods"),
                lambda: api.read_stream("/l", "listing pods")):
        with call_deadline(time.monotonic() + 0.01), pytest.raises(DeadlineReached) as caught:
            run()
        assert str(caught.value) == ("RunPod: listing pods not answered: the command's "
                                     "deadline passed")
        assert caught.value.provider == "RunPod"

    def slow(request: httpx.Request) -> httpx.Response:
        time.sleep(0.15)
        raise httpx.ReadTimeout("t", request=request)

    with call_deadline(time.monotonic() + 0.1), pytest.raises(DeadlineReached) as caught:
        _api(slow).send("GET", "/p", "listing pods")
    assert str(caught.value) == "RunPod: listing pods not answered: the command's deadline passed"
    assert caught.value.provider == "RunPod"


def test_half_a_second_left_is_enough_to_send() -> None:
    sent: list[str] = []

    def handler(request: httpx.Request) -> httpx.Response:
        sent.append(request.url.path)
        return httpx.Response(200, stream=_Chunks(b"ok"))

    api = _api(handler)
    with call_deadline(time.monotonic() + 0.5):
        api.send("GET", "/a", "a")
    with call_deadline(time.monotonic() + 0.5):
        api.read_stream("/b", "b")
    assert sent == ["/v1/a", "/v1/b"]


def test_read_stream_is_an_authorised_get_with_its_params_and_default_idle() -> None:
    seen: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(200, stream=_Chunks(b"ok \xff\xfe end"))

    status, text = _api(handler).read_stream("/logs", "reading logs", params={"tail": "5"})
    request = seen[0]
    assert request.method == "GET" and request.url.params["tail"] == "5"
    assert request.headers["Authorization"] == f"Bearer {KEY}"
    assert request.extensions["timeout"]["read"] == 3.0  # idle_s: the stream went quiet
    assert text == "ok \ufffd\ufffd end"  # undecodable bytes are replaced, never raised


# -- the manual stop -------------------------------------------------------------------------------

class _RunPodRoutes(_Adapter, SupportsPodScopedTermination):
    """An adapter that ends pods by the first route of RunPod's termination table (DELETE,
    no body: tailpod/agent/bootstrap/terminate.py)."""

    console_url = "https://console.example/pods"
    pod_termination = "runpod"


class _VastRoutes(_RunPodRoutes):
    """The vast.ai route: DELETE with an empty JSON object as its body."""

    pod_termination = "vastai"


def _stop_steps(cls: type[_Adapter], pod_id: str) -> list[str]:
    return cls(_settings(RUNPOD_API_KEY=KEY), lambda r: httpx.Response(200), []).manual_stop_steps(
        pod_id)


def test_the_manual_stop_is_the_console_then_the_routes_curl_with_the_key_by_name() -> None:
    assert _stop_steps(_RunPodRoutes, "pod-7") == [
        "console: https://console.example/pods",
        "API: curl -X DELETE -H \"Authorization: Bearer $RUNPOD_API_KEY\" "
        "http://api.invalid/v1/v2/pods/pod-7",
    ]
    assert _stop_steps(_VastRoutes, "4242") == [
        "console: https://console.example/pods",
        "API: curl -X DELETE -H \"Authorization: Bearer $RUNPOD_API_KEY\" "
        "-H 'Content-Type: application/json' -d '{}' http://api.invalid/v1/api/v0/instances/4242/",
    ]
    assert not any(KEY in step for cls in (_RunPodRoutes, _VastRoutes)
                   for step in _stop_steps(cls, "x"))


def test_the_manual_stop_has_no_api_line_without_a_pod_termination_route() -> None:
    # no pod-scoped termination table, so no route to print (and no console: none declared),
    # though the adapter has a key name
    adapter = _Adapter(_settings(RUNPOD_API_KEY=KEY), lambda r: httpx.Response(200), [])
    assert adapter.key_env == "RUNPOD_API_KEY"
    assert adapter.manual_stop_steps("pod-7") == []
