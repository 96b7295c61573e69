"""A stand-in for Docker Hub's token service and the Registry HTTP API v2 manifest endpoint.

`GET /token?service=registry.docker.io&scope=repository:<repo>:pull` issues a bearer token for that
repository; `HEAD`/`GET /v2/<repo>/manifests/<reference>` answers with `Docker-Content-Digest`
when the token's scope covers the repository. Configured from `{repo: {tag: digest}}`. One URL
serves both, so it stands in for `registry_url` and `registry_auth_url` alike. Loopback, stdlib.

    server, url = serve(images={"lmsysorg/sglang": {"v0.5.15": "sha256:..."}})
    ... pin_image("lmsysorg/sglang:v0.5.15", registry_url=url, auth_url=url) ...
    shutdown(server)
"""

from __future__ import annotations

import json
import secrets
import threading
from collections.abc import Mapping
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

from tailpod.provision.sandbox.http import start_loopback_server, stop_server

SERVICE = "registry.docker.io"
INDEX_TYPE = "application/vnd.oci.image.index.v1+json"
LIST_TYPE = "application/vnd.docker.distribution.manifest.list.v2+json"


class RegistryState:
    def __init__(self, images: Mapping[str, Mapping[str, str]], deny_tokens: bool) -> None:
        self.images = {repo: dict(tags) for repo, tags in images.items()}
        self.deny_tokens = deny_tokens
        self.tokens: dict[str, str] = {}  # token -> repository it may pull
        self.requests: list[tuple[str, str]] = []
        self.lock = threading.Lock()


class _Handler(BaseHTTPRequestHandler):
    server_version = "tailpod-registry-standin/1"
    state: RegistryState

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - stdlib signature
        pass

    def do_GET(self) -> None:
        self._dispatch(head=False)

    def do_HEAD(self) -> None:
        self._dispatch(head=True)

    def _send(
        self,
        status: int,
        body: dict[str, Any] | None,
        headers: Mapping[str, str] | None = None,
        head: bool = False,
        content_type: str = "application/json",
    ) -> None:
        payload = json.dumps(body).encode() if body is not None else b""
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(payload)))
        for key, value in (headers or {}).items():
            self.send_header(key, value)
        self.end_headers()
        if not head and payload:
            self.wfile.write(payload)

    def _registry_error(self, status: int, code: str, message: str, head: bool) -> None:
        headers = {}
        if status == 401:
            host = self.headers.get("Host", "127.0.0.1")
            headers["WWW-Authenticate"] = f'Bearer realm="http://{host}/token",service="{SERVICE}"'
        self._send(status, {"errors": [{"code": code, "message": message}]}, headers, head)

    def _dispatch(self, head: bool) -> None:
        parts = urlsplit(self.path)
        path = unquote(parts.path)
        with self.state.lock:
            self.state.requests.append((self.command, path))
        if path == "/token":
            self._token(parse_qs(parts.query), head)
        elif path.startswith("/v2/") and "/manifests/" in path:
            repo, _, reference = path[len("/v2/") :].rpartition("/manifests/")
            self._manifest(repo, reference, head)
        elif path in ("/v2", "/v2/"):
            self._send(200, {}, head=head)
        else:
            self._send(404, {"error": f"no route for {path}"}, head=head)

    def _token(self, query: dict[str, list[str]], head: bool) -> None:
        if self.state.deny_tokens:
            self._send(401, {"details": "incorrect username or password"}, head=head)
            return
        service = (query.get("service") or [""])[0]
        scope = (query.get("scope") or [""])[0]
        kind, _, rest = scope.partition(":")
        repo, _, actions = rest.rpartition(":")
        if service != SERVICE or kind != "repository" or not repo or "pull" not in actions:
            self._send(400, {"details": "invalid service or scope"}, head=head)
            return
        token = secrets.token_hex(16)
        with self.state.lock:
            self.state.tokens[token] = repo
        # Docker Hub issues a token for any repository name; access is decided at the manifest.
        self._send(200, {"token": token, "access_token": token, "expires_in": 300}, head=head)

    def _manifest(self, repo: str, reference: str, head: bool) -> None:
        auth = self.headers.get("Authorization", "")
        token = auth[7:].strip() if auth.lower().startswith("bearer ") else ""
        with self.state.lock:
            granted = self.state.tokens.get(token)
        if granted != repo:
            self._registry_error(401, "UNAUTHORIZED", "authentication required", head)
            return
        tags = self.state.images.get(repo)
        if tags is None:
            self._registry_error(404, "NAME_UNKNOWN", f"repository name not known: {repo}", head)
            return
        if reference.startswith("sha256:"):
            digest = reference if reference in tags.values() else None
        else:
            digest = tags.get(reference)
        if digest is None:
            self._registry_error(404, "MANIFEST_UNKNOWN", f"manifest unknown: {reference}", head)
            return
        accept = self.headers.get("Accept", "")
        content_type = INDEX_TYPE if INDEX_TYPE in accept else LIST_TYPE
        body = {"schemaVersion": 2, "mediaType": content_type, "manifests": []}
        self._send(200, body, {"Docker-Content-Digest": digest}, head, content_type)


def serve(
    host: str = "127.0.0.1",
    port: int = 0,
    *,
    images: Mapping[str, Mapping[str, str]] | None = None,
    deny_tokens: bool = False,
    **_ignored: Any,
) -> tuple[ThreadingHTTPServer, str]:
    """Start the stand-in in a daemon thread; returns (server, base URL).

    `images` maps repository (`library/ubuntu`, `lmsysorg/sglang`) to `{tag: digest}`.
    `deny_tokens` makes the token endpoint refuse, to exercise auth failures.
    """
    state = RegistryState(images or {}, deny_tokens)
    handler = type("RegistryHandler", (_Handler,), {"state": state})
    server, url = start_loopback_server(handler, host, port, "registry stand-in")
    server.registry_state = state  # type: ignore[attr-defined]
    return server, url


shutdown = stop_server
