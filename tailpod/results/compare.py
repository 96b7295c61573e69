"""Put several runs' analyses side by side: ratios to the first run, and warnings when the runs
differ in something other than what is being compared (engine version, image, model, prompts)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from tailpod.results.io import STAMP
from tailpod.results.section import CompareContext
from tailpod.results.sections import in_compare

# Things that, when they differ, make a ratio mean something other than "this pod vs that pod".
PROVENANCE_CHECKS = (
    ("engine", "engine"),
    ("engine_version", "engine version"),
    ("image_digest", "image digest"),
    ("model", "model"),
)


def _plan_prompts(analysis: dict[str, Any]) -> dict[str, Any]:
    plan = analysis.get("plan") or {}
    keys = {k: v for k, v in plan.items() if "prompt" in k or k == "max_tokens"}
    return keys


def provenance_warnings(analyses: Sequence[dict[str, Any]]) -> list[str]:
    warnings = []
    first = analyses[0]
    for key, name in PROVENANCE_CHECKS:
        values = [a.get(key) for a in analyses]
        if len({repr(v) for v in values}) > 1:
            shown = ", ".join(f"{a['run_id']}={a.get(key)!s}" for a in analyses)
            warnings.append(f"{name} differs: {shown}")
    base_prompts = _plan_prompts(first)
    for a in analyses[1:]:
        if _plan_prompts(a) != base_prompts:
            warnings.append(
                f"prompts differ between {first['run_id']} and {a['run_id']}: "
                f"{base_prompts} vs {_plan_prompts(a)}"
            )
    for a in analyses:
        if a.get("stamp"):
            warnings.append(f"{a['run_id']} was measured off-pod: {STAMP}")
        if (a.get("hardware") or {}).get("stamp"):
            warnings.append(f"{a['run_id']}: {a['hardware']['stamp']}")
    return warnings


def compare_analyses(analyses: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Side-by-side comparison of ≥2 analyses; ratios are run_i / run_0. After the runs' own
    fields, one part per compared section (results/sections/), in compare rank."""
    cc = CompareContext.of(analyses)
    parts: dict[str, Any] = {}
    for section in in_compare():
        assert section.compare is not None
        parts |= section.compare(cc)
    base = analyses[0]
    stamp = STAMP if any(a.get("stamp") for a in analyses) else None
    return {
        "runs": [
            {
                k: a.get(k)
                for k in (
                    "run_id",
                    "run_dir",
                    "gpu",
                    "gpu_count",
                    "provider",
                    "engine",
                    "engine_version",
                    "image_digest",
                    "model",
                    "price_per_hr",
                    "measured_from",
                    "stamp",
                )
            }
            for a in analyses
        ],
        "baseline_run": base["run_id"],
        "ratio": "run_i / run_0",
        "stamp": stamp,
        "warnings": provenance_warnings(analyses),
        # each run's emulated-provider or wrong-card stamp (results/hardware.py), by run id: the
        # comparison's header names them as report.md's header does
        "hardware_stamps": {a["run_id"]: a["hardware"]["stamp"] for a in analyses
                            if (a.get("hardware") or {}).get("stamp")},
        **parts,
    }
