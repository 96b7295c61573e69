"""Whole rows of results format v1 (tailpod/results/schema.py) for fake sweep hosts: a fake
names what its test is about and these fill the rest, so what the sweep writes is a row the
reader's model accepts (the sweep refuses any other: tailpod/measure/sweep.py append_rows)."""

from __future__ import annotations

from typing import Any

_HEAD: dict[str, Any] = {"schema_version": 1, "run_id": "r", "arm": "plain", "concurrency": 1,
                         "rep": 0, "prompt_class": "prose"}


def _head(fields: dict[str, Any]) -> dict[str, Any]:
    head = _HEAD | {k: v for k, v in fields.items() if k in _HEAD}
    head.setdefault("cell", f"{head['arm']}|c{head['concurrency']}|r{head['rep']}|"
                            f"{head['prompt_class']}")
    return head


def request_row(**fields: Any) -> dict[str, Any]:
    return {"kind": "request", **_head(fields), "index": 0, "ok": True, "t_start": 0.0} | fields


def cell_row(**fields: Any) -> dict[str, Any]:
    return {"kind": "cell", **_head(fields), "requests": 1, "failed": 0, "wall_s": 1.0,
            "output_tokens": 0, "output_tok_s": 0.0} | fields
