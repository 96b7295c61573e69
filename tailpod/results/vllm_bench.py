"""`vllm bench serve --save-result` files as a tailpod run directory, so `report`, `compare`
(`--html`), `decide` and `export` read them as they read a sweep (docs/results.md, "Importing
vllm bench serve results"). The keys read are those vLLM's benchmark writes
(vllm/benchmarks/serve.py, `benchmark()`'s `result` and the `max_concurrency`, `model_id`, `date`
its caller adds).

Only what maps soundly is taken: one file is one rep of one closed-loop cell at its
`--max-concurrency`; a file without one (an open-loop `--request-rate` run with unbounded
concurrency) is refused, naming it. Where the client ran is not recorded, so the run is marked
measured off-pod (stamped, never quoted as the pod's own), and no token-identity gate ran, so every
arm is UNVERIFIED."""

from __future__ import annotations

import json
import math
from collections import Counter
from collections.abc import Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from tailpod import __version__
from tailpod.errors import ConfigError
from tailpod.results.io import Run
from tailpod.results.schema import (
    Acceptance,
    ArmRecord,
    CellRow,
    EngineRef,
    Plan,
    RunMeta,
)

UNVERIFIED = ("imported from `vllm bench serve`: no token-identity gate ran, nothing checked "
              "that the arm decodes what plain decode does")
# tailpod's cell field <- vLLM's result key (milliseconds; tailpod keeps seconds)
_LATENCIES = {
    "ttft_p50_s": "median_ttft_ms", "ttft_p90_s": "p90_ttft_ms", "ttft_p99_s": "p99_ttft_ms",
    "e2e_p50_s": "median_e2el_ms", "e2e_p90_s": "p90_e2el_ms", "e2e_p99_s": "p99_e2el_ms",
    "tpot_p50_s": "median_tpot_ms",
}  # fmt: skip


def _number(data: dict[str, Any], key: str, path: Path) -> float:
    value = data.get(key)
    if not isinstance(value, (int, float)) or isinstance(value, bool) or not math.isfinite(value):
        raise ConfigError(f"{path}: no number under {key!r}; not a `vllm bench serve "
                          "--save-result` file")
    return float(value)


def _acceptance(data: dict[str, Any]) -> Acceptance | None:
    keys = ("spec_decode_num_drafts", "spec_decode_draft_tokens", "spec_decode_accepted_tokens")
    if not all(isinstance(data.get(k), int) for k in keys) or not data[keys[0]] \
            or not data[keys[1]]:
        return None
    drafts, draft_tokens, accepted = (int(data[k]) for k in keys)
    return Acceptance(drafts=drafts, draft_tokens=draft_tokens, accepted=accepted,
                      acceptance_length=1 + accepted / drafts,
                      acceptance_rate=accepted / draft_tokens,
                      per_position=list(data.get("spec_decode_per_position_acceptance_rates")
                                        or []), source="vllm bench serve")


def read_vllm_bench(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ConfigError(f"{path}: not readable as JSON ({e})") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: not a `vllm bench serve --save-result` file (not an object)")
    conc = data.get("max_concurrency")
    if not isinstance(conc, int) or isinstance(conc, bool) or conc < 1:
        raise ConfigError(
            f"{path}: no --max-concurrency recorded (an open-loop run of unbounded concurrency): "
            "tailpod imports closed-loop runs only",
            hint="run `vllm bench serve` with --max-concurrency N (and --request-rate inf)")
    return data


def run_from_vllm_bench(paths: Sequence[Path], arm: str = "plain", run_id: str | None = None
                        ) -> Run:
    """The files as one run: one arm (a speculative one named `<method>-k<N>`, as tailpod names
    its arms), each file one rep of the cell at its max concurrency (reps numbered in the order
    given). Everything is checked before a run is built."""
    if not paths:
        raise ConfigError("no result files given")
    read = [(p, read_vllm_bench(p)) for p in paths]
    models = {str(d.get("model_id")) for _, d in read}
    if len(models) > 1:
        raise ConfigError(f"the files are of different models ({', '.join(sorted(models))}): "
                          "import each model as its own run")
    reps: Counter[int] = Counter()
    cells = []
    rid = run_id or f"vllm-bench-{paths[0].stem}"
    for path, d in read:
        conc = int(d["max_concurrency"])
        rep = reps[conc]
        reps[conc] += 1
        completed, failed = int(_number(d, "completed", path)), int(d.get("failed") or 0)
        wall = _number(d, "duration", path)
        out_tokens = int(_number(d, "total_output_tokens", path))
        latencies = {f: float(d[key]) / 1000.0 for f, key in _LATENCIES.items()
                     if isinstance(d.get(key), (int, float)) and math.isfinite(d[key])}
        row: dict[str, Any] = {
            "run_id": rid, "arm": arm, "concurrency": conc, "rep": rep,
            "prompt_class": "imported", "cell": f"{arm}|c{conc}|r{rep}|imported",
            "requests": completed + failed, "failed": failed, "wall_s": wall,
            "output_tokens": out_tokens, "output_tok_s": out_tokens / wall if wall > 0 else 0.0,
            "acceptance": _acceptance(d), "measured_from": "off-pod", **latencies,
        }
        cells.append(CellRow.model_validate(row))
    model = models.pop()
    arm_record = ArmRecord(
        label=arm, engine_config={"engine": "vllm", "model": model}, argv=[],
        unverified=None if arm == "plain" else UNVERIFIED)
    dates = sorted(str(d.get("date")) for _, d in read if d.get("date"))
    meta = RunMeta(
        run_id=rid, tailpod_version=__version__,
        created_at=_iso(dates[0]) if dates else datetime.now(timezone.utc).isoformat(),
        provider="imported", measured_from="off-pod", model=model,
        engine=EngineRef(name="vllm", version=None),
        plan=Plan(arms=[arm], concurrency=sorted(reps), reps=max(reps.values()),
                  max_tokens=None, prompt_classes=["imported"], interleave_arms=False),
        arms=[arm_record],
        notes=[f"imported from vllm bench serve: {', '.join(p.name for p in paths)}"],
    )
    return Run(meta=meta, cells=cells)


def _iso(date: str) -> str:
    """vLLM writes `date` as %Y%m%d-%H%M%S, local time of the client (zone unrecorded)."""
    try:
        return datetime.strptime(date, "%Y%m%d-%H%M%S").isoformat()
    except ValueError:
        return datetime.now(timezone.utc).isoformat()
