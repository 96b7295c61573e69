"""`tailpod volume create|ls|rm`: storage that outlives a pod, in the ledger before it exists."""

from __future__ import annotations

import time
from typing import Any

import typer
from rich.markup import escape

from tailpod.cli.common import (
    console,
    err_console,
    handle_errors,
    ledger_for,
    print_json,
    settings_from,
)
from tailpod.cli.remote import STATUS_TIMEOUT_S
from tailpod.config import Settings
from tailpod.errors import ConfigError
from tailpod.ledger import Ledger
from tailpod.pods.down import down_storage as down_storage  # cli/pods.py's down and status
from tailpod.provision import volumes as vol
from tailpod.provision.apiclient import ApiTimings, call_deadline
from tailpod.provision.base import Provider
from tailpod.provision.providers import (
    canonical_name,
    get_provider,
    provider_class,
    remote_providers,
)


def _provider(settings: Settings, name: str, timings: ApiTimings | None = None) -> Provider:
    key = canonical_name(name)
    vol.require_volumes(provider_class(key), key)  # before any key or host is read
    options: dict[str, Any] = {"timings": timings} if timings else {}
    return get_provider(key, settings, **options)


def storage_report(settings: Settings, ledger: Ledger) -> vol.VolumeReport:
    """The ledger's volumes joined with what every configured provider lists."""
    return vol.reconcile_volumes(remote_providers(settings), ledger)


def print_storage(report: vol.VolumeReport, err: bool = False) -> None:
    """What still bills as storage: kept on purpose, apart from anything billing by mistake."""
    out = err_console if err else console
    if report.rows:
        out.print(f"storage that still bills: ${report.monthly():.2f}/month")
    for row in report.kept:
        out.print(f"  {row.line()}")
    for row in report.by_mistake:
        out.print(f"  [bold red]{row.line()}[/]")
    for name, error in report.errors.items():
        err_console.print(f"[bold red]unknown:[/] {name}: volumes could not be listed: {error}")
    for failed in report.delete_failed:
        err_console.print(f"[bold red]STILL BILLING[/] {escape(failed.message)}")
        if failed.hint:
            err_console.print(f"  {failed.hint}", markup=False)


def register(app: typer.Typer) -> None:
    sub = typer.Typer(help="Volumes (RunPod network, vast.ai local): weights and compile caches "
                      "that outlive a pod.",
                      no_args_is_help=True)
    app.add_typer(sub, name="volume")

    @sub.command("create")
    @handle_errors
    def create(
        name: str = typer.Argument(..., help="Volume name (stored as tp-vol-NAME)."),
        provider: str = typer.Option("runpod", help="runpod or vastai (docs/volumes.md)."),
        size_gb: int = typer.Option(..., "--size-gb", help="Size in GB (RunPod: 10-4096; "
                                    "vast.ai: what the machine has room for)."),
        datacenter: str = typer.Option(None, "--datacenter", help="Data center id, e.g. EU-RO-1 "
                                       "(vast.ai: the machine id; its volume stays there)."),
        gpu: list[str] = typer.Option(None, "--gpu", help="GPUs the volume is for, repeatable: "
                                      "the data center (vast.ai: machine) must have one."),
        volume_type: str = typer.Option(None, "--type", help="STANDARD or HIGH_PERFORMANCE "
                                        "(RunPod); LOCAL (vast.ai)."),
        json_out: bool = typer.Option(False, "--json"),
    ) -> None:
        """Create a volume. It bills until `tailpod volume rm`; bad input is refused first."""
        settings = settings_from()
        ledger = ledger_for(settings)
        adapter = vol.volume_capable(_provider(settings, provider))
        vol.volume_tag(name)  # a bad name is refused before any call
        low, high = adapter.volume_size_gb
        if not low <= size_gb <= high:
            raise ConfigError(f"--size-gb {size_gb}: a {provider} volume is {low}-{high} GB; "
                              "nothing was created")
        placement = vol.choose_data_center(adapter, data_center=datacenter,
                                           gpu_preference=list(gpu or []),
                                           volume_type=volume_type.upper() if volume_type else None,
                                           size_gb=size_gb)
        note = placement.shrink_note()
        if note:
            console.print(note)
        assert isinstance(adapter, Provider)
        record = vol.create_volume_safely(adapter, ledger, name, size_gb, placement)
        if json_out:
            print_json(record.to_json())
            return
        price = (f"${record.price_per_month:.2f}/month" if record.price_per_month is not None
                 else "price unknown")
        console.print(f"[green]created[/] volume {vol.short_name(record.name)}: "
                      f"{record.size_gb} GB {record.volume_type or ''} in {record.data_center} "
                      f"({record.volume_id}), {price} until deleted")
        console.print(f"  use it: tailpod up --volume {vol.short_name(record.name)}; delete it: "
                      f"tailpod volume rm {vol.short_name(record.name)}")

    @sub.command("ls")
    @handle_errors
    def ls(
        json_out: bool = typer.Option(False, "--json"),
        timeout: float = typer.Option(
            STATUS_TIMEOUT_S, "--timeout", min=1.0,
            help="Stop asking the providers after this many seconds, every call included; "
            "what they did not answer is reported unknown (exit 3)."),
    ) -> None:
        """Every volume: the ledger joined with what the providers list, with $/month."""
        settings = settings_from()
        with call_deadline(time.monotonic() + timeout):
            report = storage_report(settings, ledger_for(settings))
        if json_out:
            print_json(report.to_json())
        elif not report.rows and not report.errors:  # "no volumes" only when all were asked
            console.print("no volumes")
        else:
            for row in report.rows:
                console.print(row.line())
            console.print(f"storage total: ${report.monthly():.2f}/month")
        if report.errors:
            print_storage(vol.VolumeReport([], report.errors))
            raise typer.Exit(3)

    @sub.command("rm")
    @handle_errors
    def rm(
        name: str = typer.Argument(..., help="Volume name."),
        provider: str = typer.Option(None, help="Needed only for a volume not in the ledger."),
        json_out: bool = typer.Option(False, "--json"),
    ) -> None:
        """Delete a volume and prove it gone (direct look-up 404, no longer listed)."""
        settings = settings_from()
        ledger = ledger_for(settings)
        record = ledger.volume(vol.volume_tag(name))
        pname = provider or (record.provider if record else None)
        if pname is None:
            raise ConfigError(f"no volume {name} in the ledger", hint="name --provider to look "
                              "it up there")
        proof = vol.delete_volume_proven(_provider(settings, pname), ledger, name)
        if json_out:
            print_json(proof)
            return
        console.print(f"[green]deleted[/] volume {proof['volume']} ({', '.join(proof['volume_ids'])}):"
                      " the provider answers 404 for it and lists no volume of that name")
