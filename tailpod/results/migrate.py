"""Bring older run.json / rows.jsonl shapes up to the current schema version.

Version 0 is the pre-agreement draft shape (documented in docs/results.md, "Older versions"): no
`schema_version` key, flat `price_usd_hr`/`gpu`/`off_pod` on the run, `type` instead of `kind` on
rows, `tok_s` instead of `output_tok_s`, and acceptance as flat `accept_len`/`accept_rate` fields.
Each step takes a plain dict and returns a new dict one version up; inputs are never mutated.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from tailpod.errors import TailpodError
from tailpod.results.schema import SCHEMA_VERSION

DEFAULT_PROMPT_CLASS = "default"


def version_of(data: dict[str, Any]) -> int:
    raw = data.get("schema_version", 0)
    try:
        return int(raw)
    except (TypeError, ValueError):
        raise TailpodError(f"schema_version {raw!r} is not a number") from None


def _measured_from(data: dict[str, Any]) -> str:
    return "off-pod" if data.get("off_pod") else "pod"


def _run_v0_to_v1(old: dict[str, Any]) -> dict[str, Any]:
    concurrency = [int(c) for c in old.get("concurrency") or []]
    arms = []
    for arm in old.get("arms") or []:
        config = dict(arm.get("config") or {})
        config.setdefault("spec", {"k": int(arm.get("k") or 0), "method": arm.get("method")})
        gate_passed = arm.get("gate_passed")
        gate = (
            None
            if gate_passed is None
            else {
                "status": "pass" if gate_passed else "fail",
                "method": "text",
                "first_mismatch": None,
                "prompts": None,
            }
        )
        void = bool(gate_passed is False or arm.get("void_reason"))
        arms.append(
            {
                "label": arm["label"],
                "engine_config": config,
                "argv": list(arm.get("argv") or []),
                "startup": {
                    "engine": old.get("engine"),
                    "facts": dict(arm.get("facts") or {}),
                    "lines": list(arm.get("startup_lines") or []),
                },
                "gate": gate,
                "void": void,
                "void_reason": arm.get("void_reason")
                or ("gate failed" if gate_passed is False else None),
                "restart_s": None,
            }
        )
    return {
        "schema_version": 1,
        "run_id": old["run_id"],
        "tailpod_version": old.get("tailpod_version"),
        "created_at": old["created_at"],
        "finished_at": old.get("finished_at"),
        "provider": old.get("provider", "unknown"),
        "pod": {
            "gpu": old.get("gpu"),
            "gpu_count": old.get("gpu_count"),
            "price_per_hr": old.get("price_usd_hr"),
            "machine": {},
        },
        "measured_from": _measured_from(old),
        "image": {"ref": old.get("image"), "digest": None},
        "model": old["model"],
        "engine": {"name": old["engine"], "version": old.get("engine_version")},
        "plan": {
            "arms": [a["label"] for a in arms],
            "concurrency": concurrency,
            "reps": int(old.get("reps") or 1),
            "max_tokens": old.get("max_tokens"),
            "prompt_classes": [DEFAULT_PROMPT_CLASS],
            "interleave_arms": False,
        },
        "arms": arms,
        "notes": list(old.get("notes") or []) + ["migrated from schema v0"],
    }


def _row_v0_to_v1(old: dict[str, Any]) -> dict[str, Any]:
    kind = old.get("type") or old.get("kind")
    arm, conc, rep = old["arm"], int(old["concurrency"]), int(old.get("rep", 0))
    base = {
        "kind": kind,
        "schema_version": 1,
        "run_id": old["run_id"],
        "arm": arm,
        "concurrency": conc,
        "rep": rep,
        "prompt_class": DEFAULT_PROMPT_CLASS,
        "cell": f"{arm}|c{conc}|r{rep}|{DEFAULT_PROMPT_CLASS}",
        "measured_from": _measured_from(old),
    }
    if kind == "request":
        return base | {
            "index": int(old["index"]),
            "ok": bool(old["ok"]),
            "error": old.get("error"),
            "cache": "cold",
            "prompt_tokens": old.get("prompt_tokens"),
            "completion_tokens": old.get("completion_tokens"),
            "ttft_s": old.get("ttft_s"),
            "e2e_s": old.get("e2e_s"),
            "decode_tok_s": None,
            "tpot_s": None,
            "chunks": int(old.get("chunks") or 0),
            "chunk_gap_p50_s": None,
            "chunk_gap_max_s": None,
            "t_start": float(old["t_start"]),
        }
    if kind == "cell":
        acceptance = None
        if old.get("drafts"):
            acceptance = {
                "drafts": int(old["drafts"]),
                "draft_tokens": int(old.get("draft_tokens") or 0),
                "accepted": int(old.get("accepted") or 0),
                "acceptance_length": float(old.get("accept_len") or 1.0),
                "acceptance_rate": float(old.get("accept_rate") or 0.0),
                "per_position": [],
                "source": "v0",
            }
        return base | {
            "requests": int(old["requests"]),
            "failed": int(old.get("failed") or 0),
            "wall_s": float(old["wall_s"]),
            "output_tokens": int(old["output_tokens"]),
            "output_tok_s": float(old["tok_s"]),
            "ttft_p50_s": old.get("ttft_p50_s"),
            "e2e_p50_s": old.get("e2e_p50_s"),
            "acceptance": acceptance,
            "flags": [],
            "void": False,
        }
    raise TailpodError(f"v0 row has unknown type {kind!r}")


RUN_STEPS: dict[int, Callable[[dict[str, Any]], dict[str, Any]]] = {0: _run_v0_to_v1}
ROW_STEPS: dict[int, Callable[[dict[str, Any]], dict[str, Any]]] = {0: _row_v0_to_v1}


def _migrate(
    data: dict[str, Any], steps: dict[int, Callable[[dict[str, Any]], dict[str, Any]]], what: str
) -> dict[str, Any]:
    version = version_of(data)
    if version > SCHEMA_VERSION:
        raise TailpodError(
            f"{what} has schema_version {version}; this tailpod reads up to {SCHEMA_VERSION}",
            hint="upgrade tailpod to read newer results",
        )
    while version < SCHEMA_VERSION:
        data = steps[version](data)
        version = version_of(data)
    return data


def migrate_run_json(data: dict[str, Any]) -> dict[str, Any]:
    """run.json of any known version -> the current version's dict."""
    return _migrate(data, RUN_STEPS, "run.json")


def migrate_row(data: dict[str, Any]) -> dict[str, Any]:
    """One rows.jsonl object of any known version -> the current version's dict."""
    return _migrate(data, ROW_STEPS, "row")
