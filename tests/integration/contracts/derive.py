"""Re-derive the contract files in this folder from the vendors' published OpenAPI documents.

    python tests/integration/contracts/derive.py RUNPOD_DOCS_CHECKOUT VAST_DOCS_CHECKOUT

Each argument is a git checkout (or bare repository) of github.com/runpod/docs and
github.com/vast-ai/docs; the spec is read at that repository's HEAD and its commit is written into
every file (`x-source`). Only the endpoints tailpod calls are kept. `#/components/...` references
are rewritten to `#/$defs/...` so each file is one self-contained JSON Schema 2020-12 resource
(OpenAPI 3.1 schemas are JSON Schema 2020-12); descriptions and examples are dropped, only the
structure is kept. Where tailpod follows a vendor's own client
instead of the spec, the file says so in `x-deviations` and the override is applied here, never
by hand.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml

HERE = Path(__file__).resolve().parent

RUNPOD = {
    "repository": "runpod/docs", "path": "api-reference-v2/openapi.json",
    "endpoints": {
        "list_pods": ("GET", "/v2/pods"),
        "create_pod": ("POST", "/v2/pods"),
        "get_pod": ("GET", "/v2/pods/{id}"),
        "delete_pod": ("DELETE", "/v2/pods/{id}"),
        "pod_action": ("POST", "/v2/pods/{id}/action"),
        "catalog_gpus": ("GET", "/v2/catalog/gpus"),
        "billing_pods": ("GET", "/v2/billing/pods"),
        "list_network_volumes": ("GET", "/v2/network-volumes"),
        "create_network_volume": ("POST", "/v2/network-volumes"),
        "get_network_volume": ("GET", "/v2/network-volumes/{id}"),
        "update_network_volume": ("PATCH", "/v2/network-volumes/{id}"),
        "delete_network_volume": ("DELETE", "/v2/network-volumes/{id}"),
        "catalog_datacenters": ("GET", "/v2/catalog/datacenters"),
        "billing_network_volumes": ("GET", "/v2/billing/network-volumes"),
    },
}
VAST = {
    "repository": "vast-ai/docs", "path": "api-reference/openapi.yaml",
    "endpoints": {
        "search_offers": ("POST", "/api/v0/bundles"),
        "create_instance": ("PUT", "/api/v0/asks/{id}"),
        "list_instances": ("GET", "/api/v1/instances"),
        "show_instance": ("GET", "/api/v0/instances/{id}"),
        "destroy_instance": ("DELETE", "/api/v0/instances/{id}"),
        "show_user": ("GET", "/api/v0/users/current"),
        "search_volumes": ("POST", "/api/v0/volumes/search"),
        "rent_volume": ("PUT", "/api/v0/volumes"),
        "list_volumes": ("GET", "/api/v0/volumes"),
        "delete_volume": ("DELETE", "/api/v0/volumes"),
    },
}
# Where the published spec and the vendor's own client disagree, tailpod sends what the client
# sends; each override names its evidence.
CLI = "vast-ai/vast-cli vast.py @ 55679830a2c2adcf5c7fad08bf08717a9591062a"
INSTANCE_DEVIATIONS = [{
    "pointer": "/$defs/Instance/properties/extra_env",
    "spec": "an array of strings",
    "tailpod": "an array of [key, value] pairs",
    "evidence": f"{CLI} show__instance: {{env_var[0]: env_var[1] for env_var in row['extra_env']}}"
                "; the same spec's GET /api/v1/instances schema has the pairs",
    "schema": {"type": "array", "items": {"type": "array", "items": {"type": "string"},
                                          "minItems": 2, "maxItems": 2}},
}, {
    "pointer": "/$defs/Instance/properties/ports",
    "spec": "an array of integers",
    "tailpod": "an object of \"port/proto\" -> [{HostIp, HostPort (a string)}]",
    "evidence": f"{CLI} ssh-url: int(ports.get('22/tcp')[0]['HostPort']); the same spec's "
                "GET /api/v1/instances schema has this object",
    "schema": {"type": "object", "additionalProperties": {"type": "array", "items": {
        "type": "object", "properties": {"HostIp": {"type": "string"},
                                         "HostPort": {"type": "string"}}}}},
}]
DEVIATIONS: dict[str, list[dict[str, Any]]] = {
    "vast/list_volumes": [{
        "pointer": "/query/properties/owner",
        "spec": "no query parameters",
        "tailpod": "owner=me",
        "evidence": f"{CLI} show__volumes: apiurl(args, '/volumes', {{'owner': 'me', 'type': type}})",
        "schema": {"type": "string"},
    }, {
        "pointer": "/query/properties/type",
        "spec": "no query parameters",
        "tailpod": "type=local_volume",
        "evidence": f"{CLI} show__volumes: types local_volume, network_volume, all_volume",
        "schema": {"type": "string", "enum": ["local_volume", "network_volume", "all_volume"]},
    }],
    "vast/delete_volume": [{
        "pointer": "/query/properties/id",
        "spec": "the id in the JSON body only",
        "tailpod": "the id in the query as well as the body",
        "evidence": f"{CLI} delete__volume: apiurl(args, '/volumes/', query_args={{'id': args.id}})",
        "schema": {"type": "string", "pattern": "^[0-9]+$"},
    }],
    "vast/rent_volume": [{
        "pointer": "/request/properties/name",
        "spec": "no name property",
        "tailpod": "name (letters, digits, underscores)",
        "evidence": f"{CLI} create__volume: json_blob['name'] = args.name; vast-ai/docs "
                    "guides/instances/storage/volumes.mdx: 'alphanumeric with underscores, with "
                    "a max length of 64'",
        "schema": {"type": "string", "pattern": "^[A-Za-z0-9_]{1,64}$"},
    }],
    "vast/search_offers": [{
        "pointer": "/request/properties/type",
        "spec": "one of ondemand, bid, reserved",
        "tailpod": "on-demand",
        "evidence": f"{CLI} search__offers: --type defaults to 'on-demand', sent as query['type']",
        "schema": {"type": "string", "enum": ["on-demand", "ondemand", "bid", "reserved"]},
    }, {
        "pointer": "/request/properties/order",
        "spec": "an array of exactly two [field, direction] pairs (minItems/maxItems on the "
                "outer array)",
        "tailpod": "one [field, direction] pair per sort key",
        "evidence": f"{CLI} search__offers: order.append([field, direction]) per --order field",
        "schema": {"type": "array", "items": {"type": "array", "items": {"type": "string"},
                                              "minItems": 2, "maxItems": 2}},
    }],
    "vast/show_instance": [{
        "pointer": "/query/properties/owner",
        "spec": "no query parameters",
        "tailpod": "owner=me",
        "evidence": f"{CLI} show__instance: apiurl(args, '/instances/{{id}}/', {{'owner': 'me'}})",
        "schema": {"type": "string"},
    }, {
        "pointer": "/responses/200/properties/instances",
        "spec": "an Instance",
        "tailpod": "an Instance, or null once the instance is gone",
        "evidence": f"{CLI} show__instance: 'if row is None: ... not found or no longer exists'",
        "schema": {"anyOf": [{"$ref": "#/$defs/Instance"}, {"type": "null"}]},
    }, *INSTANCE_DEVIATIONS],
    "vast/create_instance": [{
        "pointer": "/request/properties/env",
        "spec": "a string of docker flags (\"-e K=V -p 8000:8000\")",
        "tailpod": "an object (\"K\": \"V\", \"-p 8000:8000\": \"1\")",
        "evidence": "vast-ai/vast-cli vast.py create__instance sends parse_env(args.env), a dict "
                    "(commit 55679830a2c2adcf5c7fad08bf08717a9591062a)",
        "schema": {"type": "object", "additionalProperties": {"type": "string"}},
    }],
}


def spec_text(checkout: Path, path: str) -> tuple[str, str]:
    def git(*args: str) -> str:
        return subprocess.run(["git", "-C", str(checkout), *args], capture_output=True,
                              text=True, check=True).stdout
    return git("show", f"HEAD:{path}"), git("rev-parse", "HEAD").strip()


ANNOTATIONS = ("example", "examples", "x-codeSamples", "description", "summary")


def rewrite(node: Any, spec: dict[str, Any], needed: set[str], names: bool = False) -> Any:
    """Copy a schema, turning component references into `$defs` ones and dropping annotations.
    `names` marks a `properties` map, whose keys are field names (even "description")."""
    if isinstance(node, list):
        return [rewrite(n, spec, needed) for n in node]
    if not isinstance(node, dict):
        return node
    ref = node.get("$ref")
    if isinstance(ref, str) and ref.startswith("#/components/schemas/"):
        name = ref.rsplit("/", 1)[1]
        needed.add(name)
        return {**{k: rewrite(v, spec, needed) for k, v in node.items()
                   if k != "$ref" and k not in ANNOTATIONS}, "$ref": f"#/$defs/{name}"}
    return {k: rewrite(v, spec, needed, names=(k in ("properties", "patternProperties")
                                               and not names))
            for k, v in node.items() if names or k not in ANNOTATIONS}


def resolve(node: dict[str, Any], spec: dict[str, Any]) -> dict[str, Any]:
    ref = node.get("$ref")
    if isinstance(ref, str) and ref.startswith("#/components/") and \
            not ref.startswith("#/components/schemas/"):
        target: Any = spec
        for part in ref[2:].split("/"):
            target = target[part]
        return resolve(target, spec)
    return node


def json_schema_of(content_holder: dict[str, Any]) -> dict[str, Any] | None:
    content = content_holder.get("content") or {}
    for media in ("application/json", "application/problem+json"):
        if media in content and "schema" in content[media]:
            return dict(content[media]["schema"])
    return None


def derive(vendor: dict[str, Any], folder: str, spec: dict[str, Any], commit: str) -> None:
    schemas = (spec.get("components") or {}).get("schemas") or {}
    out_dir = HERE / folder
    out_dir.mkdir(exist_ok=True)
    for name, (method, path) in vendor["endpoints"].items():
        item = spec["paths"].get(path) or spec["paths"][path + "/"]
        op = item[method.lower()]
        needed: set[str] = set()
        params = [resolve(p, spec) for p in item.get("parameters", []) + op.get("parameters", [])]
        query = {"type": "object", "properties": {
            p["name"]: rewrite(p.get("schema", {}), spec, needed)
            for p in params if p.get("in") == "query"}}
        request = None
        if op.get("requestBody"):
            request = json_schema_of(resolve(op["requestBody"], spec))
            request = rewrite(request, spec, needed) if request else None
        responses = {}
        for status, answer in op.get("responses", {}).items():
            schema = json_schema_of(resolve(answer, spec))
            responses[status] = rewrite(schema, spec, needed) if schema else None
        defs: dict[str, Any] = {}
        while needed - set(defs):
            for ref in sorted(needed - set(defs)):
                defs[ref] = rewrite(schemas[ref], spec, needed)
        contract: dict[str, Any] = {
            "$schema": "https://json-schema.org/draft/2020-12/schema",
            "x-source": {"repository": vendor["repository"], "path": vendor["path"],
                         "commit": commit, "operation": f"{method} {path}",
                         "operationId": op.get("operationId")},
            "x-deviations": [],
            "method": method, "path": path, "query": query, "request": request,
            "responses": responses, "$defs": dict(sorted(defs.items())),
        }
        for dev in DEVIATIONS.get(f"{folder}/{name}", []):
            target = contract
            *parents, leaf = dev["pointer"].strip("/").split("/")
            for part in parents:
                target = target[part]
            target[leaf] = dev["schema"]
            contract["x-deviations"].append({k: v for k, v in dev.items() if k != "schema"})
        (out_dir / f"{name}.json").write_text(json.dumps(contract, indent=1) + "\n")


def main(runpod_checkout: str, vast_checkout: str) -> None:
    text, commit = spec_text(Path(runpod_checkout), RUNPOD["path"])
    derive(RUNPOD, "runpod", json.loads(text), commit)
    text, commit = spec_text(Path(vast_checkout), VAST["path"])
    derive(VAST, "vast", yaml.safe_load(text), commit)


if __name__ == "__main__":
    main(*sys.argv[1:3])
