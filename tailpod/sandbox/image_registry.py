"""A stand-in for Docker Hub's token service and the Registry HTTP API v2 manifest endpoint.

`GET /token?service=registry.docker.io&scope=repository:<repo>:pull` issues a bearer token for that
repository; `HEAD`/`GET /v2/<repo>/manifests/<reference>` answers with `Docker-Content-Digest`
when the token's scope covers the repository. Configured from `{repo: {tag: digest}}`. One URL
serves both, so it stands in for `registry_url` and `registry_auth_url` alike. Loopback, stdlib.

Each tag is a multi-platform index (its digest is the configured one) over one linux/amd64 image
manifest whose config blob (`GET /v2/<repo>/blobs/<digest>`) carries the image's real ENTRYPOINT
and CMD from `images.py`: the same config the sandbox's pods are composed from.

    server, url = serve(images={"lmsysorg/sglang": {"v0.5.15": "sha256:..."}})
    ... pin_image("lmsysorg/sglang:v0.5.15", registry_url=url, auth_url=url) ...
    shutdown(server)
"""

from __future__ import annotations

import hashlib
import json
import secrets
import threading
from collections.abc import Mapping
from http.server import ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

from tailpod.sandbox.http import GetHeadHandler, start_loopback_server, stop_server
from tailpod.sandbox.images import image_config

SERVICE = "registry.docker.io"
INDEX_TYPE = "application/vnd.oci.image.index.v1+json"
LIST_TYPE = "application/vnd.docker.distribution.manifest.list.v2+json"
MANIFEST_TYPE = "application/vnd.oci.image.manifest.v1+json"
CONFIG_TYPE = "application/vnd.oci.image.config.v1+json"


def _canonical(body: dict[str, Any]) -> tuple[bytes, str]:
    raw = json.dumps(body, sort_keys=True, separators=(",", ":")).encode()
    return raw, "sha256:" + hashlib.sha256(raw).hexdigest()


def image_parts(repo: str) -> tuple[dict[str, Any], str, dict[str, Any], str]:
    """(platform manifest, its digest, config blob, its digest) for a repository."""
    config = image_config(repo).config_blob()
    config_raw, config_digest = _canonical(config)
    manifest = {"schemaVersion": 2, "mediaType": MANIFEST_TYPE,
                "config": {"mediaType": CONFIG_TYPE, "digest": config_digest,
                           "size": len(config_raw)},
                "layers": []}
    return manifest, _canonical(manifest)[1], config, config_digest


class RegistryState:
    def __init__(self, images: Mapping[str, Mapping[str, str]], deny_tokens: bool) -> None:
        self.images = {repo: dict(tags) for repo, tags in images.items()}
        self.deny_tokens = deny_tokens
        self.tokens: dict[str, str] = {}  # token -> repository it may pull
        self.requests: list[tuple[str, str]] = []
        self.lock = threading.Lock()


class _Handler(GetHeadHandler):
    server_version = "tailpod-registry-standin/1"
    state: RegistryState

    def _send(
        self,
        status: int,
        body: dict[str, Any] | bytes | None,
        headers: Mapping[str, str] | None = None,
        head: bool = False,
        content_type: str = "application/json",
    ) -> None:
        if isinstance(body, bytes):  # canonical bytes whose digest was already given
            payload = body
        else:
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
        elif path.startswith("/v2/") and "/blobs/" in path:
            repo, _, digest = path[len("/v2/") :].rpartition("/blobs/")
            self._blob(repo, digest, head)
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

    def _token_grants(self, repo: str) -> bool:
        """The request's bearer token was issued for `repo` (access is decided per repository)."""
        auth = self.headers.get("Authorization", "")
        token = auth[7:].strip() if auth.lower().startswith("bearer ") else ""
        with self.state.lock:
            return self.state.tokens.get(token) == repo

    def _manifest(self, repo: str, reference: str, head: bool) -> None:
        if not self._token_grants(repo):
            self._registry_error(401, "UNAUTHORIZED", "authentication required", head)
            return
        tags = self.state.images.get(repo)
        if tags is None:
            self._registry_error(404, "NAME_UNKNOWN", f"repository name not known: {repo}", head)
            return
        manifest, manifest_digest, _config, _ = image_parts(repo)
        if reference == manifest_digest:
            self._send(200, _canonical(manifest)[0], {"Docker-Content-Digest": manifest_digest}, head,
                       MANIFEST_TYPE)
            return
        if reference.startswith("sha256:"):
            digest = reference if reference in tags.values() else None
        else:
            digest = tags.get(reference)
        if digest is None:
            self._registry_error(404, "MANIFEST_UNKNOWN", f"manifest unknown: {reference}", head)
            return
        accept = self.headers.get("Accept", "")
        if MANIFEST_TYPE in accept and INDEX_TYPE not in accept and LIST_TYPE not in accept:
            # a client that only takes single-platform manifests gets the linux/amd64 one
            self._send(200, _canonical(manifest)[0], {"Docker-Content-Digest": manifest_digest}, head,
                       MANIFEST_TYPE)
            return
        content_type = INDEX_TYPE if INDEX_TYPE in accept else LIST_TYPE
        entry = {"mediaType": MANIFEST_TYPE, "digest": manifest_digest,
                 "size": len(_canonical(manifest)[0]),
                 "platform": {"architecture": "amd64", "os": "linux"}}
        body = {"schemaVersion": 2, "mediaType": content_type, "manifests": [entry]}
        self._send(200, body, {"Docker-Content-Digest": digest}, head, content_type)

    def _blob(self, repo: str, digest: str, head: bool) -> None:
        if not self._token_grants(repo):
            self._registry_error(401, "UNAUTHORIZED", "authentication required", head)
            return
        _manifest, _, config, config_digest = image_parts(repo)
        if repo not in self.state.images or digest != config_digest:
            self._registry_error(404, "BLOB_UNKNOWN", f"blob unknown: {digest}", head)
            return
        self._send(200, _canonical(config)[0], {"Docker-Content-Digest": config_digest}, head,
                   CONFIG_TYPE)


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
