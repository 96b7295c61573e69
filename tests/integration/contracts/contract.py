"""Load the vendor contracts in this folder and check traffic against them with `jsonschema`."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

import httpx
from jsonschema import Draft202012Validator
from referencing import Registry, Resource
from referencing.jsonschema import DRAFT202012

HERE = Path(__file__).resolve().parent


@dataclass(frozen=True)
class Contract:
    vendor: str
    name: str
    method: str
    path: str
    doc: dict[str, Any]

    @property
    def uri(self) -> str:
        return f"urn:tailpod-contract:{self.vendor}:{self.name}"

    def matches(self, method: str, path: str) -> bool:
        pieces = re.split(r"\{[^}]+\}", self.path)
        pattern = "^" + "[^/]+".join(re.escape(p) for p in pieces) + "/?$"
        return method == self.method and re.match(pattern, path) is not None

    def _validator(self, pointer: str) -> Draft202012Validator:
        registry: Registry = Registry().with_resource(
            self.uri, Resource.from_contents(self.doc, default_specification=DRAFT202012))
        return Draft202012Validator({"$ref": f"{self.uri}#{pointer}"}, registry=registry)

    def request_errors(self, body: Any) -> list[str]:
        if self.doc.get("request") is None:
            return [] if body in (None, {}) else [f"{self.name}: the spec has no request body"]
        return [f"{e.json_path}: {e.message}" for e in self._validator("/request").iter_errors(body)]

    def query_errors(self, params: dict[str, str]) -> list[str]:
        known = set(self.doc["query"]["properties"])
        return [f"{self.name}: query parameter {k!r} is not in the spec"
                for k in params if k not in known]

    def response_errors(self, status: int, body: Any) -> list[str]:
        responses = self.doc["responses"]
        key = str(status) if str(status) in responses else "default"
        if key not in responses:
            return [f"{self.name}: the spec documents no HTTP {status} answer"]
        if responses[key] is None:
            return [] if body in (None, b"", "") else [
                f"{self.name}: HTTP {status} has no body in the spec"]
        return [f"{e.json_path}: {e.message}" for e in
                self._validator(f"/responses/{key}").iter_errors(body)]


@cache
def contracts() -> tuple[Contract, ...]:
    out = []
    for file in sorted(HERE.glob("*/*.json")):
        doc = json.loads(file.read_text())
        out.append(Contract(file.parent.name, file.stem, doc["method"], doc["path"], doc))
    return tuple(out)


def contract_for(vendor: str, method: str, path: str) -> Contract | None:
    return next((c for c in contracts() if c.vendor == vendor and c.matches(method, path)),
                None)


@dataclass
class Exchange:
    method: str
    path: str
    params: dict[str, str]
    request: Any
    status: int
    response: Any


@dataclass
class Recorder(httpx.BaseTransport):
    """An httpx transport that passes everything through and keeps each exchange."""

    inner: httpx.BaseTransport = field(default_factory=httpx.HTTPTransport)
    exchanges: list[Exchange] = field(default_factory=list)

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        response = self.inner.handle_request(request)
        content = response.read()
        body = json.loads(request.content) if request.content else None
        answer: Any = None
        if content:
            try:
                answer = json.loads(content)
            except ValueError:
                answer = content.decode("utf-8", "replace")
        self.exchanges.append(Exchange(request.method, request.url.path,
                                       dict(request.url.params), body, response.status_code,
                                       answer))
        return httpx.Response(response.status_code, headers=response.headers, content=content,
                              request=request)


def contract_problems(vendor: str, exchanges: list[Exchange]) -> tuple[list[str], set[str]]:
    """Every way the recorded exchanges break `vendor`'s published contracts, and the names of
    the contracts they used. GraphQL is skipped: it has no published schema here (being retired)."""
    problems: list[str] = []
    seen: set[str] = set()
    for ex in exchanges:
        if ex.path == "/graphql":
            continue
        contract = contract_for(vendor, ex.method, ex.path)
        if contract is None:
            problems.append(f"{ex.method} {ex.path}: tailpod calls an endpoint with no contract")
            continue
        seen.add(contract.name)
        where = f"{ex.method} {ex.path} -> {ex.status}"
        problems += [f"{where} request: {e}" for e in contract.request_errors(ex.request)]
        problems += [f"{where} query: {e}" for e in contract.query_errors(ex.params)]
        problems += [f"{where} answer: {e}" for e in contract.response_errors(ex.status,
                                                                                ex.response)]
    return problems, seen
