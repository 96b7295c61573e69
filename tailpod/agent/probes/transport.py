"""The HTTP/1.1 client: endpoints, plain requests, /metrics scrapes, and the two connection kinds the
load loop drives (asyncio protocol, http.client in threads). Errors are carried as data in the
request result (stream.RequestResult).
"""

from __future__ import annotations

import asyncio
import contextlib
import http.client
import ipaddress
import json
import os
import socket
import ssl
import time
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from .basics import API_KEY_ENV, USER_AGENT, ProbeError
from .metrics import Sample, parse_prometheus
from .stream import (
    HTTPResponseParser,
    ProtocolError,
    RequestResult,
    RequestSpec,
    StreamRecorder,
    result_from_recorder,
)

# --------------------------------------------------------------------------------------------
# Endpoints
# --------------------------------------------------------------------------------------------


@dataclass
class Endpoint:
    scheme: str
    host: str
    port: int
    base_path: str

    @classmethod
    def parse(cls, url: str) -> Endpoint:
        parts = urlsplit(url if "://" in url else "http://" + url)
        if parts.scheme not in ("http", "https"):
            raise ProbeError(f"base URL must be http:// or https://, got {url!r}")
        if not parts.hostname:
            raise ProbeError(f"base URL has no host: {url!r}")
        port = parts.port or (443 if parts.scheme == "https" else 80)
        return cls(parts.scheme, parts.hostname, port, parts.path.rstrip("/"))

    def path(self, suffix: str) -> str:
        return self.base_path + suffix

    def ssl_context(self) -> ssl.SSLContext | None:
        return ssl.create_default_context() if self.scheme == "https" else None

    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{self.scheme}://{host}:{self.port}{self.base_path}"


def is_loopback_host(host: str) -> bool:
    """True when every address the host names is loopback (127.0.0.0/8, ::1, localhost)."""
    h = host.strip("[]").lower()
    if h == "localhost" or h.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(h).is_loopback
    except ValueError:
        pass
    try:
        infos = socket.getaddrinfo(h, None)
    except OSError:
        return False
    addrs = {str(info[4][0]) for info in infos}
    try:
        return bool(addrs) and all(ipaddress.ip_address(a.split("%")[0]).is_loopback for a in addrs)
    except ValueError:
        return False


def measured_from(base_url: str) -> str:
    return "pod" if is_loopback_host(Endpoint.parse(base_url).host) else "off-pod"


def _auth_headers() -> dict[str, str]:
    key = os.environ.get(API_KEY_ENV)
    return {"Authorization": "Bearer " + key} if key else {}


def _scrub(text: str) -> str:
    key = os.environ.get(API_KEY_ENV)
    return text.replace(key, "***") if key else text


def http_request(
    ep: Endpoint,
    method: str,
    path: str,
    body: Any = None,
    timeout: float = 30.0,
) -> tuple[int, bytes]:
    """A small synchronous request (metrics, model list, gate); returns (status, body)."""
    conn = _new_connection(ep, timeout)
    headers = {"User-Agent": USER_AGENT, "Accept": "*/*"}
    headers.update(_auth_headers())
    payload = None
    if body is not None:
        payload = json.dumps(body).encode()
        headers["Content-Type"] = "application/json"
    try:
        conn.request(method, ep.path(path), body=payload, headers=headers)
        resp = conn.getresponse()
        return resp.status, resp.read()
    finally:
        conn.close()


def scrape_metrics(ep: Endpoint, timeout: float = 10.0) -> list[Sample] | None:
    """Parsed /metrics, or None when the server has none (404) or cannot be read."""
    try:
        status, data = http_request(ep, "GET", "/metrics", timeout=timeout)
    except (OSError, http.client.HTTPException):
        return None
    if status != 200:
        return None
    return parse_prometheus(data.decode("utf-8", "replace"))


def detect_engine(samples: list[Sample] | None) -> str:
    if not samples:
        return "none"
    names = {s.name.split(":", 1)[0] for s in samples if ":" in s.name}
    if "vllm" in names:
        return "vllm"
    if "sglang" in names:
        return "sglang"
    return "none"


def discover_model(ep: Endpoint, timeout: float = 30.0) -> str:
    try:
        status, data = http_request(ep, "GET", "/v1/models", timeout=timeout)
    except (OSError, http.client.HTTPException) as exc:
        raise ProbeError(f"cannot reach {ep.url()}/v1/models: {exc}") from None
    if status != 200:
        raise ProbeError(f"{ep.url()}/v1/models answered HTTP {status}; pass --model")
    try:
        return str(json.loads(data)["data"][0]["id"])
    except (ValueError, KeyError, IndexError, TypeError):
        raise ProbeError(f"{ep.url()}/v1/models lists no model; pass --model") from None


# --------------------------------------------------------------------------------------------
# Transport A: asyncio protocol over raw TCP, hand-rolled HTTP/1.1 (the default)
# --------------------------------------------------------------------------------------------


class _ConnProtocol(asyncio.Protocol):
    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.transport: asyncio.Transport | None = None
        self.parser: HTTPResponseParser | None = None
        self.waiter: asyncio.Future[None] | None = None
        self.closed = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        parser = self.parser
        if parser is None:
            return
        try:
            parser.feed(data, time.perf_counter())
        except Exception as exc:  # noqa: BLE001 - any parse fault fails this request only
            self._finish(exc if isinstance(exc, ProtocolError) else ProtocolError(repr(exc)))
            if self.transport is not None:
                self.transport.close()
            return
        if parser.complete:
            self._finish(None)

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        parser = self.parser
        if parser is not None and not parser.complete:
            parser.eof()
            if parser.complete:
                self._finish(None)
            elif parser.bytes_received == 0:
                self._finish(ConnectionResetError("connection closed before any response"))
            else:
                self._finish(ConnectionResetError("connection closed mid-response"))

    def _finish(self, exc: Exception | None) -> None:
        waiter = self.waiter
        if waiter is not None and not waiter.done():
            if exc is None:
                waiter.set_result(None)
            else:
                waiter.set_exception(exc)


class AsyncConnection:
    """One keep-alive connection, reused by one worker for consecutive requests."""

    def __init__(self, ep: Endpoint, extra_headers: dict[str, str]) -> None:
        self.ep = ep
        self.proto: _ConnProtocol | None = None
        hdrs = {
            "Host": f"{ep.host}:{ep.port}",
            "User-Agent": USER_AGENT,
            "Accept": "text/event-stream",
            "Content-Type": "application/json",
        }
        hdrs.update(extra_headers)
        self._header_block = "".join("{}: {}\r\n".format(*kv) for kv in hdrs.items())

    async def _connect(self) -> _ConnProtocol:
        loop = asyncio.get_running_loop()
        _, proto = await loop.create_connection(
            lambda: _ConnProtocol(loop), self.ep.host, self.ep.port, ssl=self.ep.ssl_context()
        )
        return proto

    async def open(self, timeout: float) -> None:
        """Connect ahead of the first request (a failure here resurfaces on that request)."""
        with contextlib.suppress(OSError, asyncio.TimeoutError, ssl.SSLError):
            self.proto = await asyncio.wait_for(self._connect(), timeout)

    def close(self) -> None:
        if self.proto is not None and self.proto.transport is not None:
            self.proto.transport.close()
        self.proto = None

    async def exchange(self, spec: RequestSpec, rec: StreamRecorder, timeout: float) -> None:
        head = (
            f"POST {spec.path} HTTP/1.1\r\n{self._header_block}"
            f"Content-Length: {len(spec.body)}\r\n\r\n"
        )
        payload = head.encode("latin-1") + spec.body
        for attempt in (0, 1):
            reused = self.proto is not None and not self.proto.closed
            if not reused:
                self.close()
                self.proto = await asyncio.wait_for(self._connect(), timeout)
            proto = self.proto
            assert proto is not None and proto.transport is not None
            parser = HTTPResponseParser(rec.feed)
            fut: asyncio.Future[None] = proto.loop.create_future()
            proto.parser, proto.waiter = parser, fut
            if attempt == 1:
                rec.start()  # the first try never reached the server: time the retry
            proto.transport.write(payload)
            try:
                await asyncio.wait_for(fut, timeout)
            except ConnectionResetError:
                proto.parser = proto.waiter = None
                self.close()
                # a stale keep-alive connection: retry once, only if nothing came back
                if reused and parser.bytes_received == 0 and attempt == 0:
                    continue
                raise
            except BaseException:
                proto.parser = proto.waiter = None
                self.close()
                raise
            proto.parser = proto.waiter = None
            if not parser.keep_alive:
                self.close()
            if not (200 <= parser.status < 300):
                snippet = parser.error_body[:300].decode("utf-8", "replace")
                rec.fail(f"HTTP {parser.status}: {snippet.strip()}")
            return


# --------------------------------------------------------------------------------------------
# Transport B: http.client in threads (kept for comparison; see docs/probe.md)
# --------------------------------------------------------------------------------------------


def _new_connection(ep: Endpoint, timeout: float) -> http.client.HTTPConnection:
    if ep.scheme == "https":
        return http.client.HTTPSConnection(
            ep.host, ep.port, timeout=timeout, context=ep.ssl_context()
        )
    return http.client.HTTPConnection(ep.host, ep.port, timeout=timeout)


def _thread_exchange(
    conn_box: list[http.client.HTTPConnection | None],
    ep: Endpoint,
    spec: RequestSpec,
    rec: StreamRecorder,
    headers: dict[str, str],
    timeout: float,
) -> None:
    deadline = rec.t_send + timeout
    for attempt in (0, 1):
        reused = conn_box[0] is not None
        conn = conn_box[0] or _new_connection(ep, timeout)
        conn_box[0] = conn
        try:
            if attempt == 1:
                rec.start()
            conn.request("POST", spec.path, body=spec.body, headers=headers)
            resp = conn.getresponse()
        except (http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError):
            conn.close()
            conn_box[0] = None
            if reused and attempt == 0:
                continue
            raise
        break
    else:  # pragma: no cover - the second attempt either breaks or raises
        raise AssertionError("unreachable")
    if resp.status < 200 or resp.status >= 300:
        body = resp.read(65536)
        snippet = body[:300].decode("utf-8", "replace").strip()
        rec.fail(f"HTTP {resp.status}: {snippet}")
        conn.close()
        conn_box[0] = None
        return
    while True:
        data = resp.read1(65536)
        if not data:
            break
        rec.feed(data, time.perf_counter())
        if time.perf_counter() > deadline:
            raise TimeoutError(f"timeout after {timeout:g} s")
    if resp.will_close:
        conn.close()
        conn_box[0] = None


async def exchange_recorded(conn: AsyncConnection, spec: RequestSpec, api: str,
                    timeout: float) -> RequestResult:
    """One request on `conn`, timed from its send; a timeout or a broken connection is the
    result's failure (scrubbed of secrets), never raised, so the loop goes on."""
    rec = StreamRecorder(api, structured=spec.structured)
    rec.start()
    try:
        await conn.exchange(spec, rec, timeout)
    except asyncio.TimeoutError:
        rec.fail(f"timeout after {timeout:g} s")
    except (OSError, ProtocolError, ssl.SSLError) as exc:
        rec.fail(_scrub(f"{type(exc).__name__}: {exc}"))
    rec.finish(time.perf_counter())
    return result_from_recorder(spec, rec)
