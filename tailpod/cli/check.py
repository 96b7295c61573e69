"""`tailpod check-requirements`: every check that can fail, run before anything bills."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

import typer
from rich.console import Console
from rich.text import Text

from tailpod.cli.common import console, handle_errors, print_json
from tailpod.cli.gpus import DISK_GB, MIN_CUDA, MIN_RELIABILITY
from tailpod.config import Settings, check_run_settings, gpu_flags
from tailpod.engines.base import EngineConfig
from tailpod.errors import ConfigError

err_console = Console(stderr=True, highlight=False)

if TYPE_CHECKING:
    from tailpod.preflight import PreflightReport

STYLE = {"pass": "green", "warn": "yellow", "fail": "bold red", "skip": "dim"}


def print_requirements(report: PreflightReport, provider: str, out: Console = console) -> None:
    """The check-requirements table and verdict; `up` prints the same (to stderr) when preflight
    refuses. At a width where the detail and fix columns would break identifiers mid-word
    (`TAILSCALE_API_K` / `EY`), one block per check instead."""
    from tailpod.cli.common import table_or_blocks

    rows = [[r.title, Text(r.status.value, style=STYLE[r.status.value]), Text(r.detail),
             Text(r.fix)] for r in report.results]
    out.print(table_or_blocks(out, f"check-requirements ({provider})",
                              ["check", "status", "detail", "how to fix"], rows,
                              wrap=("detail", "how to fix")))
    counts = report.counts()
    summary = ", ".join(f"{n} {s}" for s, n in counts.items() if n)
    verdict = "[green]ready[/]" if report.ok else "[bold red]not ready[/]"
    out.print(f"{verdict}: {summary} in {report.elapsed_s:.1f} s; nothing was created")


def run_live(settings: Settings, allow_unpinned: bool) -> None:
    """First contact (provision/runpod/first_contact.py): its lines go to stderr, so --json
    output stays one document; a pod not proven down raises (exit 3)."""
    import os

    from tailpod.engines.image import pin_image
    from tailpod.provision.providers import canonical_name
    from tailpod.provision.runpod.first_contact import FirstContactTimings, run_first_contact

    if canonical_name(settings.provider) != "runpod":
        raise ConfigError("--live checks RunPod's undocumented contracts; the provider is "
                          f"{settings.provider!r}", hint="pass --provider runpod")
    if not settings.image.strip():
        raise ConfigError("--live needs the image tailpod would rent with", hint="pass --image")
    pinned = pin_image(settings.image, settings, allow_unpinned=allow_unpinned)
    facts = run_first_contact(settings, pinned.pinned_ref, say=err_console.print,
                              timings=FirstContactTimings.from_env(os.environ),
                              image_label=settings.image.strip())
    err_console.print(f"first contact: {facts.summary()}")


@contextmanager
def checking(total: int) -> Iterator[Callable[[Any], None]]:
    """A spinner on stderr (a terminal only) counting finished checks and naming the last, so
    a check waiting on an API that does not answer is not a blank screen."""
    if not err_console.is_terminal:
        yield lambda result: None
        return
    from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

    with Progress(SpinnerColumn(), TextColumn("[bold]checking[/] {task.completed}/{task.total}"),
                  TimeElapsedColumn(), TextColumn("{task.fields[last]}", style="dim"),
                  console=err_console, transient=True) as progress:
        task = progress.add_task("checks", total=total, last="")
        yield lambda result: progress.update(task, advance=1,
                                             last=f"{result.title}: {result.status.value}")


def planned_arms(settings: Settings, spec_k: str | None, spec_method: str,
                 draft_model: str | None) -> tuple[EngineConfig, ...]:
    """`--spec-k`'s speculative arms, for the checkpoint check (plain needs nothing of it)."""
    from tailpod.engines.base import SpecArm, check_spec_method

    if spec_k is None:
        return ()
    check_spec_method(spec_method)
    try:  # (cli/benchmark.py's int_list is out of reach here: benchmark imports this module)
        ks = sorted({int(k) for k in spec_k.replace(" ", "").split(",") if k})
    except ValueError:
        raise ConfigError(f"--spec-k must be a comma list of integers, got {spec_k!r}") from None
    return tuple(EngineConfig(engine=settings.engine, model=settings.model,
                              spec=SpecArm(k=k, method=spec_method, draft_model=draft_model))
                 for k in ks if k > 0)


def register(app: typer.Typer) -> None:
    @app.command("check-requirements")
    @handle_errors
    def check_requirements(
        provider: str = typer.Option(
            None, help="local, runpod or vastai (env TAILPOD_PROVIDER)."
        ),
        model: str = typer.Option(None, help="Hub repo id or checkpoint directory "
                                             "(env TAILPOD_MODEL)."),
        gpu: list[str] = typer.Option(None, "--gpu", help="GPU type, repeatable, in preference "
                                                          "order (env TAILPOD_GPUS)."),
        gpu_count: int = typer.Option(None, help="GPUs per pod (env TAILPOD_GPU_COUNT)."),
        image: str = typer.Option(None, help="Engine image REPO:TAG (env TAILPOD_IMAGE)."),
        max_price: float = typer.Option(None, help="Price cap in $/h (env TAILPOD_MAX_PRICE)."),
        min_reliability: float = MIN_RELIABILITY,
        min_cuda: str = MIN_CUDA,
        disk_gb: int = DISK_GB,
        hours: float = typer.Option(None, help="Expected duration of the run in hours "
                                               "(default: the TTL, TAILPOD_TTL_HOURS)."),
        context_length: int = typer.Option(4096, help="Context length the KV cache must hold "
                                                      "for one request."),
        allow_unpinned: bool = typer.Option(
            False, "--allow-unpinned/--no-allow-unpinned", help="Accept an image tag that moves (latest, nightly, ...)."
        ),
        allow_nonephemeral: bool = typer.Option(
            False, "--allow-nonephemeral/--no-allow-nonephemeral",
            help="Accept a Tailscale auth key that is not ephemeral."
        ),
        tailnet: bool = typer.Option(
            True, "--tailnet/--no-tailnet",
            help="Check the Tailscale token, key and host (off: as `up --no-tailnet`).",
        ),
        spec_k: str = typer.Option(
            None, "--spec-k", help="The arms the run will start (K values, 0 = plain), as `up` or "
            "`benchmark` takes them: an arm the checkpoint or engine cannot run fails."),
        spec_method: str = typer.Option("mtp", help="Speculation method of the K > 0 arms."),
        draft_model: str = typer.Option(None, help="Draft model of a draft_model arm."),
        json_out: bool = typer.Option(False, "--json", help="Print the results as JSON."),
        live: bool = typer.Option(
            False, "--live/--no-live", help="RunPod first contact: rent the cheapest CPU pod (cents) with "
                                  "this image to verify the start form, the pod key's self-kill "
                                  "and the meter delay; the pod is proven down."),
    ) -> None:
        """Check keys, access, checkpoint, fit, image, tailnet, SSH, offers and cost. Creates
        nothing (except with --live: one CPU pod, proven down); exits 1 when any check fails."""
        from tailpod.preflight import CHECKS, Plan, load_preflight_settings, run_preflight

        if context_length <= 0:
            raise ConfigError("--context-length must be positive")
        gpus, count = gpu_flags(gpu, gpu_count)  # `A40:2`: two A40s, as `up` reads it
        overrides = {"provider": provider, "model": model, "image": image,
                     "max_price": max_price, "gpus": gpus, "gpu_count": count,
                     "min_reliability": min_reliability, "min_cuda": min_cuda,
                     "disk_gb": disk_gb}
        settings, problems = load_preflight_settings(overrides)
        # The same validator `up` runs: a value `up` would refuse is refused here too (exit 2),
        # not reported as a cap or a plan.
        check_run_settings(settings)
        if hours is not None and (not math.isfinite(hours) or hours <= 0):
            raise ConfigError(f"--hours must be a positive number, got {hours!r}")
        if live:
            run_live(settings, allow_unpinned)
        plan = Plan(hours=hours, context_length=context_length, allow_unpinned=allow_unpinned,
                    allow_nonephemeral=allow_nonephemeral, use_tailnet=tailnet,
                    arms=planned_arms(settings, spec_k, spec_method, draft_model))
        with checking(len(CHECKS)) as on_result:
            report = run_preflight(settings, plan, settings_problems=problems,
                                   on_result=on_result)
        if json_out:
            print_json(report.to_json())
        else:
            print_requirements(report, settings.provider)
        if not report.ok:
            raise typer.Exit(code=1)
