"""A tiny JSON-over-HTTP router on the standard library's threading server (loopback only)."""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

LOOPBACK_HOSTS = {"127.0.0.1", "localhost", "::1"}


class GetHeadHandler(BaseHTTPRequestHandler):
    """A stand-in that answers GET and HEAD through one `_dispatch(head)`, logging no request so
    that test output stays clean (hub.py, image_registry.py)."""

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - stdlib signature
        pass

    def do_GET(self) -> None:
        self._dispatch(head=False)

    def do_HEAD(self) -> None:
        self._dispatch(head=True)

    def _dispatch(self, head: bool) -> None:
        raise NotImplementedError


@dataclass
class Request:
    method: str
    path: str
    query: dict[str, list[str]]
    headers: dict[str, str]
    body: bytes
    params: dict[str, str] = field(default_factory=dict)

    def json(self) -> Any:
        if not self.body:
            return None
        return json.loads(self.body.decode("utf-8"))

    def q(self, name: str) -> str | None:
        values = self.query.get(name)
        return values[0] if values else None

    def bearer(self) -> str | None:
        auth = self.headers.get("authorization", "")
        if auth.lower().startswith("bearer "):
            return auth[7:].strip() or None
        return self.q("api_key")


@dataclass
class Response:
    status: int = 200
    body: Any = None
    headers: dict[str, str] = field(default_factory=dict)
    content_type: str = "application/json"
    delay_s: float = 0.0  # answer late (the work is already done): client-side timeouts

    def encode(self) -> bytes:
        if self.body is None:
            return b""
        if isinstance(self.body, bytes):
            return self.body
        return json.dumps(self.body).encode("utf-8")


Handler = Callable[[Request], Response]


class Router:
    def __init__(self) -> None:
        self._routes: list[tuple[str, re.Pattern[str], Handler]] = []

    def add(self, method: str, pattern: str, handler: Handler) -> None:
        # "{name}" segments capture one path segment; a trailing slash is always optional.
        regex = re.sub(r"\{(\w+)\}", r"(?P<\1>[^/]+)", pattern.rstrip("/"))
        self._routes.append((method, re.compile(f"^{regex}/?$"), handler))

    def dispatch(self, request: Request) -> Response:
        path_matched = False
        for method, regex, handler in self._routes:
            match = regex.match(request.path)
            if not match:
                continue
            path_matched = True
            if method != request.method:
                continue
            request.params = {k: unquote(v) for k, v in match.groupdict().items()}
            return handler(request)
        if path_matched:
            return Response(405, {"title": "Method Not Allowed", "status": 405,
                                  "detail": "method not allowed"})
        return Response(404, {"title": "Not Found", "status": 404, "detail": "no such endpoint"})


def serve_router(
    router: Router, host: str, port: int, name: str,
    on_error: Callable[[Exception], Response] | None = None,
) -> tuple[ThreadingHTTPServer, str]:
    if host not in LOOPBACK_HOSTS:
        raise ValueError(f"the sandbox binds loopback addresses only, not {host!r}")

    class _Handler(BaseHTTPRequestHandler):
        server_version = f"tailpod-sandbox-{name}/1"
        protocol_version = "HTTP/1.1"
        disable_nagle_algorithm = True  # headers and body go out as two writes: no 40 ms stalls

        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - stdlib signature
            return  # quiet: request lines could carry ?api_key=

        def _handle(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length) if length else b""
            parts = urlsplit(self.path)
            request = Request(
                method=self.command,
                path=parts.path,
                query=parse_qs(parts.query),
                headers={k.lower(): v for k, v in self.headers.items()},
                body=body,
            )
            try:
                response = router.dispatch(request)
            except Exception as exc:  # the emulator must answer, like a real 500
                response = on_error(exc) if on_error else Response(
                    500, {"error": "internal sandbox error", "type": exc.__class__.__name__}
                )
            if response.delay_s > 0:
                threading.Event().wait(response.delay_s)
            payload = response.encode()
            try:
                self.send_response(response.status)
                if payload:
                    self.send_header("Content-Type", response.content_type)
                self.send_header("Content-Length", str(len(payload)))
                for key, value in response.headers.items():
                    self.send_header(key, value)
                self.end_headers()
                if payload:
                    self.wfile.write(payload)
            except (BrokenPipeError, ConnectionResetError):
                pass  # the client gave up (timeout): the work is done anyway, like the real API

        do_GET = do_POST = do_PUT = do_DELETE = do_PATCH = _handle  # noqa: N815

    server = ThreadingHTTPServer((host, port), _Handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05},
                              name=f"sandbox-{name}", daemon=True)
    thread.start()
    bound_port = server.server_address[1]
    url_host = f"[{host}]" if ":" in host else host
    return server, f"http://{url_host}:{bound_port}"


def start_loopback_server(
    handler: type[BaseHTTPRequestHandler], host: str, port: int, name: str
) -> tuple[ThreadingHTTPServer, str]:
    """Serve `handler` on a loopback address in a daemon thread; returns (server, base URL).
    Every sandbox server goes through here, so none can bind a routable address."""
    if host not in LOOPBACK_HOSTS:
        raise ValueError(f"the {name} binds loopback addresses only, not {host!r}")
    server = ThreadingHTTPServer((host, port), handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, name=name, daemon=True).start()
    return server, f"http://{host}:{server.server_address[1]}"


def stop_server(server: ThreadingHTTPServer) -> None:
    server.shutdown()
    server.server_close()
