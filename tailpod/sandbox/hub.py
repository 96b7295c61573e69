"""A stand-in for the Hugging Face Hub endpoints huggingface_hub calls to inspect a model.

Serves repositories from local directories: model info (`GET /api/models/<org>/<name>` and
`.../revision/<rev>`), file download (`HEAD`/`GET /<org>/<name>/resolve/<rev>/<path>`) with HTTP
range reads, gated-repo refusals (401 without a token, 403 with a wrong one) using the
`X-Error-Code` headers huggingface_hub turns into its typed errors, and `GET /api/whoami-v2` (the
token check `HfApi.whoami` makes; `token_role` is the role it reports). Loopback only; stdlib only.

    server, url = serve(repos={"org/model": Path("ckpt")}, token="hf_x", gated={"org/model"})
    ... HfApi(endpoint=url, token="hf_x") ...
    shutdown(server)
"""

from __future__ import annotations

import hashlib
import json
import threading
from collections.abc import Iterable, Mapping
from http.server import ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

from tailpod.sandbox.http import GetHeadHandler, start_loopback_server, stop_server


class HubState:
    def __init__(
        self,
        repos: Mapping[str, Path],
        token: str | None,
        gated: Iterable[str],
        token_role: str = "read",
    ) -> None:
        self.repos = {name: Path(path) for name, path in repos.items()}
        self.token = token
        self.token_role = token_role
        self.gated = set(gated)
        self.requests: list[tuple[str, str, str | None]] = []  # (method, path, range) for tests
        self.lock = threading.Lock()

    def files(self, repo: str) -> list[str]:
        root = self.repos[repo]
        return sorted(
            p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file() or p.is_symlink()
        )

    def sha(self, repo: str) -> str:
        root = self.repos[repo]
        digest = hashlib.sha1(repo.encode())
        for name in self.files(repo):
            digest.update(f"{name}:{(root / name).stat().st_size}".encode())
        return digest.hexdigest()


def _repos_under(root: Path) -> dict[str, Path]:
    """Every `<root>/<org>/<name>` directory is the repo `org/name`."""
    found: dict[str, Path] = {}
    for org in sorted(p for p in root.iterdir() if p.is_dir()):
        for repo in sorted(p for p in org.iterdir() if p.is_dir()):
            found[f"{org.name}/{repo.name}"] = repo
    return found


class _Handler(GetHeadHandler):
    server_version = "tailpod-hub-standin/1"
    state: HubState  # set on the subclass made per server

    # -- helpers ----------------------------------------------------------------------------

    def _send(
        self,
        status: int,
        body: bytes = b"",
        headers: Mapping[str, str] | None = None,
        head: bool = False,
        content_type: str = "application/json",
    ) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        for key, value in (headers or {}).items():
            self.send_header(key, value)
        if "Content-Length" not in (headers or {}):
            self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if not head and body:
            self.wfile.write(body)

    def _error(self, status: int, code: str, message: str, head: bool) -> None:
        body = json.dumps({"error": message}).encode()
        headers = {"X-Error-Code": code, "X-Error-Message": message}
        self._send(status, body, headers, head)

    def _authorized(self, repo: str, head: bool) -> bool:
        if repo not in self.state.gated:
            return True
        auth = self.headers.get("Authorization", "")
        given = auth[7:].strip() if auth.lower().startswith("bearer ") else ""
        if not given:
            self._error(401, "GatedRepo", "Access to this gated repo requires a token.", head)
            return False
        if given != self.state.token:
            self._error(403, "GatedRepo", "This token has no access to the gated repo.", head)
            return False
        return True

    def _dispatch(self, head: bool) -> None:
        path = unquote(urlsplit(self.path).path)
        with self.state.lock:
            self.state.requests.append((self.command, path, self.headers.get("Range")))
        parts = [p for p in path.split("/") if p]
        if parts == ["api", "whoami-v2"]:
            self._whoami(head)
        elif len(parts) >= 6 and parts[:2] == ["api", "models"] and parts[4] == "tree":
            repo = f"{parts[2]}/{parts[3]}"
            query = parse_qs(urlsplit(self.path).query)
            recursive = query.get("recursive", ["false"])[-1].lower() in ("1", "true")
            self._tree(repo, parts[5], "/".join(parts[6:]), recursive, head)
        elif len(parts) >= 4 and parts[:2] == ["api", "models"]:
            repo = f"{parts[2]}/{parts[3]}"
            revision = parts[5] if len(parts) >= 6 and parts[4] == "revision" else "main"
            self._model_info(repo, revision, head)
        elif len(parts) >= 5 and parts[2] == "resolve":
            repo = f"{parts[0]}/{parts[1]}"
            self._resolve(repo, parts[3], "/".join(parts[4:]), head)
        else:
            self._error(404, "NotFound", f"no route for {path}", head)

    def _whoami(self, head: bool) -> None:
        auth = self.headers.get("Authorization", "")
        given = auth[7:].strip() if auth.lower().startswith("bearer ") else ""
        if not given or given != self.state.token:
            self._send(401, json.dumps({"error": "Invalid credentials in Authorization header"})
                       .encode(), head=head)
            return
        access = {"displayName": "hub-standin", "role": self.state.token_role}
        info = {"type": "user", "name": "standin-user",
                "auth": {"type": "access_token", "accessToken": access}}
        self._send(200, json.dumps(info).encode(), head=head)

    def _known(self, repo: str, revision: str, head: bool) -> bool:
        if repo not in self.state.repos:
            self._error(404, "RepoNotFound", f"Repository {repo} not found.", head)
            return False
        if not self._authorized(repo, head):
            return False
        if revision not in ("main", self.state.sha(repo)):
            self._error(404, "RevisionNotFound", f"Invalid rev id: {revision}", head)
            return False
        return True

    def _model_info(self, repo: str, revision: str, head: bool) -> None:
        if not self._known(repo, revision, head):
            return
        info = {
            "_id": hashlib.sha1(repo.encode()).hexdigest()[:24],
            "id": repo,
            "modelId": repo,
            "sha": self.state.sha(repo),
            "private": False,
            "gated": "manual" if repo in self.state.gated else False,
            "disabled": False,
            "downloads": 0,
            "likes": 0,
            "tags": [],
            "siblings": [{"rfilename": name} for name in self.state.files(repo)],
        }
        self._send(200, json.dumps(info).encode(), head=head)

    def _tree(self, repo: str, revision: str, under: str, recursive: bool, head: bool) -> None:
        """`GET /api/models/<repo>/tree/<rev>[/<path>]`: what `list_repo_tree` (and so
        `snapshot_download`, which vLLM uses) reads; entries `{type, oid, size, path}`."""
        if not self._known(repo, revision, head):
            return
        root = self.state.repos[repo]
        prefix = under.strip("/") + "/" if under.strip("/") else ""
        entries: list[dict[str, Any]] = []
        folders: set[str] = set()
        for name in self.state.files(repo):
            if not name.startswith(prefix):
                continue
            rest = name[len(prefix):]
            if "/" in rest and not recursive:
                folders.add(prefix + rest.split("/", 1)[0])
                continue
            if recursive:
                parts = rest.split("/")[:-1]
                folders.update(prefix + "/".join(parts[: i + 1]) for i in range(len(parts)))
            size = (root / name).stat().st_size
            entries.append({"type": "file", "path": name, "size": size,
                            "oid": hashlib.sha1(f"{name}:{size}".encode()).hexdigest()})
        entries += [{"type": "directory", "path": folder, "size": 0,
                     "oid": hashlib.sha1(folder.encode()).hexdigest()}
                    for folder in sorted(folders)]
        if prefix and not entries:
            self._error(404, "EntryNotFound", f"{under} does not exist on {revision}", head)
            return
        self._send(200, json.dumps(entries).encode(), head=head)

    def _resolve(self, repo: str, revision: str, name: str, head: bool) -> None:
        if not self._known(repo, revision, head):
            return
        root = self.state.repos[repo].resolve()
        target = (root / name).resolve()
        if root not in target.parents or not target.is_file():
            self._error(404, "EntryNotFound", f"{name} does not exist on {revision}", head)
            return
        size = target.stat().st_size
        headers = {
            "ETag": f'"{hashlib.sha1(f"{name}:{size}".encode()).hexdigest()}"',
            "X-Repo-Commit": self.state.sha(repo),
            "Accept-Ranges": "bytes",
        }
        wanted = self.headers.get("Range")
        start, end = 0, size - 1
        status = 200
        if wanted:
            parsed = _parse_range(wanted, size)
            if parsed is None:
                headers["Content-Range"] = f"bytes */{size}"
                self._send(416, b"", headers, head)
                return
            start, end = parsed
            status = 206
            headers["Content-Range"] = f"bytes {start}-{end}/{size}"
        length = max(0, end - start + 1)
        headers["Content-Length"] = str(length)
        body = b""
        if not head and length:
            with target.open("rb") as handle:
                handle.seek(start)
                body = handle.read(length)
        self._send(status, body, headers, head, content_type="application/octet-stream")


def _parse_range(header: str, size: int) -> tuple[int, int] | None:
    """`bytes=a-b` / `bytes=a-` / `bytes=-n` → inclusive (start, end); None when unsatisfiable."""
    unit, _, spec = header.partition("=")
    if unit.strip().lower() != "bytes" or "," in spec:
        return None
    first, _, last = spec.strip().partition("-")
    try:
        if first == "":
            count = int(last)
            return (max(0, size - count), size - 1) if count > 0 and size else None
        start = int(first)
        end = int(last) if last else size - 1
    except ValueError:
        return None
    if start >= size or end < start:
        return None
    return start, min(end, size - 1)


def serve(
    host: str = "127.0.0.1",
    port: int = 0,
    *,
    root: Path | str | None = None,
    repos: Mapping[str, Path | str] | None = None,
    token: str | None = None,
    gated: Iterable[str] = (),
    token_role: str = "read",
    **_ignored: Any,
) -> tuple[ThreadingHTTPServer, str]:
    """Start the stand-in in a daemon thread; returns (server, base URL for TAILPOD_HF_URL).

    `root`: every `<root>/<org>/<name>` directory becomes repo `org/name`; `repos` adds or
    overrides explicit `repo id -> directory` entries. `gated` repos need `token`; `token_role`
    is what whoami reports for it (read, write or fineGrained).
    """
    table: dict[str, Path] = _repos_under(Path(root)) if root else {}
    table.update({name: Path(path) for name, path in (repos or {}).items()})
    state = HubState(table, token, gated, token_role)
    handler = type("HubHandler", (_Handler,), {"state": state})
    server, url = start_loopback_server(handler, host, port, "hub stand-in")
    server.hub_state = state  # type: ignore[attr-defined]
    return server, url


shutdown = stop_server
