"""`tailpod demo`: the whole lifecycle with no account, on this machine, with a real engine.

By default it runs the cloud path against the sandbox cloud: rent on the emulated RunPod (the first
GPU choice has no capacity, so the fallback is visible), the tailnet registration, real SSH into the
pod's sshd, the real CPU vLLM engine started there by the on-pod runner, the probe copied over SSH
and run against 127.0.0.1, and `down` with the billing-stopped proof. `--local` skips the cloud.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import typer

from tailpod.bootstrap.engines.base import EngineConfig, SpecArm
from tailpod.cli.common import console, handle_errors, ledger_for
from tailpod.cli.lifecycle import requirements_on_refusal, startup_progress
from tailpod.cli.remote import evidence_table
from tailpod.config import Settings, load_settings
from tailpod.ledger import Ledger, PodRecord
from tailpod.probes.plan import SweepPlan, spec_arms
from tailpod.probes.sweep import RunContext, RunDirectory, SweepHost, run_sweep
from tailpod.results.hardware import check_pod

DEMO_IMAGE = "vllm/vllm-openai:v0.11.0"
DEMO_DIGEST = "sha256:" + "7a1" * 21 + "d"
DEMO_GPUS = ("NVIDIA H100 80GB HBM3", "NVIDIA A100 80GB PCIe")


def demo_model(home: Path) -> Path:
    """The tiny checkpoint, built once and reused (building takes a few seconds)."""
    from tailpod.bootstrap.tiny_checkpoint import build_checkpoint, is_checkpoint

    path = home / "models" / "tiny-target"
    if not is_checkpoint(path):
        build_checkpoint(path, "target")
    return path


def demo_ssh_key(home: Path) -> Path:
    """A key for the demo pods only, so the demo never needs the user's own."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    path = home / "demo" / "id_ed25519"
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        pem = Ed25519PrivateKey.generate().private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.OpenSSH,
            serialization.NoEncryption(),
        )
        path.touch(mode=0o600)
        path.write_bytes(pem)
    return path


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


def local_demo(
    settings: Settings, ledger: Ledger, cfg: EngineConfig, bench: dict[str, Any]
) -> None:
    from tailpod.probes.hosts import LocalSweepHost
    from tailpod.provision.local.lifecycle import down_local, up_local

    with startup_progress("up: starting vLLM locally") as update:
        record = up_local(settings, cfg, ledger, update)
    console.print(f"[green]up[/] {record.run_tag} at {record.endpoint}")
    try:
        with startup_progress("benchmark") as update:
            run_dir = run_benchmark(
                settings, record, LocalSweepHost(settings, ledger, record, update), cfg, **bench
            )
    finally:
        current = ledger.get(record.run_tag) or record
        evidence = down_local(settings, current, ledger)  # raises unless proven
        console.print(evidence_table(evidence, f"down {record.run_tag}"))
    console.print(f"results and billing proof: {run_dir}")


@contextmanager
def sandbox_settings(settings: Settings) -> Iterator[tuple[Settings, Any]]:
    """A sandbox cloud with sshd pods, the Tailscale emulator and a stand-in registry."""
    from tailpod.sandbox.server import start_sandbox
    from tailpod.sandbox.tailscale import DEFAULT_API_TOKEN, DEFAULT_AUTH_KEY

    repo, tag = DEMO_IMAGE.split(":")
    sandbox = start_sandbox(
        sshd=True,
        workdir=settings.home / "demo" / "sandbox",
        stand_in_config={"registry": {"images": {repo: {tag: DEMO_DIGEST}}}},
    )
    try:
        env = {
            **os.environ,
            **sandbox.env(),
            "TAILSCALE_API_KEY": DEFAULT_API_TOKEN,
            "TAILSCALE_AUTH_KEY": DEFAULT_AUTH_KEY,
            "TAILPOD_SSH_KEY": str(demo_ssh_key(settings.home)),
        }
        cloud = load_settings(
            overrides={
                "home": settings.home,
                "results_dir": settings.results_dir,
                "provider": "runpod",
                "image": DEMO_IMAGE,
                "gpus": DEMO_GPUS,
                "max_price": 3.5,
                "ttl_hours": 1.0,
                "port": settings.port,
                "engine_python": settings.engine_python,
            },
            env=env,
        )
        yield cloud, sandbox
    finally:
        sandbox.close()


def cloud_demo(
    settings: Settings, ledger: Ledger, cfg: EngineConfig, bench: dict[str, Any]
) -> None:
    from tailpod.cli import remote
    from tailpod.probes.hosts import RemoteSweepHost
    from tailpod.provision.cloud_up import up_cloud
    from tailpod.provision.lifecycle import down_remote

    with sandbox_settings(settings) as (cloud, sandbox):
        # The first choice has no capacity right now: the fallback must be visible.
        sandbox.add_fault("capacity", gpu=DEMO_GPUS[0])
        console.print(f"sandbox cloud: RunPod {sandbox.runpod_url}, admin {sandbox.admin_url}")
        with startup_progress("up: rent, join the tailnet, start vLLM over SSH") as update, \
                requirements_on_refusal(cloud.provider):
            record, info = up_cloud(cloud, cfg, ledger, lambda line: update(0.0, line))
        warning = remote.fallback_warning(info)
        if warning:
            console.print(warning)
        console.print(
            f"[green]up[/] {record.run_tag}: {record.gpu} at ${record.price_per_hr or 0:.2f}/hr, "
            f"image {record.image}, engine at {record.endpoint} (tailnet only)"
        )
        stamp = check_pod(record).get("stamp")
        if stamp:
            console.print(f"[bold red]{stamp}[/]")
        run_dir: Path | None = None
        try:
            with startup_progress("benchmark on the pod over SSH") as update:
                host = RemoteSweepHost(cloud, ledger, record, update)
                try:
                    run_dir = run_benchmark(cloud, record, host, cfg, **bench)
                finally:
                    host.close()
        finally:
            current = ledger.get(record.run_tag) or record
            evidence = down_remote(cloud, ledger, current)  # raises unless proven
            console.print(evidence_table(evidence, f"down {record.run_tag}"))
        meter = sandbox.meter()
        console.print(
            f"sandbox meter: {len(meter['billing_now'])} resources billing; "
            f"${meter.get('total_accrued_usd', 0):.4f} accrued in total"
        )
        console.print(f"results and billing proof: {run_dir}")


def register(app: typer.Typer) -> None:
    @app.command()
    @handle_errors
    def demo(
        local: bool = typer.Option(False, "--local", help="Skip the sandbox cloud: this machine."),
        matrix: bool = typer.Option(
            False, "--matrix", help="The card matrix: sandbox cards on both emulated clouds, "
            "in parallel, a CPU engine on each pod, one report ranking them by $/Mtok."
        ),
        cards: int = typer.Option(2, min=2, max=3, help="Sandbox cards for --matrix."),
        port: int = typer.Option(8765, help="Port for the demo engine."),
        spec_k: str = typer.Option("0,2", help="Arms to compare (0 = plain; ngram speculation)."),
        concurrency: str = typer.Option("1,2,4", help="Concurrency levels."),
        max_tokens: int = typer.Option(64, help="Output tokens per request."),
    ) -> None:
        """The whole lifecycle with no account: up, benchmark on the pod, down with the proof.

        Runs the real CPU vLLM engine on a tiny checkpoint built offline, in a few minutes on
        2 cores, and leaves nothing running.
        """
        from tailpod.cli.benchmark import int_list

        t0 = time.time()
        settings = load_settings(overrides={"provider": "local", "engine": "vllm", "port": port})
        ledger = ledger_for(settings)
        where = "local provider" if local else "sandbox cloud (emulated RunPod + tailnet + SSH)"
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
        if matrix:
            from tailpod.cli.demo_matrix import matrix_demo

            matrix_demo(settings, cfg, bench, cards)
        else:
            (local_demo if local else cloud_demo)(settings, ledger, cfg, bench)
        console.print(f"[green]demo done[/] in {time.time() - t0:.0f} s; nothing left running.")
