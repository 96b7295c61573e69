"""The HTTP plumbing both cloud adapters share: one JSON client, bounded retries, safe errors.

Retries use tenacity and cover only what is safe to repeat: 429 (honouring Retry-After, capped)
and 5xx / transport errors on idempotent calls. A create is never blindly retried here: the
adapter looks the run tag up first, because a 5xx on create can mean the pod exists and bills.
The API key travels only in the Authorization header; every message that leaves this module is
passed through `redact`, so a key cannot reach an exception, a log line or a result.
"""

from __future__ import annotations

import contextlib
import contextvars
import json
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, ClassVar

import httpx
from tenacity import (
    RetryCallState,
    Retrying,
    retry_if_exception,
    stop_after_attempt,
)

from tailpod.agent.bootstrap.terminate import TERMINATE_ROUTES
from tailpod.config import Settings, env_name
from tailpod.errors import AuthError, ConfigError, ProviderError
from tailpod.ledger import home_id
from tailpod.provision.base import PodInfo, PodState, Provider, SupportsPodScopedTermination
from tailpod.secrets import Secret, redact


@dataclass(frozen=True)
class ApiTimings:
    """Every wait an adapter makes, in one place so tests can shrink them."""

    request_timeout_s: float = 30.0
    attempts: int = 4  # per call, for 429 / 5xx / transport errors on idempotent calls
    backoff_s: float = 1.0
    backoff_max_s: float = 20.0
    max_retry_after_s: float = 60.0
    create_attempts: int = 3  # per GPU candidate, each after a look-up by run tag
    readback_attempts: int = 5
    readback_interval_s: float = 1.0
    evidence_window_s: float = 5.0  # vast: watch the balance this long after destroy
    max_offers_per_gpu: int = 3  # vast: offers tried per GPU type before the next type


class ApiError(ProviderError):
    """An HTTP answer the adapter did not expect; carries status and the (redacted) body."""

    def __init__(self, provider: str, what: str, status: int | None, body: Any,
                 retry_after: float | None = None) -> None:
        detail = summarize_body(body)
        where = f"HTTP {status}" if status is not None else "no answer"
        suffix = f": {detail}" if detail else ""
        super().__init__(redact(f"{provider}: {what} failed ({where}{suffix})"))
        self.provider = provider
        self.status = status
        self.body = body
        self.retry_after = retry_after


class TransientApiError(ApiError):
    """429, 5xx or a transport failure: worth another attempt with backoff."""


class Unreachable(TransientApiError):
    """No connection to the provider's API at all (refused, no route, no such host): nothing
    answered at the URL. Retried like any transport failure, unless `fail_fast_unreachable` is
    on (status: a listing that only reports)."""


class DeadlineReached(ProviderError):
    """The command's wall-clock deadline (`down --timeout`, `status --timeout`) passed before
    this call could be sent or answered; never retried."""

    def __init__(self, provider: str, what: str) -> None:
        super().__init__(f"{provider}: {what} not answered: the command's deadline passed")
        self.provider = provider


# A time.monotonic() after which no provider call starts and none waits longer: one deadline
# over every call of a command, connect and read included (None: each call's own timeouts).
_DEADLINE: contextvars.ContextVar[float | None] = contextvars.ContextVar("tailpod_deadline",
                                                                        default=None)


@contextlib.contextmanager
def call_deadline(deadline: float | None) -> Iterator[None]:
    """Every JsonApi call inside the block ends by `deadline` (a time.monotonic() value)."""
    token = _DEADLINE.set(deadline)
    try:
        yield
    finally:
        _DEADLINE.reset(token)


# On for commands that only report (status): an Unreachable URL is said at once, not retried for
# half a minute (newcomer finding 2.28); teardown keeps retrying, its proof depends on it.
_FAIL_FAST: contextvars.ContextVar[bool] = contextvars.ContextVar("tailpod_fail_fast",
                                                                  default=False)


@contextlib.contextmanager
def fail_fast_unreachable() -> Iterator[None]:
    """Inside the block an API that cannot be connected to is not retried."""
    token = _FAIL_FAST.set(True)
    try:
        yield
    finally:
        _FAIL_FAST.reset(token)


def _retryable(exc: BaseException) -> bool:
    return isinstance(exc, TransientApiError) and not (
        isinstance(exc, Unreachable) and _FAIL_FAST.get())


def time_left() -> float | None:
    """Seconds until the current deadline (never below 0); None when there is none."""
    deadline = _DEADLINE.get()
    return None if deadline is None else max(0.0, deadline - time.monotonic())


def summarize_body(body: Any, limit: int = 300) -> str:
    if body is None:
        return ""
    if isinstance(body, dict):
        for key in ("detail", "msg", "message", "error", "title"):
            value = body.get(key)
            if isinstance(value, str) and value:
                text = value
                if key == "msg" and isinstance(body.get("error"), str):
                    text = f"{body['error']}: {value}"
                break
        else:
            errors = body.get("errors")
            text = str(errors[0].get("message", errors[0])) if isinstance(errors, list) and \
                errors and isinstance(errors[0], dict) else str(body)
    else:
        text = str(body)
    text = redact(" ".join(text.split()))
    return text if len(text) <= limit else text[: limit - 1] + "…"


def parse_retry_after(value: str | None) -> float | None:
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        return None


class JsonApi:
    def __init__(
        self,
        provider: str,
        base_url: str,
        api_key: Secret | None,
        *,
        timings: ApiTimings,
        auth_env: str,
        url_env: str | None = None,
        transport: httpx.BaseTransport | None = None,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.provider = provider
        self.base_url = base_url.rstrip("/")
        self.url_env = url_env
        self.timings = timings
        self.auth_env = auth_env
        self._sleep = sleep
        self._key = api_key
        self._client = httpx.Client(
            base_url=self.base_url,
            timeout=timings.request_timeout_s,
            transport=transport,
            headers={"User-Agent": "tailpod", "Accept": "application/json"},
        )

    def close(self) -> None:
        self._client.close()

    def _headers(self) -> dict[str, str]:
        if not self._key:
            return {}
        return {"Authorization": f"Bearer {self._key.reveal()}"}

    def send(self, method: str, path: str, what: str, *, json: Any = None,
             params: dict[str, Any] | None = None) -> httpx.Response:
        """One HTTP exchange; transport failures become TransientApiError (never the raw text).
        Under a deadline (`call_deadline`) every timeout of the exchange is cut to what is left,
        and no exchange starts once it has passed (DeadlineReached)."""
        left = time_left()
        timeout = self.timings.request_timeout_s if left is None else min(
            self.timings.request_timeout_s, left)
        if left is not None and left <= 0.05:
            raise DeadlineReached(self.provider, what)
        try:
            return self._client.request(method, path, json=json, params=params,
                                        headers=self._headers(), timeout=timeout)
        except httpx.TimeoutException:
            if left is not None and time_left() == 0.0:
                raise DeadlineReached(self.provider, what) from None
            raise TransientApiError(self.provider, what, None, "timed out") from None
        except httpx.ConnectError:
            raise Unreachable(self.provider, what, None, self.unreachable_text()) from None
        except httpx.TransportError as exc:
            raise TransientApiError(self.provider, what, None, exc.__class__.__name__) from None

    def unreachable_text(self) -> str:
        """Why a connection failed, naming the URL and the setting it came from."""
        where = f" (from {self.url_env}: a stopped sandbox or a stale value?)" if self.url_env \
            else ""
        return f"ConnectError at {self.base_url}{where}"

    def read_stream(self, path: str, what: str, *, params: dict[str, Any] | None = None,
                    idle_s: float = 3.0, max_s: float = 20.0,
                    max_bytes: int = 2 << 20) -> tuple[int, str]:
        """(status, text) of a GET whose answer may be an open stream (Server-Sent Events): read
        until the server closes it, nothing arrives for `idle_s`, `max_s` passed or `max_bytes`
        came. Transport failures become TransientApiError, as in `send`."""
        chunks: list[bytes] = []
        got = 0
        left = time_left()
        if left is not None and left <= 0.05:
            raise DeadlineReached(self.provider, what)
        if left is not None:
            max_s, idle_s = min(max_s, left), min(idle_s, left)
        deadline = time.monotonic() + max_s
        timeout = httpx.Timeout(self.timings.request_timeout_s if left is None else
                                min(self.timings.request_timeout_s, left), read=idle_s)
        try:
            with self._client.stream("GET", path, params=params, headers=self._headers(),
                                     timeout=timeout) as response:
                try:
                    for chunk in response.iter_raw():
                        chunks.append(chunk)
                        got += len(chunk)
                        if got >= max_bytes or time.monotonic() > deadline:
                            break
                except httpx.ReadTimeout:
                    pass  # a live stream that went quiet: the backfill has arrived
                status = response.status_code
        except httpx.TimeoutException:
            raise TransientApiError(self.provider, what, None, "timed out") from None
        except httpx.TransportError as exc:
            raise TransientApiError(self.provider, what, None, exc.__class__.__name__) from None
        return status, b"".join(chunks).decode("utf-8", errors="replace")

    @staticmethod
    def body_of(response: httpx.Response) -> Any:
        if not response.content:
            return None
        try:
            return response.json()
        except ValueError:
            return response.text[:500]

    def raise_for(self, response: httpx.Response, what: str) -> None:
        """Map an unwanted status to the right error class (auth, transient, other)."""
        status = response.status_code
        body = self.body_of(response)
        if status == 401:
            raise AuthError(
                f"{self.provider} rejected the API key (HTTP 401) during {what}",
                hint=f"check {self.auth_env}",
            )
        if status == 403:
            raise AuthError(
                f"{self.provider} refused access (HTTP 403) during {what}: "
                f"{summarize_body(body) or 'forbidden'}",
                hint=f"the key in {self.auth_env} lacks a permission this needs",
            )
        retry_after = parse_retry_after(response.headers.get("Retry-After"))
        if status == 429 or status >= 500:
            raise TransientApiError(self.provider, what, status, body, retry_after)
        raise ApiError(self.provider, what, status, body)

    def _wait(self, state: RetryCallState) -> float:
        exc = state.outcome.exception() if state.outcome else None
        backoff = min(self.timings.backoff_max_s,
                      self.timings.backoff_s * (2 ** (state.attempt_number - 1)))
        if isinstance(exc, TransientApiError) and exc.retry_after is not None:
            backoff = min(exc.retry_after, self.timings.max_retry_after_s)
        left = time_left()
        return backoff if left is None else min(backoff, left)

    def retrying(self, attempts: int | None = None) -> Retrying:
        return Retrying(
            stop=stop_after_attempt(attempts or self.timings.attempts),
            wait=self._wait,
            retry=retry_if_exception(_retryable),
            sleep=self._sleep,
            reraise=True,
        )

    def call(self, method: str, path: str, what: str, *, json: Any = None,
             params: dict[str, Any] | None = None, ok: tuple[int, ...] = (200, 201, 204),
             passthrough: tuple[int, ...] = ()) -> httpx.Response:
        """An idempotent call with bounded retries; statuses in `passthrough` are returned."""
        for attempt in self.retrying():
            with attempt:
                response = self.send(method, path, what, json=json, params=params)
                if response.status_code in ok or response.status_code in passthrough:
                    return response
                self.raise_for(response, what)
        raise AssertionError("unreachable: tenacity reraises")


class ApiProvider(Provider):
    """What the RunPod and vast.ai adapters share around their APIs: the client, the
    never-create-twice retry protocol of create, and the read-back after it."""

    label: ClassVar[str]  # the provider as messages name it ("RunPod", "vast.ai")

    def __init__(self, settings: Settings, *, timings: ApiTimings | None,
                 transport: httpx.BaseTransport | None, sleep: Callable[[float], None]) -> None:
        assert self.key_setting and self.url_setting and self.key_env
        api_key: Secret | None = getattr(settings, self.key_setting)
        base_url: str = getattr(settings, self.url_setting)
        auth_env = self.key_env
        if not api_key:
            raise ConfigError(
                f"{auth_env} is not set",
                hint="put it in .env or the environment (`tailpod sandbox serve` prints a key "
                "for the local sandbox)",
            )
        self.timings = timings or ApiTimings()
        self.base_url = base_url.rstrip("/")
        # This home's id: a tag with another home's is a colleague's pod (proof.others_check).
        self.home_id = home_id(settings.state_dir, settings.home_id, create=False)
        self._sleep = sleep
        self.api = JsonApi(self.label, self.base_url, api_key, timings=self.timings,
                           auth_env=auth_env, url_env=env_name(self.url_setting),
                           transport=transport, sleep=sleep)

    def manual_stop_steps(self, pod_id: str) -> list[str]:
        """The console page, then the exact API call that ends the pod (the first route of its
        termination table, the one `terminate` takes), with the key as `$KEY_ENV`, never its value."""
        steps = super().manual_stop_steps(pod_id)
        if isinstance(self, SupportsPodScopedTermination) and self.key_env:
            method, path, body = TERMINATE_ROUTES[self.pod_termination][0]
            data = (f" -H 'Content-Type: application/json' -d '{json.dumps(body)}'"
                    if body is not None else "")
            steps.append(f"API: curl -X {method} -H \"Authorization: Bearer ${self.key_env}\""
                         f"{data} {self.base_url}{path.replace('{id}', pod_id)}")
        return steps

    def _notify(self, pod_id: str) -> None:
        if self.on_created is not None:
            self.on_created(pod_id)

    def _backoff(self, attempt: int) -> float:
        return min(self.timings.backoff_max_s, self.timings.backoff_s * (2 ** (attempt - 1)))

    def _adopt_existing(self, run_tag: str) -> str | None:
        existing = self.list_by_tag(run_tag)
        if existing:
            self._notify(existing[0].pod_id)
            return existing[0].pod_id
        return None

    def _create_candidate(
        self,
        run_tag: str,
        candidate: str,
        reasons: list[str],
        *,
        send: Callable[[], httpx.Response],
        created: Callable[[int, Any], str | None],
        refused: Callable[[int, Any, str], str],
        retry_ok: tuple[int, ...],
        left_behind: Callable[[int, Any, str], str | None] | None = None,
    ) -> str | None:
        """Try one candidate (a GPU type, an offer); the pod id, or None to move on to the next.

        Each answer goes, in this order, to `created` (the new pod's id, if it names one), then
        to `left_behind` (an error answer that still made a pod: deal with it and say why the
        candidate is done), then the shared rules: 429 waits for Retry-After, a 5xx, a transport
        error or a `retry_ok` status without a pod is tried again; the rest goes to `refused`,
        which gives the reason to try the next candidate or raises. `candidate` starts each
        reason appended to `reasons`.
        """
        last = "no answer"
        attempts = max(1, self.timings.create_attempts)
        attempt = 0
        rate_limited = 0
        while attempt < attempts:
            attempt += 1
            if attempt > 1:
                # The previous try may have created the pod before failing: never create twice.
                found = self._adopt_existing(run_tag)
                if found:
                    reasons.append(f"{candidate}: created despite an error ({last})")
                    return found
            try:
                response = send()
            except TransientApiError as exc:
                last = str(exc)
                self._sleep(self._backoff(attempt))
                continue
            status = response.status_code
            answer = self.api.body_of(response)
            pod_id = created(status, answer)
            if pod_id is not None:
                self._notify(pod_id)
                return pod_id
            detail = summarize_body(answer)
            stray = left_behind(status, answer, detail) if left_behind else None
            if stray is not None:
                reasons.append(stray)
                return None
            if status == 429:
                rate_limited += 1
                if rate_limited <= self.timings.attempts:
                    attempt -= 1  # waiting for Retry-After is not a failed try
                wait = parse_retry_after(response.headers.get("Retry-After"))
                self._sleep(min(wait if wait is not None else self._backoff(rate_limited),
                                self.timings.max_retry_after_s))
                last = "HTTP 429"
                continue
            if status >= 500 or status in retry_ok:
                last = f"HTTP {status}: {detail}"
                self._sleep(self._backoff(attempt))
                continue
            reasons.append(refused(status, answer, detail))
            return None
        found = self._adopt_existing(run_tag)
        if found:
            reasons.append(f"{candidate}: created despite errors ({last})")
            return found
        reasons.append(f"{candidate}: the API kept failing ({last})")
        return None

    def _read_back(self, pod_id: str, run_tag: str) -> PodInfo:
        """The pod as the provider reports it after create: the GPU really assigned and its cost."""
        last_error: Exception | None = None
        for attempt in range(max(1, self.timings.readback_attempts)):
            try:
                info = self.get(pod_id)
                if info is not None:
                    return info
            except ProviderError as exc:
                last_error = exc
            self._sleep(self.timings.readback_interval_s if attempt else 0.0)
        # The pod exists (create answered with its id) even though it cannot be read back yet.
        return PodInfo(pod_id, run_tag, PodState.UNKNOWN,
                       detail={"readback_error": str(last_error) if last_error else "not visible"})
