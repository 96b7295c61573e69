"""Prompt classes and the gate prompts: package data under prompts/, read with pkgutil.get_data
so they load the same from the source tree and from inside the zipapp.
"""

from __future__ import annotations

import json
import os
import pkgutil
from typing import Any

from .basics import ProbeError

# The class files under prompts/ (package data: a zipapp cannot be listed, so they are named).
PROMPT_CLASS_FILES = ("code.json", "prose.json", "structured.json", "tools.json")


def _package_json(name: str) -> Any:
    data = pkgutil.get_data(__package__ or "", "prompts/" + name)
    if data is None:
        raise ProbeError(f"package data prompts/{name} is missing")
    return json.loads(data.decode("utf-8"))


def builtin_prompt_classes() -> dict[str, dict[str, Any]]:
    """The prompt classes shipped with the agent, by class name (sorted by file name, as a
    prompts_dir listing is)."""
    classes: dict[str, dict[str, Any]] = {}
    for fname in PROMPT_CLASS_FILES:
        data = _package_json(fname)
        classes[str(data.get("name") or fname[:-5])] = data
    return classes


def gate_prompts() -> list[dict[str, Any]]:
    """Fixed prompts for the token-identity gate: short, varied, and deterministic under greedy."""
    return list(_package_json("gate.json"))


def load_prompt_classes(
    prompts_dir: str | None, names: list[str] | None
) -> dict[str, dict[str, Any]]:
    """Prompt classes from `prompts_dir` (one JSON per class), else the built-in copies."""
    classes: dict[str, dict[str, Any]] = {}
    if prompts_dir and os.path.isdir(prompts_dir):
        for fname in sorted(os.listdir(prompts_dir)):
            if not fname.endswith(".json"):
                continue
            with open(os.path.join(prompts_dir, fname), encoding="utf-8") as fh:
                data = json.load(fh)
            if not isinstance(data, dict) or not data.get("prompts"):
                raise ProbeError(f"prompt file {fname} has no prompts")
            classes[str(data.get("name") or fname[:-5])] = data
    elif prompts_dir:
        raise ProbeError(f"prompts directory {prompts_dir} does not exist")
    else:
        classes = builtin_prompt_classes()
    if names:
        missing = [n for n in names if n not in classes]
        if missing:
            raise ProbeError(
                "unknown prompt class {} (have: {})".format(", ".join(missing), ", ".join(classes))
            )
        classes = {n: classes[n] for n in names}
    return classes


def prompt_text(messages: list[dict[str, Any]]) -> str:
    return "\n".join(str(m.get("content", "")) for m in messages)
