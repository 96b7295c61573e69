"""`tailpod demo`: the whole lifecycle with no account, on this machine, with a real engine.

By default it runs the cloud path against the sandbox cloud: rent on the emulated RunPod (the first
GPU choice has no capacity, so the fallback is visible), the tailnet registration, real SSH into the
pod's sshd, the real CPU vLLM engine started there by the pod agent, the probe copied over SSH
and run against 127.0.0.1, and `down` with the billing-stopped proof. `--local` skips the cloud.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import typer

from tailpod.cli.common import console, handle_errors, ledger_for, print_json
from tailpod.cli.demo_world import DEMO_GPUS, demo_model, sandbox_settings
from tailpod.cli.pods import requirements_on_refusal, startup_progress
from tailpod.cli.remote import evidence_table
from tailpod.config import Settings, load_settings
from tailpod.engines.base import EngineConfig, SpecArm
from tailpod.errors import ConfigError
from tailpod.ledger import Ledger, PodRecord
from tailpod.measure.plan import SweepPlan, spec_arms
from tailpod.measure.sweep import RunContext, RunDirectory, SweepHost, run_sweep
from tailpod.results.hardware import check_pod


def run_benchmark(
    settings: Settings,
    record: PodRecord,
    host: SweepHost,
    cfg: EngineConfig,
    ks: list[int],
    concurrency: list[int],
    max_tokens: int,
) -> Path:
    from tailpod.cli.benchmark import summary_table
    from tailpod.results.report import write_report

    plan = SweepPlan(
        arms=spec_arms(cfg, ks, "ngram", None),
        concurrency=concurrency,
        reps=1,
        max_tokens=max_tokens,
        extend_k=False,
    )
    run_dir = RunDirectory(settings.results_dir / record.run_tag)
    ctx = RunContext.for_pod(record, record.run_tag, cfg)
    run_sweep(plan, run_dir, host, ctx, log=lambda msg: console.print(msg))
    console.print(summary_table(run_dir.path, "demo benchmark (tok/s from server usage)"))
    console.print(f"report: {write_report([run_dir.path])} (and its plots beside it)")
    return run_dir.path


def lifecycle(settings: Settings, ledger: Ledger, cfg: EngineConfig, bench: dict[str, Any],
              what: str) -> Path:
    """up → benchmark on the pod → proven down, through the pod kind of `settings.provider`: the
    same steps whether the pod is this machine or one rented on the sandbox cloud."""
    from tailpod.cli import remote
    from tailpod.measure.hosts import sweep_host
    from tailpod.pods.base import UpOptions
    from tailpod.pods.kinds import kind_for

    kind = kind_for(settings.provider)
    with startup_progress(f"up: {what}") as update, requirements_on_refusal(settings.provider):
        result = kind.up(settings, cfg, ledger, update, UpOptions())
    record = result.record
    remote.print_fallback_warning(result.info)
    # a pod reached over SSH (rented on the sandbox cloud): its rental, and an endpoint that
    # listens on the tailnet only
    where = "" if not record.ssh else (
        f": {record.gpu} at ${record.price_per_hr or 0:.2f}/hr, image {record.image}")
    console.print(f"[green]up[/] {record.run_tag}{where}, engine at {record.endpoint}"
                  + (" (tailnet only)" if record.ssh else ""))
    stamp = check_pod(record).get("stamp")
    if stamp:
        console.print(f"[bold red]{stamp}[/]")
    try:
        with startup_progress("benchmark beside the engine") as update:
            host = sweep_host(settings, ledger, record, update)
            try:
                run_dir = run_benchmark(settings, record, host, cfg, **bench)
            finally:
                host.close()
    finally:
        current = ledger.get(record.run_tag) or record
        evidence = kind.down(settings, ledger, current)  # raises unless proven
        console.print(evidence_table(evidence, f"down {record.run_tag}"))
    return run_dir


def local_demo(
    settings: Settings, ledger: Ledger, cfg: EngineConfig, bench: dict[str, Any]
) -> Path:
    run_dir = lifecycle(settings, ledger, cfg, bench, "starting vLLM locally")
    console.print(f"results and billing proof: {run_dir}")
    return run_dir


def cloud_demo(
    settings: Settings, ledger: Ledger, cfg: EngineConfig, bench: dict[str, Any]
) -> Path:
    with sandbox_settings(settings) as (cloud, sandbox):
        # The first choice has no capacity right now: the fallback must be visible.
        sandbox.add_fault("capacity", gpu=DEMO_GPUS[0])
        console.print(f"sandbox cloud: RunPod {sandbox.runpod_url}, admin {sandbox.admin_url}")
        run_dir = lifecycle(cloud, ledger, cfg, bench,
                            "rent, join the tailnet, start vLLM over SSH")
        meter = sandbox.meter()
        console.print(
            f"sandbox meter: {len(meter['billing_now'])} resources billing; "
            f"${meter.get('total_accrued_usd', 0):.4f} accrued in total"
        )
        console.print(f"results and billing proof: {run_dir}")
    return run_dir


def html_report(run_dir: Path | None) -> Path | None:
    """The demo's run as one HTML page (report.html beside report.md), whose path is the demo's
    last line; None when the demo left no run directory of its own (--matrix)."""
    if run_dir is None or not (run_dir / "run.json").is_file():
        return None
    from tailpod.results.html import write_run_html

    return write_run_html([run_dir])


def register(app: typer.Typer) -> None:
    @app.command()
    @handle_errors
    def demo(
        local: bool = typer.Option(False, "--local", help="Skip the sandbox cloud: this machine."),
        matrix: bool = typer.Option(
            False, "--matrix", help="The card matrix: sandbox cards on both emulated clouds, "
            "in parallel, a CPU engine on each pod, one report ranking them by $/Mtok."
        ),
        lanes: bool = typer.Option(
            False, "--lanes", help="From the sweep to a deployment: the sweep on a sandbox pod, "
            "decide, two lanes behind HAProxy on the pod measured beside the static arms, and "
            "down (decision.json and lanes.json in the run directory)."
        ),
        cards: int = typer.Option(2, min=2, max=3, help="Sandbox cards for --matrix."),
        port: int = typer.Option(8765, help="Port for the demo engine."),
        spec_k: str = typer.Option("0,2", help="Arms to compare (0 = plain; ngram speculation)."),
        concurrency: str = typer.Option("1,2,4", help="Concurrency levels."),
        max_tokens: int = typer.Option(64, help="Output tokens per request."),
        json_out: bool = typer.Option(False, "--json", help="Print where the results are as "
                                      "JSON (the walkthrough goes to stderr)."),
    ) -> None:
        """The whole lifecycle with no account: up, benchmark on the pod, down with the proof.

        Runs the real CPU vLLM engine on a tiny checkpoint built offline, in a few minutes on
        2 cores, and leaves nothing running.
        """
        from tailpod.cli.benchmark import int_list

        t0 = time.time()
        settings = load_settings(overrides={"provider": "local", "engine": "vllm", "port": port})
        ledger = ledger_for(settings)
        if lanes and (local or matrix):
            raise ConfigError("--lanes runs on the sandbox cloud: not with --local or --matrix")
        where = "local provider" if local else "sandbox cloud (emulated RunPod + tailnet + SSH)"
        if lanes:
            where += ", sweep → decide → two lanes"
        if matrix:
            where = f"card matrix: {cards} sandbox cards on emulated RunPod and vast.ai"
        console.rule(f"tailpod demo: {where}, real vLLM (CPU) engine")
        model = demo_model(settings.home)
        console.print(f"checkpoint: {model}")
        cfg = EngineConfig(
            engine="vllm",
            model=str(model),
            served_name="tailpod",
            port=port,
            context_length=1024,
            enforce_eager=True,
            spec=SpecArm(),
        )
        bench = {
            "ks": int_list(spec_k, "--spec-k"),
            "concurrency": int_list(concurrency, "--concurrency"),
            "max_tokens": max_tokens,
        }
        run_dir: Path | None = None
        if matrix:
            from tailpod.cli.demo_matrix import matrix_demo

            matrix_demo(settings, cfg, bench, cards)
        elif lanes:
            from tailpod.cli.demo_lanes import lanes_demo

            run_dir = lanes_demo(settings, ledger, cfg, bench)
        else:
            run_dir = (local_demo if local else cloud_demo)(settings, ledger, cfg, bench)
        page = html_report(run_dir)
        console.print(f"[green]demo done[/] in {time.time() - t0:.0f} s; nothing left running.")
        if page is not None:
            console.print(f"HTML report (opens offline): {page}", markup=False, highlight=False,
                          soft_wrap=True)
        if json_out:
            mode = "matrix" if matrix else "lanes" if lanes else "local" if local else "cloud"
            print_json({"ok": True, "mode": mode,
                        "results": str(run_dir) if run_dir else str(settings.results_dir),
                        "report_html": str(page) if page else None,
                        "elapsed_s": round(time.time() - t0, 1), "left_running": 0})
