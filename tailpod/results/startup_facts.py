"""An arm's startup facts (what the engine's log said, run.json `arms[].facts`) read as numbers:
weight size and the sizes of KV and state caches. Several sections read them."""

from __future__ import annotations

import re
from typing import Any

GIB_TO_GB = 1.073741824
_CACHE_FACT = re.compile(r"(kv|cache|state|mamba|ssm|conv).*_(gb|gib)$")


def num(value: Any) -> float | None:
    """A fact as a number ("1,024" reads 1024); None for booleans and anything unparsable."""
    if value is None or isinstance(value, bool):
        return None
    try:
        return float(str(value).replace(",", ""))
    except ValueError:
        return None


def weights_gb(facts: dict[str, Any]) -> float | None:
    """Target weight size from startup facts, in GB (vLLM reports GiB)."""
    if num(facts.get("weights_gb")) is not None:
        return num(facts.get("weights_gb"))
    gib = num(facts.get("weights_gib"))
    return gib * GIB_TO_GB if gib is not None else None


def cache_facts(facts: dict[str, Any]) -> dict[str, float]:
    """Startup facts that size KV or state caches (traffic a weight format does not touch)."""
    out = {}
    for key, value in facts.items():
        n = num(value)
        if n is not None and _CACHE_FACT.search(key) and "weight" not in key:
            out[key] = n
    return out
