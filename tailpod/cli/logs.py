"""`tailpod logs`: a pod's engine log (over SSH, through the pod agent) or its container log
(through the provider), and `tailpod logs parse FILE`, which reads a startup log offline.

`tailpod logs TAG` is `tailpod logs show TAG`: a first word that is not a subcommand is the run
tag (what `kubectl logs POD`, `sky logs CLUSTER` and `runpodctl` users type).
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any, TextIO

import typer
from typer.core import TyperGroup

from tailpod.cli.common import (
    err_console,
    handle_errors,
    ledger_for,
    print_json,
    settings_from,
)
from tailpod.config import Settings
from tailpod.errors import ConfigError, TailpodError
from tailpod.ledger import PodRecord
from tailpod.pods.engine_log import EngineLog
from tailpod.secrets import redact

FOLLOW_POLL_S = 1.0


class LogsGroup(TyperGroup):
    """`logs TAG …` runs `logs show TAG …`; `logs parse …` and `logs --help` stay as they are."""

    def parse_args(self, ctx: Any, args: list[str]) -> list[str]:
        if args and args[0] not in self.commands and args[0] not in ctx.help_option_names:
            args = ["show", *args]
        return super().parse_args(ctx, args)


# -- the engine log ------------------------------------------------------------------------------


def open_engine_log(settings: Settings, record: PodRecord) -> EngineLog:
    """The pod's engine log, as its kind reads it (pods/engine_log.py)."""
    from tailpod.pods.kinds import kind_for

    return kind_for(record.provider).engine_log(
        settings, record, say=lambda msg: err_console.print(redact(str(msg))))


def last_lines(text: str, n: int) -> list[str]:
    lines = text.splitlines()
    return lines[-n:] if n > 0 else lines


def engine_lines(log: EngineLog, tail: int, follow: bool,
                 sleep: Callable[[float], None] = time.sleep) -> Iterator[str]:
    """The last `tail` lines of the engine log; with `follow`, then every new line."""
    size = log.size()
    # read a generous window, not the whole log: ~400 bytes a line is plenty for engine logs;
    # `--tail 0` is the whole log (it read a 400-byte window before)
    start = max(0, size - tail * 400) if tail > 0 else 0
    text, offset = log.read_from(start)
    if start > 0:
        text = text.split("\n", 1)[-1]  # the first line of a window is partial
    yield from last_lines(text, tail)
    pending = ""
    while follow:
        sleep(FOLLOW_POLL_S)
        more, offset = log.read_from(offset)
        if not more:
            continue
        pending += more
        *complete, pending = pending.split("\n")
        yield from complete


# -- the container log ---------------------------------------------------------------------------


def container_lines(settings: Settings, record: PodRecord, tail: int, follow: bool,
                    sleep: Callable[[float], None] = time.sleep) -> Iterator[str]:
    from tailpod.provision.base import SupportsContainerLog
    from tailpod.provision.providers import get_provider

    if not record.pod_id:
        raise ConfigError(f"{record.run_tag} has no provider pod id recorded")
    provider = get_provider(record.provider, settings)
    if not isinstance(provider, SupportsContainerLog):
        raise ConfigError(f"{record.provider} does not serve container logs",
                          hint="--engine reads the engine's own log over SSH")
    lines = provider.container_log(record.pod_id, tail)
    if lines is None:
        raise TailpodError(f"{record.provider} has no container log for {record.pod_id}")
    yield from lines
    seen = list(lines)
    while follow:
        sleep(FOLLOW_POLL_S * 2)
        now = provider.container_log(record.pod_id, 1000)
        if not now:  # no answer this time: keep what was shown, or it is all shown again
            continue
        yield from _new_lines(seen, now)
        seen = now


def _new_lines(before: list[str], now: list[str]) -> list[str]:
    """The lines of `now` after its overlap with the end of `before` (both are tails)."""
    for k in range(min(len(before), len(now)), 0, -1):
        if before[-k:] == now[:k]:
            return now[k:]
    return now


def pod_gone(record: PodRecord) -> bool:
    """A rented pod the ledger holds as ended (proven down): its engine log went with it. A
    local run's log file and your own box stay, so their logs are still read."""
    from tailpod.pods.kinds import kind_for

    return record.status == "terminated" and kind_for(record.provider).name == "cloud"


def kept_lines(settings: Settings, record: PodRecord, tail: int) -> list[str]:
    """What this machine kept of a rented pod the ledger holds as ended: the container log
    `up` saved in the run directory (provision/bootlog.py). The pod, and its engine log with it,
    is gone, so no SSH is tried (adversary #31: 35.6 s on SSH to a pod `down` had proven gone)."""
    from tailpod.provision.bootlog import LOG_FILE
    from tailpod.provision.teardown import run_dir_for

    path = run_dir_for(settings, record.run_tag) / LOG_FILE
    gone = (f"{record.run_tag} has ended (billing proven stopped): the pod is gone, and its "
            "engine log with it")
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        raise TailpodError(f"{gone}; no container log was kept in {path.parent}") from None
    err_console.print(f"{gone}; the container log kept in {path}:", markup=False,
                      soft_wrap=True)
    return last_lines(text, tail)


def write_lines(lines: Iterable[str], out: TextIO | None = None) -> None:
    """Print each line as it comes, every secret masked (a known secret's value wherever it
    shows, credentials by name and shape: tailpod/secrets.py `redact`). A top-level function,
    not the command's body, so `make mutate` reaches it (mutmut skips decorated functions)."""
    out = out or sys.stdout
    for line in lines:
        out.write(redact(line) + "\n")
        out.flush()


# -- the commands --------------------------------------------------------------------------------


def register(app: typer.Typer) -> None:
    logs = typer.Typer(
        cls=LogsGroup,
        help="A pod's engine or container log (tailpod logs TAG), or a startup log read "
             "offline (tailpod logs parse FILE).",
        no_args_is_help=True,
    )
    app.add_typer(logs, name="logs")

    @logs.command("show")
    @handle_errors
    def show(
        run_tag: str = typer.Argument(None, help="The pod (default: the only active one)."),
        engine: bool = typer.Option(False, "--engine", help="The engine's log, read over SSH "
                                                           "through the pod agent (the default)."),
        container: bool = typer.Option(False, "--container", help="The container log, from "
                                                                  "the provider's API."),
        follow: bool = typer.Option(False, "--follow", "-f", help="Keep printing new lines "
                                                                 "until Ctrl-C."),
        tail: int = typer.Option(200, "--tail", "-n", min=0, help="Lines to show first "
                                                                 "(0: all)."),
    ) -> None:
        """The pod's engine log (default) or container log; `tailpod logs TAG` for short."""
        if engine and container:
            raise ConfigError("--engine and --container: pick one")
        settings = settings_from()
        record = ledger_for(settings).resolve(run_tag)
        if container:
            write_lines(container_lines(settings, record, tail, follow))
            return
        if pod_gone(record):
            write_lines(kept_lines(settings, record, tail))  # a rented pod, proven gone
            return
        log = open_engine_log(settings, record)
        try:
            write_lines(engine_lines(log, tail, follow))
        finally:
            log.close()

    @logs.command("parse")
    @handle_errors
    def parse(
        file: str = typer.Argument(..., help="Startup log to read ('-' for stdin)."),
        engine: str = typer.Option(..., "--engine", "-e", help="sglang, vllm or llamacpp."),
    ) -> None:
        """Print the facts an engine's startup log states (KV pool, capacity, spec, readiness).
        Exits 1, with a warning, when no line of the file is one the engine's parser knows."""
        from tailpod.engines.adapters import get_adapter

        adapter = get_adapter(engine)
        if file == "-":
            text = sys.stdin.read()
        else:
            path = Path(file).expanduser()
            if not path.is_file():
                raise ConfigError(f"no such log file: {path}")
            try:
                text = path.read_text(encoding="utf-8", errors="replace")
            except OSError as exc:
                raise ConfigError(f"cannot read {path}: {exc.__class__.__name__}") from None
        facts = adapter.parse_startup(text)
        print_json(facts.to_json())
        if not facts.lines:
            err_console.print(f"[yellow]warning:[/] no line of {file} is a {adapter.name} "
                              "startup line tailpod recognises; every fact is null",
                              markup=True)
            err_console.print("  hint: is it the right --engine, and the engine's own log "
                              "(not a client's)?")
            raise typer.Exit(code=1)

