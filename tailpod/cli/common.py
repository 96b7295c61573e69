"""What every command shares: settings from flags, the ledger, console output, error handling."""

from __future__ import annotations

import functools
import json
import sys
from collections.abc import Callable
from typing import Any, TypeVar

import typer
from rich.console import Console

from tailpod.config import Settings, load_settings
from tailpod.errors import TailpodError
from tailpod.ledger import Ledger
from tailpod.secrets import redact

console = Console(highlight=False)
err_console = Console(stderr=True, highlight=False)

F = TypeVar("F", bound=Callable[..., Any])


def settings_from(**flags: Any) -> Settings:
    return load_settings(overrides=flags)


def ledger_for(settings: Settings) -> Ledger:
    return Ledger(settings.state_dir)


def print_json(data: Any) -> None:
    sys.stdout.write(redact(json.dumps(data, indent=2, default=str)) + "\n")


def fail(exc: TailpodError) -> typer.Exit:
    err_console.print(f"[bold red]error:[/] {redact(exc.message)}", markup=True)
    if exc.hint:
        err_console.print(f"  hint: {redact(exc.hint)}")
    return typer.Exit(code=exc.exit_code)


def handle_errors(fn: F) -> F:
    """Turn TailpodError into one clear line and its exit code; Ctrl-C into exit 130."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except TailpodError as exc:
            raise fail(exc) from None
        except KeyboardInterrupt:
            err_console.print("interrupted")
            raise typer.Exit(code=130) from None

    return wrapper  # type: ignore[return-value]
