"""`tailpod sandbox serve`: the local sandbox cloud in the foreground (loopback only)."""

from __future__ import annotations

import json
import signal
import sys
import threading
from pathlib import Path

import typer

from tailpod.cli.common import console, handle_errors
from tailpod.errors import ConfigError

sandbox_app = typer.Typer(
    help="A local sandbox cloud: RunPod and vast.ai emulators with a billing meter and faults.",
    no_args_is_help=True,
)


@sandbox_app.command("serve")
@handle_errors
def serve(
    host: str = typer.Option("127.0.0.1", help="Loopback address to bind (127.0.0.1 or ::1)."),
    runpod_port: int = typer.Option(0, help="RunPod emulator port (0 = pick a free one)."),
    vast_port: int = typer.Option(0, help="vast.ai emulator port (0 = pick a free one)."),
    admin_port: int = typer.Option(0, help="Admin API port (0 = pick a free one)."),
    runpod_key: list[str] = typer.Option(
        [], help="Accepted RunPod API key (repeatable; default: the built-in sandbox key)."),
    vast_key: list[str] = typer.Option(
        [], help="Accepted vast.ai API key (repeatable; default: the built-in sandbox key)."),
    balance: float = typer.Option(100.0, help="Starting balance of every account, USD."),
    start_delay: float = typer.Option(2.0, help="Seconds before a new pod's container is up."),
    workdir: Path | None = typer.Option(None, help="Where pod processes run and log."),
    no_run: bool = typer.Option(False, "--no-run", help="Do not run pods' start commands."),
    sshd: bool = typer.Option(False, help="Give every pod a real sshd (needs OpenSSH)."),
    no_stand_ins: bool = typer.Option(
        False, "--no-stand-ins", help="Do not mount the registry/hub/tailscale stand-ins."),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON line with the URLs."),
) -> None:
    """Run the sandbox until Ctrl-C; every pod process is killed on exit."""
    from tailpod.provision.sandbox import DEFAULT_RUNPOD_KEY, DEFAULT_VAST_KEY, start_sandbox
    from tailpod.provision.sandbox.http import LOOPBACK_HOSTS

    if host not in LOOPBACK_HOSTS:
        raise ConfigError(f"the sandbox binds loopback addresses only, not {host!r}")
    for key in [*runpod_key, *vast_key]:
        if len(key) < 8:
            raise ConfigError("sandbox API keys must be at least 8 characters")
    sandbox = start_sandbox(
        host,
        runpod_port=runpod_port,
        vast_port=vast_port,
        admin_port=admin_port,
        runpod_keys={k: balance for k in (runpod_key or [DEFAULT_RUNPOD_KEY])},
        vast_keys={k: balance for k in (vast_key or [DEFAULT_VAST_KEY])},
        start_delay_s=start_delay,
        workdir=workdir,
        run_commands=not no_run,
        stand_ins=not no_stand_ins,
        sshd=sshd,
    )
    stop = threading.Event()

    def _stop(_signum: int, _frame: object) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, _stop)
    try:
        if as_json:
            sys.stdout.write(json.dumps({"urls": sandbox.urls(), "env": sandbox.env()}) + "\n")
            sys.stdout.flush()
        else:
            console.print("[bold]tailpod sandbox cloud[/] (loopback only; Ctrl-C stops it)")
            for name, url in sandbox.urls().items():
                console.print(f"  {name:<10} {url}")
            console.print("\nPoint tailpod (and the vendors' clients) at it:")
            for key, value in sandbox.env().items():
                console.print(f"  export {key}={value}")
            console.print(f"\nBilling meter: curl {sandbox.admin_url}/admin/meter")
        while not stop.wait(0.5):
            pass
    except KeyboardInterrupt:
        pass
    finally:
        meter = sandbox.meter()
        sandbox.close()
        if not as_json:
            console.print(f"stopped; {meter['billing_count']} resource(s) were billing, "
                          f"${meter['total_accrued_usd']:.4f} accrued in total")


def register(app: typer.Typer) -> None:
    app.add_typer(sandbox_app, name="sandbox")
