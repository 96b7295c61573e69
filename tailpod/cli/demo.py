"""`tailpod demo`: the whole lifecycle with no account, on this machine, with a real engine."""

from __future__ import annotations

import time
from pathlib import Path

import typer

from tailpod.bootstrap.engines.base import EngineConfig, SpecArm
from tailpod.cli.common import console, handle_errors, ledger_for, settings_from
from tailpod.cli.lifecycle import evidence_table, startup_progress, write_proof
from tailpod.errors import BillingNotProven
from tailpod.probes.plan import SweepPlan, spec_arms
from tailpod.probes.sweep import RunContext, RunDirectory, run_sweep


def demo_models(home: Path) -> dict[str, Path]:
    """The tiny checkpoints, built once and reused (building takes a few seconds)."""
    from tailpod.bootstrap.tiny_checkpoint import build_checkpoint, is_checkpoint

    models = {}
    for kind in ("target",):
        path = home / "models" / f"tiny-{kind}"
        if not is_checkpoint(path):
            build_checkpoint(path, kind)
        models[kind] = path
    return models


def register(app: typer.Typer) -> None:
    @app.command()
    @handle_errors
    def demo(
        port: int = typer.Option(8765, help="Port for the demo engine."),
        spec_k: str = typer.Option("0,2", help="Arms to compare (0 = plain; ngram speculation)."),
        concurrency: str = typer.Option("1,2,4", help="Concurrency levels."),
        max_tokens: int = typer.Option(64, help="Output tokens per request."),
    ) -> None:
        """Build a tiny checkpoint, `up` the real CPU vLLM engine, benchmark it, `down`.

        Runs in a few minutes on 2 cores and leaves nothing running.
        """
        from tailpod.cli.benchmark import int_list, summary_table
        from tailpod.probes.hosts import LocalSweepHost
        from tailpod.provision.local.lifecycle import down_local, up_local

        t0 = time.time()
        settings = settings_from(provider="local", engine="vllm", port=port)
        ledger = ledger_for(settings)
        console.rule("tailpod demo: local provider, real vLLM (CPU) engine")
        models = demo_models(settings.home)
        console.print(f"checkpoint: {models['target']}")
        cfg = EngineConfig(
            engine="vllm",
            model=str(models["target"]),
            served_name="tailpod",
            port=port,
            context_length=1024,
            enforce_eager=True,
            spec=SpecArm(),
        )
        with startup_progress("up: starting vLLM") as update:
            record = up_local(settings, cfg, ledger, update)
        facts = record.extra["startup"]["facts"]
        console.print(
            f"[green]up[/] {record.run_tag} at {record.endpoint} "
            f"in {record.extra['startup_s']:.0f} s; KV cache {facts.get('kv_tokens')} tokens"
        )
        try:
            plan = SweepPlan(
                arms=spec_arms(cfg, int_list(spec_k, "--spec-k"), "ngram", None),
                concurrency=int_list(concurrency, "--concurrency"),
                reps=1,
                max_tokens=max_tokens,
                extend_k=False,
            )
            run_dir = RunDirectory(settings.results_dir / record.run_tag)
            ctx = RunContext(
                run_id=record.run_tag,
                run_tag=record.run_tag,
                provider="local",
                model=cfg.model,
                engine="vllm",
                gpu=record.gpu,
                gpu_count=0,
                price_per_hr=0.0,
            )
            with startup_progress("benchmark") as update:
                host = LocalSweepHost(settings, ledger, record, update)
                run_sweep(plan, run_dir, host, ctx, log=lambda msg: console.print(msg))
            console.print(summary_table(run_dir.path, "demo benchmark (tok/s from server usage)"))
        finally:
            current = ledger.get(record.run_tag)
            assert current is not None
            evidence = down_local(settings, current, ledger)
            proof = write_proof(settings, current, evidence)
            console.print(evidence_table(evidence, f"down {record.run_tag}"))
        if not evidence.proven:
            raise BillingNotProven(
                "the demo engine is still running: " + "; ".join(evidence.still_billing)
            )
        console.print(f"results and proof: {run_dir.path} ({proof.name})")
        console.print(f"[green]demo done[/] in {time.time() - t0:.0f} s; nothing left running.")
