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
    sshd: bool | None = typer.Option(
        None, "--sshd/--no-sshd",
        help="Give every pod a real sshd (default: on when OpenSSH's sshd is installed)."),
    no_stand_ins: bool = typer.Option(
        False, "--no-stand-ins", help="Do not mount the registry/hub/tailscale stand-ins."),
    stand_in_port: list[str] = typer.Option(
        [], "--stand-in-port", help="NAME=PORT: pin a stand-in's port (registry, hub, "
        "tailscale; repeatable; default: a free one)."),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON line with the URLs."),
    env_file: Path | None = typer.Option(
        None, "--env-file", help="Also write the environment to this file (mode 600), to load in "
        "another shell: set -a; . FILE; set +a."),
    graphql_retired: bool = typer.Option(
        False, "--graphql-retired", help="Remove RunPod's GraphQL endpoint (404), as its "
        "retirement in early 2027 will: tailpod must work on REST v2 alone."),
    engine_python: str | None = typer.Option(
        None, help="Python with the engine installed, for the pods (TAILPOD_ENGINE_PYTHON in "
        "the printed environment); pods here run on this machine."),
) -> None:
    """Run the sandbox until Ctrl-C; every pod process is killed on exit.

    The printed environment (and --env-file) holds every credential the emulators accept
    (RunPod, vast.ai, Tailscale API and auth keys), an SSH key for the pods, and a model
    (tailpod-sandbox/tiny-target on the Hub stand-in) and image (vllm/vllm-openai:v0.11.0 on the
    registry stand-in) they serve: with it loaded, check-requirements, up, benchmark, status
    and down work as on a real account."""
    from tailpod.config import load_settings
    from tailpod.sandbox import DEFAULT_RUNPOD_KEY, DEFAULT_VAST_KEY, start_sandbox
    from tailpod.sandbox.http import LOOPBACK_HOSTS
    from tailpod.sandbox.sshd import SSHD
    from tailpod.sandbox.world import stand_in_config, world_env, write_env_file

    if host not in LOOPBACK_HOSTS:
        raise ConfigError(f"the sandbox binds loopback addresses only, not {host!r}")
    pinned = stand_in_ports(stand_in_port)
    if pinned and no_stand_ins:
        raise ConfigError("--stand-in-port pins a stand-in that --no-stand-ins leaves out")
    for key in [*runpod_key, *vast_key]:
        if len(key) < 8:
            raise ConfigError("sandbox API keys must be at least 8 characters")
    # The world's files (the tiny checkpoint, the pods' SSH key) are kept between runs.
    world_dir = load_settings().home / "sandbox"
    use_sshd = sshd if sshd is not None else Path(SSHD).exists()
    config = stand_in_config(world_dir)
    for name, port in pinned.items():
        config.setdefault(name, {})["port"] = port
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
        stand_in_config=None if no_stand_ins else config,
        sshd=use_sshd,
        graphql_retired=graphql_retired,
    )
    env = world_env(sandbox.env(), world_dir, engine_python)
    if env_file is not None:
        write_env_file(env_file, env)
    stop = threading.Event()

    def _stop(_signum: int, _frame: object) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, _stop)
    # Ctrl-C stops it even where SIGINT came in ignored: a non-interactive shell starts its
    # background jobs (`cmd &`) that way, and Python then leaves SIGINT ignored.
    signal.signal(signal.SIGINT, _stop)
    try:
        if as_json:
            sys.stdout.write(json.dumps({"urls": sandbox.urls(), "env": env}) + "\n")
            sys.stdout.flush()
        else:
            console.print("[bold]tailpod sandbox cloud[/] (loopback only; Ctrl-C stops it)")
            for name, url in sandbox.urls().items():
                console.print(f"  {name:<10} {url}")
            console.print("\nPoint tailpod (and the vendors' clients) at it:")
            print_exports(env)
            if env_file is not None:
                console.print(f"(also in {env_file}: set -a; . {env_file}; set +a)")
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


def stand_in_ports(values: list[str]) -> dict[str, int]:
    """`--stand-in-port NAME=PORT` values, each checked (exit 2 before anything starts): a user
    with a port policy pins the stand-ins as the emulators' own ports (newcomer 2.1)."""
    from tailpod.sandbox.server import STAND_INS

    ports: dict[str, int] = {}
    for value in values:
        name, _, port = value.partition("=")
        if name not in STAND_INS or not port.isdigit() or not 1 <= int(port) <= 65535:
            raise ConfigError(f"--stand-in-port takes NAME=PORT, NAME one of "
                              f"{', '.join(STAND_INS)} and PORT 1-65535; got {value!r}")
        if name in ports:
            raise ConfigError(f"--stand-in-port names {name} twice")
        ports[name] = int(port)
    return ports


def print_exports(env: dict[str, str]) -> None:
    """One `export` line a variable, never folded at the terminal's width: a pasted block
    with a folded line leaves its variable unexported (newcomer 2.1: `TAILSCALE_AUTH_KEY`
    at 80 columns)."""
    for key, value in env.items():
        console.print(f"  export {key}={value}", highlight=False, markup=False, soft_wrap=True)


def register(app: typer.Typer) -> None:
    app.add_typer(sandbox_app, name="sandbox")
