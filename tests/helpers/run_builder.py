"""Builders for constructed runs with known answers, shared by tests/unit/results and tests/unit/measure.

A helper module of its own, not a conftest: test files import it by its full name
(`from tests.helpers.run_builder import build_run`), which stays unambiguous whichever test
directories one pytest session collects (two conftest.py files share the bare name `conftest`).
"""

from __future__ import annotations

import re
from typing import Any

from tailpod.results.io import Run
from tailpod.results.schema import (
    Acceptance,
    ArmRecord,
    CellRow,
    EngineRef,
    Gate,
    ImageRef,
    Plan,
    PodDescription,
    RequestRow,
    RunMeta,
    Startup,
)

Series = dict[str, dict[int, list[float]]]


def _k(label: str) -> int:
    m = re.search(r"-k(\d+)$", label)
    return int(m.group(1)) if m else 0


def build_run(
    tput: Series,
    *,
    latency: Series | None = None,
    decode: Series | None = None,
    run_id: str = "run-a",
    measured_from: str = "pod",
    price: float | None = 2.0,
    facts: dict[str, dict[str, Any]] | None = None,
    void: dict[str, str] | None = None,
    acceptance: dict[str, tuple[int, int, int]] | None = None,
    ttft: dict[str, dict[str, list[float]]] | None = None,
    engine_version: str | None = "0.32.0",
    model: str = "tiny/model",
    checkpoints: dict[str, str] | None = None,
    argv: dict[str, list[str]] | None = None,
) -> Run:
    """A run whose cells carry exactly the given per-rep throughputs (wall 100 s each)."""
    facts = facts or {}
    void = void or {}
    arms = []
    for label in tput:
        k = _k(label)
        arms.append(
            ArmRecord(
                label=label,
                engine_config={
                    "engine": "vllm",
                    "model": (checkpoints or {}).get(label, model),
                    "spec": {"k": k, "method": "mtp" if k else None, "draft_model": None},
                },
                argv=(argv or {}).get(
                    label, ["python", "-m", "vllm.entrypoints.openai.api_server"]
                ),
                startup=Startup(engine="vllm", facts=facts.get(label, {}), lines=["INFO raw line"]),
                gate=(
                    Gate(
                        status="fail",
                        method="token_ids",
                        first_mismatch={"prompt": 1, "position": 17},
                        prompts=6,
                    )
                    if label in void
                    else Gate(status="pass", method="token_ids", prompts=6)
                )
                if k
                else None,
                void=label in void,
                void_reason=void.get(label),
            )
        )
    concs = sorted({c for per in tput.values() for c in per})
    reps = max(len(v) for per in tput.values() for v in per.values())
    meta = RunMeta(
        run_id=run_id,
        tailpod_version="0.1.0",
        created_at="2026-11-29T10:00:00+00:00",
        provider="local",
        pod=PodDescription(gpu=None, gpu_count=None, price_per_hr=price),
        measured_from=measured_from,
        image=ImageRef(ref="img", digest="sha256:abc"),
        model=model,
        engine=EngineRef(name="vllm", version=engine_version),
        plan=Plan(
            arms=list(tput),
            concurrency=concs,
            reps=reps,
            max_tokens=64,
            prompt_classes=["prose"],
            interleave_arms=False,
        ),
        arms=arms,
    )
    cells, requests = [], []
    for label, per in tput.items():
        for c, values in per.items():
            for rep, v in enumerate(values):
                lat = (latency or {}).get(label, {}).get(c)
                dec = (decode or {}).get(label, {}).get(c)
                acc = None
                if acceptance and label in acceptance:
                    drafts, dtoks, accepted = acceptance[label]
                    acc = Acceptance(
                        drafts=drafts,
                        draft_tokens=dtoks,
                        accepted=accepted,
                        acceptance_length=1 + accepted / drafts,
                        acceptance_rate=accepted / dtoks,
                        per_position=[0.8, 0.5][: _k(label)],
                        source="vllm_metrics",
                    )
                # the keys every row of the cell starts with (its identity)
                head: dict[str, Any] = {
                    "run_id": run_id, "arm": label, "concurrency": c, "rep": rep,
                    "prompt_class": "prose", "cell": f"{label}|c{c}|r{rep}|prose",
                }  # fmt: skip
                cells.append(
                    CellRow(
                        **head,
                        requests=max(4, c),
                        failed=0,
                        wall_s=100.0,
                        output_tokens=round(v * 100),
                        output_tok_s=v,
                        e2e_p50_s=lat[rep] if lat else 1.0 * c,
                        ttft_p50_s=0.1,
                        decode_tok_s_p50=dec[rep] if dec else v / c,
                        tpot_p50_s=0.01,
                        client_cpu_s=1.0,
                        acceptance=acc,
                        measured_from=measured_from,
                        void=False,
                    )
                )
                for cache, vals in ((ttft or {}).get(label) or {}).items():
                    for i, t in enumerate(vals):
                        requests.append(
                            RequestRow(
                                **head,
                                index=i,
                                ok=True,
                                cache=cache,
                                completion_tokens=64,
                                ttft_s=t,
                                e2e_s=t + 1.0,
                                t_start=1000.0 + i,
                                measured_from=measured_from,
                            )
                        )
    return Run(meta=meta, cells=cells, requests=requests)

