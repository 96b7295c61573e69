"""Structured output and tool calls, checked per request on the pod: does the output parse as
JSON, does it validate against the class's schema, did a tool call come back whole.

The probe is stdlib only, so the schema check is a small validator of the JSON Schema subset
that the shipped schemas use (SUPPORTED below). A schema with any other keyword is not guessed
at: its requests get `schema_ok: null` and the keyword named, so no figure claims a check that
was not made. tests/unit/agent/probes/test_structure_validator.py runs the same documents
through the `jsonschema` library (python-jsonschema, Draft 2020-12) and requires the same
verdict, so the subset cannot drift from the standard.
"""

from __future__ import annotations

import json
import math
import re
from typing import Any

# The keywords this validator implements (JSON Schema 2020-12 validation vocabulary, subset).
SUPPORTED = frozenset({
    "type", "properties", "required", "additionalProperties", "items", "enum", "const",
    "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "minLength", "maxLength",
    "minItems", "maxItems", "pattern", "anyOf", "description", "title", "$schema", "default",
})

_TYPES: dict[str, Any] = {
    "object": lambda v: isinstance(v, dict),
    "array": lambda v: isinstance(v, list),
    "string": lambda v: isinstance(v, str),
    "boolean": lambda v: isinstance(v, bool),
    "null": lambda v: v is None,
    "integer": lambda v: (isinstance(v, int) and not isinstance(v, bool))
    or (isinstance(v, float) and math.isfinite(v) and v == int(v)),
    "number": lambda v: isinstance(v, (int, float)) and not isinstance(v, bool),
}


class UnsupportedSchema(Exception):
    """The schema uses a keyword outside SUPPORTED."""


def unsupported_keywords(schema: Any) -> list[str]:
    """Keywords anywhere in `schema` that this validator does not implement (sorted)."""
    found: set[str] = set()

    def walk(node: Any) -> None:
        if not isinstance(node, dict):
            return
        for key, value in node.items():
            if key not in SUPPORTED:
                found.add(key)
            if key == "properties" and isinstance(value, dict):
                for sub in value.values():
                    walk(sub)
            elif key in ("items", "additionalProperties"):
                walk(value)
            elif key == "anyOf" and isinstance(value, list):
                for sub in value:
                    walk(sub)

    walk(schema)
    return sorted(found)


def schema_error(instance: Any, schema: Any, path: str = "$") -> str | None:
    """The first way `instance` breaks `schema`, as `<json path>: <why>`; None when it holds.
    Raises UnsupportedSchema for a keyword outside SUPPORTED (check unsupported_keywords first)."""
    if schema is True or schema == {}:
        return None
    if schema is False:
        return f"{path}: no value is allowed here"
    if not isinstance(schema, dict):
        raise UnsupportedSchema(f"{path}: a schema must be an object or a boolean")
    bad = [k for k in schema if k not in SUPPORTED]
    if bad:
        raise UnsupportedSchema(", ".join(sorted(bad)))
    kind = schema.get("type")
    if kind is not None:
        kinds = kind if isinstance(kind, list) else [kind]
        if not any(_TYPES[k](instance) for k in kinds if k in _TYPES):
            return f"{path}: expected {'/'.join(map(str, kinds))}, got {_type_name(instance)}"
    if "const" in schema and not _equal(instance, schema["const"]):
        return f"{path}: expected {json.dumps(schema['const'])}"
    if "enum" in schema and not any(_equal(instance, e) for e in schema["enum"]):
        return f"{path}: not one of the enum values"
    if "anyOf" in schema and all(schema_error(instance, s, path) for s in schema["anyOf"]):
        return f"{path}: matches none of anyOf"
    if isinstance(instance, str):
        return _string_error(instance, schema, path)
    if _TYPES["number"](instance):
        return _number_error(instance, schema, path)
    if isinstance(instance, list):
        return _array_error(instance, schema, path)
    if isinstance(instance, dict):
        return _object_error(instance, schema, path)
    return None


def _type_name(v: Any) -> str:
    for name in ("null", "boolean", "integer", "number", "string", "array", "object"):
        if _TYPES[name](v):
            return name
    return type(v).__name__


def _equal(a: Any, b: Any) -> bool:
    """JSON equality: 1 == 1.0, but true is not 1."""
    if isinstance(a, bool) or isinstance(b, bool):
        return isinstance(a, bool) and isinstance(b, bool) and a == b
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_equal(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_equal(x, y) for x, y in zip(a, b))
    return bool(type(a) is type(b) or (_TYPES["number"](a) and _TYPES["number"](b))) and a == b


def _string_error(v: str, schema: dict[str, Any], path: str) -> str | None:
    # lengths count code points, as JSON Schema says (Python's len of a str)
    if "minLength" in schema and len(v) < schema["minLength"]:
        return f"{path}: shorter than {schema['minLength']}"
    if "maxLength" in schema and len(v) > schema["maxLength"]:
        return f"{path}: longer than {schema['maxLength']}"
    if "pattern" in schema and re.search(schema["pattern"], v) is None:
        return f"{path}: does not match {schema['pattern']!r}"
    return None


def _number_error(v: float, schema: dict[str, Any], path: str) -> str | None:
    checks = (("minimum", lambda lim: v < lim), ("maximum", lambda lim: v > lim),
              ("exclusiveMinimum", lambda lim: v <= lim),
              ("exclusiveMaximum", lambda lim: v >= lim))
    for key, broken in checks:
        if key in schema and broken(schema[key]):
            return f"{path}: {key} {schema[key]}"
    return None


def _array_error(v: list[Any], schema: dict[str, Any], path: str) -> str | None:
    if "minItems" in schema and len(v) < schema["minItems"]:
        return f"{path}: fewer than {schema['minItems']} items"
    if "maxItems" in schema and len(v) > schema["maxItems"]:
        return f"{path}: more than {schema['maxItems']} items"
    if "items" in schema:
        for i, item in enumerate(v):
            if (err := schema_error(item, schema["items"], f"{path}[{i}]")) is not None:
                return err
    return None


def _object_error(v: dict[str, Any], schema: dict[str, Any], path: str) -> str | None:
    for key in schema.get("required", []):
        if key not in v:
            return f"{path}: missing required {key!r}"
    props = schema.get("properties", {})
    extra = schema.get("additionalProperties", True)
    for key, value in v.items():
        sub = props.get(key, extra)
        if sub is False:
            return f"{path}: unexpected property {key!r}"
        if (err := schema_error(value, sub, f"{path}.{key}")) is not None:
            return err
    return None


# --------------------------------------------------------------------------------------------
# Per request: what a structured class asked for and what came back
# --------------------------------------------------------------------------------------------


def class_schema(pclass: dict[str, Any]) -> dict[str, Any] | None:
    """The schema a `response_format: json_schema` class constrains its output to."""
    rf = pclass.get("response_format")
    if isinstance(rf, dict) and rf.get("type") == "json_schema":
        schema = (rf.get("json_schema") or {}).get("schema")
        return schema if isinstance(schema, dict) else None
    return None


def tool_schemas(pclass: dict[str, Any]) -> dict[str, Any]:
    """Each offered tool's `parameters` schema, by function name."""
    out: dict[str, Any] = {}
    for tool in pclass.get("tools") or []:
        fn = tool.get("function") if isinstance(tool, dict) else None
        if isinstance(fn, dict) and isinstance(fn.get("name"), str):
            out[fn["name"]] = fn.get("parameters") or {}
    return out


def is_structured(pclass: dict[str, Any]) -> bool:
    """Whether the class's outputs are checked: JSON by schema, or tool calls."""
    rf = pclass.get("response_format")
    return bool(pclass.get("tools")) or (isinstance(rf, dict) and bool(rf.get("type")))


def _parse(text: str) -> tuple[bool, Any]:
    try:
        return True, json.loads(text)
    except ValueError:
        return False, None


def _validate(value: Any, schema: dict[str, Any]) -> tuple[bool | None, str | None]:
    unknown = unsupported_keywords(schema)
    if unknown:
        return None, "not checked: the probe's validator lacks " + ", ".join(unknown)
    err = schema_error(value, schema)
    return err is None, err


def check_output(pclass: dict[str, Any], content: str | None,
                 tool_calls: list[dict[str, Any]] | None) -> dict[str, Any]:
    """The structure fields of one request row (docs/probe.md, "Structured output and tool
    calls"): `json_ok` (the content, or every tool call's arguments, parse as JSON),
    `schema_ok` (they validate; null when not checked, with `schema_error` saying why), and for
    a tools class `tool_call_ok` (at least one call, each naming an offered function, with
    arguments that parse) and `tool_names`."""
    tools = tool_schemas(pclass)
    if tools:
        calls = tool_calls or []
        names = [str(c.get("name") or "") for c in calls]
        parsed = [_parse(str(c.get("arguments") or "")) for c in calls]
        json_ok = bool(calls) and all(ok for ok, _ in parsed)
        call_ok = json_ok and all(n in tools for n in names)
        schema_ok: bool | None = call_ok
        error: str | None = None
        if not calls:
            error = "no tool call"
        elif not json_ok:
            error = "tool call arguments do not parse"
        elif not call_ok:
            error = "tool call names no offered function"
        else:
            for name, (_, args) in zip(names, parsed):
                ok, error = _validate(args, tools[name])
                if ok is not True:
                    schema_ok = ok
                    break
        return {"json_ok": json_ok, "schema_ok": schema_ok, "schema_error": error,
                "tool_call_ok": call_ok, "tool_names": names}
    ok_parse, value = _parse(content or "")
    schema = class_schema(pclass)
    if not ok_parse:
        return {"json_ok": False, "schema_ok": False if schema else None,
                "schema_error": "output does not parse as JSON"}
    if schema is None:
        return {"json_ok": True, "schema_ok": None, "schema_error": None}
    valid, error = _validate(value, schema)
    return {"json_ok": True, "schema_ok": valid, "schema_error": error}


def unique_schema(body: dict[str, Any], nonce: str) -> dict[str, Any]:
    """`body` with its schemas made new text (`probe run` option unique_schema): a `title`
    naming `nonce` on the response_format schema and on each tool's parameters. A title
    annotates and never constrains (JSON Schema 2020-12, the meta-data vocabulary), so the output
    and its checks are unchanged, but a grammar compiler that caches compiled schemas by their
    text (xgrammar's GrammarCompiler, vLLM's default backend: vllm/v1/structured_output/
    backend_xgrammar.py passes the schema text to `compile_json_schema`) compiles it anew."""
    out = dict(body)
    rf = out.get("response_format")
    if isinstance(rf, dict) and isinstance(rf.get("json_schema"), dict) \
            and isinstance(rf["json_schema"].get("schema"), dict):
        js = dict(rf["json_schema"])
        js["schema"] = {**js["schema"], "title": f"tailpod-{nonce}"}
        out["response_format"] = {**rf, "json_schema": js}
    if isinstance(out.get("tools"), list):
        tools = []
        for t in out["tools"]:
            fn = t.get("function") if isinstance(t, dict) else None
            if isinstance(fn, dict) and isinstance(fn.get("parameters"), dict):
                fn = {**fn, "parameters": {**fn["parameters"], "title": f"tailpod-{nonce}"}}
                t = {**t, "function": fn}
            tools.append(t)
        out["tools"] = tools
    return out


def structure_summary(rows: list[dict[str, Any]]) -> dict[str, Any] | None:
    """A cell's count of the structure fields over its requests that finished (ok rows)."""
    checked = [r for r in rows if r.get("ok") and "json_ok" in r]
    if not checked:
        return None
    reasons: dict[str, int] = {}
    for r in checked:
        key = str(r.get("finish_reason"))
        reasons[key] = reasons.get(key, 0) + 1
    gaps = [r["chunk_gap_max_s"] for r in checked if r.get("chunk_gap_max_s") is not None]
    out: dict[str, Any] = {
        "requests": len(checked),
        "json_ok": sum(1 for r in checked if r["json_ok"]),
        "schema_ok": sum(1 for r in checked if r.get("schema_ok") is True),
        "schema_checked": sum(1 for r in checked if r.get("schema_ok") is not None),
        "finish_reasons": dict(sorted(reasons.items())),
        "chunk_gap_max_s": max(gaps) if gaps else None,
    }
    if any("tool_call_ok" in r for r in checked):
        out["tool_call_ok"] = sum(1 for r in checked if r.get("tool_call_ok"))
    return out
