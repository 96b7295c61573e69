"""`tailpod demo --matrix`: the card matrix on the sandbox clouds, with the real CPU engine on each pod.

Sandbox cards at different emulated prices on both emulated clouds (RunPod and vast.ai) are rented
in parallel, each pod joins the emulated tailnet, serves the tiny checkpoint with the CPU build of
vLLM and runs the same sweep on the pod; every pod is torn down with its billing proof and the
matrix report ranks the cards by $/Mtok. The numbers are a CPU engine's at emulated prices: each
run's hardware check (results/hardware.py) says so, and the matrix report and plot carry it.
"""

from __future__ import annotations

from typing import Any

from tailpod.cli.common import console
from tailpod.config import Settings
from tailpod.engines.base import EngineConfig
from tailpod.ledger import Ledger

# Three sandbox cards, three emulated prices, both clouds (docs/sandbox.md lists the catalogs).
DEMO_CARDS = ("runpod:NVIDIA A40", "vastai:RTX 4090", "runpod:NVIDIA GeForce RTX 4090")
DEMO_BUDGET_USD = 2.0


def pods_overlapped(ledger: Ledger, run_tags: list[str]) -> bool:
    """Whether every pod's billing lifetime (create request to proof) overlapped the others'."""
    spans = []
    for tag in run_tags:
        record = ledger.get(tag)
        if record is None:
            continue
        times = {e.get("event"): e["t"] for e in record.events}
        start = times.get("creating", record.created_at)
        spans.append((start, times.get("billing-proven", record.updated_at)))
    return len(spans) > 1 and max(s for s, _ in spans) < min(e for _, e in spans)


def matrix_demo(settings: Settings, cfg: EngineConfig, bench: dict[str, Any], cards: int) -> None:
    from tailpod.cli.demo_world import sandbox_settings
    from tailpod.cli.matrix import finish, run_matrix
    from tailpod.measure.matrix_run import CloudSteps, CostModel, SweepSpec
    from tailpod.results.matrix import parse_cards

    chosen = parse_cards(DEMO_CARDS[:cards])
    sweep = SweepSpec(ks=tuple(sorted(set(bench["ks"]))), spec_method="ngram",
                      concurrency=tuple(bench["concurrency"]), reps=1,
                      max_tokens=bench["max_tokens"], extend_k=False)
    with sandbox_settings(settings) as (cloud, sandbox):
        console.print(f"sandbox clouds: RunPod {sandbox.runpod_url}, vast.ai {sandbox.vast_url}; "
                      f"{len(chosen)} cards in parallel, each with its own CPU engine")
        run = run_matrix(cloud, cards=chosen, sweep=sweep,
                         cost=CostModel(setup_min=10.0, restart_min=2.0, cell_min=1.0),
                         budget=DEMO_BUDGET_USD, parallel=len(chosen), base=cfg,
                         steps=CloudSteps(use_tailnet=True),
                         # the sandbox pods share this machine: one engine port each
                         port_for=lambda index: cfg.port + index)
        assert run is not None
        tags = [t for entry in run.state.data["cards"].values() for t in entry["pods"]]
        overlapped = pods_overlapped(Ledger(cloud.state_dir), tags)
        console.print(f"pod lifetimes overlapped in the ledger: {'yes' if overlapped else 'NO'}")
        meter = sandbox.meter()
        console.print(
            f"sandbox meter: {len(meter['billing_now'])} resources billing; "
            f"${meter.get('total_accrued_usd', 0):.4f} accrued in total"
        )
        finish(run)
