"""What every command shares: settings from flags, the ledger, console output, error handling."""

from __future__ import annotations

import errno
import functools
import json
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
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


_json_state = threading.local()  # documents printed by the command now running


def print_json(data: Any) -> None:
    sys.stdout.write(redact(json.dumps(data, indent=2, default=str)) + "\n")
    _json_state.printed = getattr(_json_state, "printed", 0) + 1


def fail(exc: TailpodError) -> typer.Exit:
    """The error and its hint, one line each. Their text is escaped (a `[tp-…]` tag in it is not
    rich markup to swallow) and soft-wrapped: the terminal wraps it, so a path or a command in
    it is never cut in the middle of a word for a reader to copy."""
    from rich.markup import escape

    err_console.print(f"[bold red]error:[/] {escape(redact(exc.message))}", soft_wrap=True)
    if exc.hint:
        err_console.print(f"  hint: {redact(exc.hint)}", markup=False, soft_wrap=True)
    return typer.Exit(code=exc.exit_code)


def error_document(kind: str, message: str, hint: str | None, exit_code: int) -> dict[str, Any]:
    """What stdout holds under --json when the command failed before printing its document."""
    return {"ok": False, "error": {"kind": kind, "message": redact(message),
                                   "hint": redact(hint) if hint else None,
                                   "exit_code": exit_code}}


@contextmanager
def stdout_for_json(enabled: bool) -> Iterator[None]:
    """Under --json, stdout carries one JSON document and nothing else: every console line
    (progress, steps, tables) goes to stderr meanwhile."""
    if not enabled:
        yield
        return
    before = console._file  # noqa: SLF001 (None: the console follows sys.stdout)
    console.file = sys.stderr
    try:
        yield
    finally:
        console._file = before  # noqa: SLF001


def crash_log(exc: BaseException) -> Path:
    """The traceback of an error tailpod did not expect, redacted, in the home's `crashes/`
    (never on the terminal: adversary-2026-12.md counted 16 raw tracebacks)."""
    import os
    import time
    import traceback

    from tailpod.config import default_home

    home = Path(os.environ.get("TAILPOD_HOME") or default_home())
    path = home / "crashes" / f"crash-{time.strftime('%Y%m%dT%H%M%S')}-{os.getpid()}.log"
    text = redact("".join(traceback.format_exception(type(exc), exc, exc.__traceback__)))
    try:
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        path.write_text(text)
        path.chmod(0o600)
    except OSError:
        return Path("(not written: the home cannot be written)")
    return path


def _cli_control(exc: BaseException) -> bool:
    """An exception of typer's or click's own (Exit, Abort, UsageError), whichever package
    defines it in this typer release."""
    return any(c.__module__.split(".")[0] in ("click", "typer") for c in type(exc).__mro__)


def _wants_json(kwargs: dict[str, Any]) -> bool:
    return bool(kwargs.get("json_out") or kwargs.get("as_json"))


def handle_errors(fn: F) -> F:
    """Turn TailpodError into one clear line and its exit code; Ctrl-C into exit 130.

    Under --json (a `json_out` or `as_json` parameter that is true) the console writes to
    stderr, and a failure before the command printed its document also prints a JSON error
    object on stdout (`{"ok": false, "error": {...}}`), so stdout always parses."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        as_json = _wants_json(kwargs)
        _json_state.printed = 0

        def json_error(kind: str, message: str, hint: str | None, code: int) -> None:
            if as_json and not getattr(_json_state, "printed", 0):
                print_json(error_document(kind, message, hint, code))

        try:
            with stdout_for_json(as_json):
                return fn(*args, **kwargs)
        except TailpodError as exc:
            json_error(type(exc).__name__, exc.message, exc.hint, exc.exit_code)
            raise fail(exc) from None
        except OSError as exc:
            # A full disk, a read-only or vanished directory: one line naming the file, not a
            # traceback (adversary 34: `benchmark` on a full results disk). Whatever was rented
            # before it was settled by the step that rented it (its own except path).
            message = f"{exc.strerror or exc.__class__.__name__}: {exc.filename or ''}".rstrip(": ")
            hint = ("free space there (a resumed `--run-id` drops unfinished rows), then run it "
                    "again" if exc.errno == errno.ENOSPC else None)
            json_error("OSError", redact(message), hint, 1)
            raise fail(TailpodError(message, hint)) from None
        except KeyboardInterrupt as exc:
            settled = getattr(exc, "settled", None)
            message = f"interrupted; {settled}" if settled else "interrupted"
            json_error("Interrupted", message, None, 130)
            err_console.print(message, markup=False)
            raise typer.Exit(code=130) from None
        except Exception as exc:  # noqa: BLE001 (the last line of defence: no traceback)
            if _cli_control(exc):  # typer.Exit, Abort, a usage error: click's to handle
                raise
            path = crash_log(exc)
            message = f"unexpected {exc.__class__.__name__}: {redact(str(exc))}"
            hint = f"the traceback is in {path}; `tailpod status` shows whatever still bills"
            json_error(exc.__class__.__name__, message, hint, 1)
            raise fail(TailpodError(message, hint)) from None  # exit 1, as any TailpodError

    return wrapper  # type: ignore[return-value]


MIN_WRAP_WIDTH = 24  # a wrapping column narrower than this reads as a word per line


def table_or_blocks(out: Console, title: str, columns: list[str], rows: list[list[Any]],
                    *, wrap: tuple[str, ...] = (), key: str | None = None) -> Any:
    """One table when every cell fits whole at the console's width, else a block per row.

    Columns not in `wrap` never wrap; the table is used only when they keep their whole width
    and each `wrap` column still gets MIN_WRAP_WIDTH (and at least its longest word). Otherwise
    each row becomes a block titled by its `key` column (default: the first), with one
    `column  value` line per other column, the values wrapping at spaces — so a run tag, a
    price or a flag is never cut to `tp-2…`."""
    from rich.console import Group
    from rich.measure import Measurement
    from rich.table import Table
    from rich.text import Text

    key = key or columns[0]
    table = Table(title=title)
    for col in columns:
        if col in wrap:
            table.add_column(col, overflow="fold", min_width=MIN_WRAP_WIDTH)
        else:
            table.add_column(col, no_wrap=True)
    for row in rows:
        table.add_row(*row)
    measure = Measurement.get(out, out.options.update_width(10_000), table)
    if (measure.maximum if not wrap else measure.minimum) <= out.width:
        return table
    blocks: list[Any] = []
    at = columns.index(key)
    for row in rows:
        block = Table(show_header=False, box=None, padding=(0, 1), pad_edge=False)
        block.add_column(style="bold", no_wrap=True)
        block.add_column(overflow="fold")
        for col, value in zip(columns, row, strict=True):
            if col != key and _plain(value) not in ("", "-"):
                block.add_row(col, value)
        blocks.append(Text(f"{title}: {_plain(row[at])}", style="bold", overflow="fold"))
        blocks.append(block)
    return Group(*blocks)


def _plain(value: Any) -> str:
    from rich.text import Text

    if isinstance(value, Text):
        return value.plain
    return Text.from_markup(str(value)).plain


def step_say(what: str) -> Callable[[float, str], None]:
    """A progress callback for a console that is not a terminal (a log, a pipe, CI): one plain
    line per new step on stderr, with the seconds since the start, instead of a spinner that
    leaves nothing behind."""
    import time

    started = time.monotonic()
    last = [""]
    err_console.print(f"[{0:>4.0f} s] {what}", markup=False, highlight=False)

    def update(elapsed: float, line: str) -> None:
        text = redact(" ".join(str(line).split()))
        if not text or text == last[0]:
            return
        last[0] = text
        err_console.print(f"[{time.monotonic() - started:>4.0f} s] {text}", markup=False,
                          highlight=False, soft_wrap=True)

    return update


class StepLedger(Ledger):
    """The ledger `up` writes through, saying on stderr what the provider gave as soon as the
    ledger holds it: the pod id, the GPU rented and its price (so a failed `up` without a
    terminal still leaves a record of what was rented). Every write goes through
    `transaction`, so that is where the change is seen."""

    FIELDS = (("pod_id", "pod id"), ("gpu", "GPU"), ("price_per_hr", "price"))

    def __init__(self, state_dir: Any, say: Callable[[str], None] | None = None) -> None:
        super().__init__(state_dir)
        self._say = say or (lambda text: err_console.print(text, markup=False, highlight=False,
                                                           soft_wrap=True))

    @contextmanager
    def transaction(self) -> Iterator[dict[str, Any]]:
        with super().transaction() as pods:
            before = {tag: tuple(getattr(r, k) for k, _ in self.FIELDS)
                      for tag, r in pods.items()}
            yield pods
        for tag, record in pods.items():
            old = before.get(tag, (None,) * len(self.FIELDS))
            for (key, label), was in zip(self.FIELDS, old, strict=True):
                value = getattr(record, key)
                if value is None or value == was:
                    continue
                shown = f"${value:.3f}/h" if key == "price_per_hr" else str(value)
                self._say(f"{tag}: {label} {shown} ({record.provider})")
