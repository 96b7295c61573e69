"""The probe's stdlib JSON Schema subset (agent/probes/structure.py) against the maintained
`jsonschema` library (Draft 2020-12): the same verdict on valid documents and on each way a
document can break the shipped schemas; a keyword outside the subset is never guessed at."""

from __future__ import annotations

import copy
import json
from typing import Any

import jsonschema
import pytest

from tailpod.agent.probes.prompt_classes import builtin_prompt_classes
from tailpod.agent.probes.structure import (
    check_output,
    class_schema,
    schema_error,
    tool_schemas,
    unsupported_keywords,
)
from tailpod.sandbox.synthetic_server import _instance

CLASSES = builtin_prompt_classes()
SCHEMAS: dict[str, Any] = {"catalogue": class_schema(CLASSES["structured"]),
                           **tool_schemas(CLASSES["tools"])}


def _mutations(doc: Any) -> list[Any]:
    """Documents one edit away from `doc`: each key dropped, each value swapped for a value of
    another type, an extra key, a string too long, a number out of range, an array emptied."""
    out: list[Any] = []

    def walk(node: Any, setter: Any) -> None:
        if isinstance(node, dict):
            for key in list(node):
                dropped = {k: v for k, v in node.items() if k != key}
                out.append(setter(dropped))
                walk(node[key], lambda v, k=key: setter({**node, k: v}))
            out.append(setter({**node, "zz_extra": 1}))
        elif isinstance(node, list):
            out.append(setter([]))
            out.append(setter(node * 6))
            for i, item in enumerate(node):
                walk(item, lambda v, i=i: setter(node[:i] + [v] + node[i + 1:]))
        for other in (None, True, 7, 2.5, -3, 9999, "x" * 200, "cph", [], {}):
            if other != node or type(other) is not type(node):
                out.append(setter(other))

    walk(doc, lambda v: v)
    return out


@pytest.mark.parametrize("name", sorted(SCHEMAS))
def test_the_subset_agrees_with_jsonschema_on_every_one_edit_document(name: str) -> None:
    schema = SCHEMAS[name]
    assert unsupported_keywords(schema) == []
    jsonschema.Draft202012Validator.check_schema(schema)
    reference = jsonschema.Draft202012Validator(schema)
    docs = [_instance(schema, seed) for seed in range(5)]
    docs += [m for d in docs[:2] for m in _mutations(copy.deepcopy(d))]
    assert len(docs) > 100
    verdicts = {True: 0, False: 0}
    for doc in docs:
        expected = reference.is_valid(doc)
        assert (schema_error(doc, schema) is None) == expected, json.dumps(doc)[:300]
        verdicts[expected] += 1
    assert verdicts[True] >= 5 and verdicts[False] >= 50  # both verdicts exercised


def test_a_keyword_outside_the_subset_leaves_schema_ok_null_and_says_which() -> None:
    pclass = {"response_format": {"type": "json_schema", "json_schema": {"schema": {
        "type": "object", "properties": {"when": {"type": "string", "format": "date-time"}},
        "oneOf": [{"required": ["when"]}]}}}}
    got = check_output(pclass, '{"when": "soon"}', None)
    assert got == {"json_ok": True, "schema_ok": None,
                   "schema_error": "not checked: the probe's validator lacks format, oneOf"}


def test_check_output_on_json_and_on_tool_calls() -> None:
    structured = CLASSES["structured"]
    assert check_output(structured, '{"items": []}', None)["schema_ok"] is True
    cut = check_output(structured, '{"items": [{"sku": "a"', None)
    assert cut == {"json_ok": False, "schema_ok": False,
                   "schema_error": "output does not parse as JSON"}
    missing = check_output(structured, '{"items": [{"sku": "a"}]}', None)
    assert missing["json_ok"] is True and missing["schema_ok"] is False
    assert missing["schema_error"] == "$.items[0]: missing required 'name'"
    tools = CLASSES["tools"]
    args = json.dumps(_instance(SCHEMAS["update_crm_record"], 1))
    good = check_output(tools, None, [{"name": "update_crm_record", "arguments": args}])
    assert good == {"json_ok": True, "schema_ok": True, "schema_error": None,
                    "tool_call_ok": True, "tool_names": ["update_crm_record"]}
    unknown = check_output(tools, None, [{"name": "send_email", "arguments": "{}"}])
    assert unknown["tool_call_ok"] is False and unknown["schema_ok"] is False
    none = check_output(tools, "I cannot help with that.", [])
    assert none["json_ok"] is False and none["schema_error"] == "no tool call"
    bad = json.loads(args)
    bad["record_id"] = "CUS-12"
    wrong = check_output(tools, None, [{"name": "update_crm_record",
                                        "arguments": json.dumps(bad)}])
    assert wrong["tool_call_ok"] is True and wrong["schema_ok"] is False
    assert wrong["schema_error"] == "$.record_id: does not match '^CUS-[0-9]{6}$'"


def test_the_tools_class_asks_for_a_call_and_ships_nested_schemas() -> None:
    tools = CLASSES["tools"]
    assert tools["tool_choice"] == "required" and tools["ignore_eos"] is False
    assert len(tools["tools"]) == 3 and len(tools["prompts"]) >= 6

    def depth(node: Any) -> int:
        if isinstance(node, dict):
            subs = list((node.get("properties") or {}).values())
            subs += [node["items"]] if isinstance(node.get("items"), dict) else []
            return 1 + max((depth(s) for s in subs), default=0)
        return 0

    assert all(depth(s) >= 3 for s in tool_schemas(tools).values())
