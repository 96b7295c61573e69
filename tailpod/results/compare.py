"""Put several runs' analyses side by side: ratios to the first run, and warnings when the runs
differ in something other than what is being compared (engine version, image, model, prompts)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from tailpod.results.analysis import bytes_model
from tailpod.results.fingerprint import check_fingerprints
from tailpod.results.io import STAMP

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
    return warnings


def _index(analysis: dict[str, Any], section: str) -> dict[tuple[str, int], dict[str, Any]]:
    return {(e["arm"], e["concurrency"]): e for e in analysis[section]}


def _void(analysis: dict[str, Any]) -> dict[str, str]:
    return {a["label"]: a["void_reason"] or "void" for a in analysis["arms"] if a["void"]}


def _ratio(values: Sequence[float | None]) -> list[float | None]:
    base = values[0]
    return [None if (v is None or not base) else v / base for v in values]


def compare_analyses(analyses: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Side-by-side comparison of ≥2 analyses; ratios are run_i / run_0."""
    keys: list[tuple[str, int]] = []
    for an in analyses:
        for c in an["cells"]:
            if (c["arm"], c["concurrency"]) not in keys:
                keys.append((c["arm"], c["concurrency"]))
    keys.sort(key=lambda k: (k[0] != "plain", k[0], k[1]))
    voids = [_void(a) for a in analyses]
    cells = [_index(a, "cells") for a in analyses]
    speed = [{(s["arm"], s["concurrency"]): s for s in a["speedup"]} for a in analyses]
    costs = [_index(a, "cost") for a in analyses]

    def median(
        idx: dict[tuple[str, int], dict[str, Any]], key: tuple[str, int], metric: str
    ) -> float | None:
        entry = idx.get(key)
        sp = entry.get(metric) if entry else None
        return sp["median"] if sp else None

    throughput, decode, speedup, cost = [], [], [], []
    for key in keys:
        void_in = [v.get(key[0]) for v in voids]
        any_void = any(void_in)
        vals = [median(ci, key, "output_tok_s") for ci in cells]
        throughput.append(
            {
                "arm": key[0],
                "concurrency": key[1],
                "values": vals,
                "void": void_in,
                "ratios": [None] * len(vals) if any_void else _ratio(vals),
            }
        )
        dvals = [median(ci, key, "decode_tok_s_p50") for ci in cells]
        decode.append(
            {
                "arm": key[0],
                "concurrency": key[1],
                "values": dvals,
                "void": void_in,
                "ratios": [None] * len(dvals) if any_void else _ratio(dvals),
            }
        )
        spd = []
        for si in speed:
            s = si.get(key)
            spd.append(s["throughput"]["speedup"] if s and s.get("throughput") else None)
        if any(v is not None for v in spd) or any_void:
            speedup.append({"arm": key[0], "concurrency": key[1], "values": spd, "void": void_in})
        cvals = [(ci.get(key) or {}).get("usd_per_1m") for ci in costs]
        cost.append(
            {
                "arm": key[0],
                "concurrency": key[1],
                "usd_per_1m": cvals,
                "void": void_in,
                "ratios": [None] * len(cvals) if any_void else _ratio(cvals),
            }
        )

    arms = list(dict.fromkeys(k[0] for k in keys))
    crossover = [
        {
            "arm": arm,
            "per_run": [
                next(
                    (
                        {"status": c["status"], "concurrency": c.get("concurrency")}
                        for c in a["crossover"]
                        if c["arm"] == arm
                    ),
                    None,
                )
                for a in analyses
            ],
        }
        for arm in arms
        if any(c["arm"] == arm for a in analyses for c in a["crossover"])
    ]
    knee = [
        {
            "arm": arm,
            "per_run": [
                next(
                    (
                        {
                            "status": k["status"],
                            "concurrency": k.get("concurrency"),
                            "throughput": k.get("throughput"),
                        }
                        for k in a["knee"]
                        if k["arm"] == arm
                    ),
                    None,
                )
                for a in analyses
            ],
        }
        for arm in arms
    ]
    capacity = []
    for arm in arms:
        rows = [next((c for c in a["capacity"] if c["arm"] == arm), None) for a in analyses]
        capacity.append(
            {
                "arm": arm,
                "kv_tokens": [r["kv_tokens"] if r else None for r in rows],
                "max_running_requests": [r["max_running_requests"] if r else None for r in rows],
                "max_concurrency": [r["max_concurrency"] if r else None for r in rows],
            }
        )

    bytes_rows = []
    base = analyses[0]
    for other in analyses[1:]:
        if other["model"] == base["model"]:
            continue
        pa = next((a for a in base["arms"] if a["k"] == 0 and not a["void"]), None)
        pb = next((a for a in other["arms"] if a["k"] == 0 and not a["void"]), None)
        if not pa or not pb:
            continue
        ca, cb = _index(base, "cells"), _index(other, "cells")
        common = sorted(
            {c for (arm, c) in ca if arm == pa["label"]}
            & {c for (arm, c) in cb if arm == pb["label"]}
        )
        da = db = None
        conc = common[0] if common else None
        if conc is not None:
            for metric in ("decode_tok_s_p50", "output_tok_s"):
                sa, sb = ca[(pa["label"], conc)].get(metric), cb[(pb["label"], conc)].get(metric)
                if sa and sb:
                    da, db = sa["median"], sb["median"]
                    break
        caches = {f"{base['run_id']}.{k}": v for k, v in (pa.get("cache_facts") or {}).items()}
        caches |= {f"{other['run_id']}.{k}": v for k, v in (pb.get("cache_facts") or {}).items()}
        bytes_rows.append(
            {
                "run_a": base["run_id"],
                "checkpoint_a": base["model"],
                "arm_a": pa["label"],
                "run_b": other["run_id"],
                "checkpoint_b": other["model"],
                "arm_b": pb["label"],
                "concurrency": conc,
                **bytes_model(pa.get("weights_gb"), pb.get("weights_gb"), da, db, caches),
            }
        )

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
        "throughput": throughput,
        "decode": decode,
        "speedup": speedup,
        "cost": cost,
        "crossover": crossover,
        "knee": knee,
        "capacity": capacity,
        "bytes_model": bytes_rows,
        "fingerprint": check_fingerprints([a["fingerprint"] for a in analyses])
        if all(a.get("fingerprint") for a in analyses)
        else {"checks": [], "flags": []},
    }
