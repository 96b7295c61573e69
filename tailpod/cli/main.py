"""Assemble the `tailpod` app from the per-verb modules."""

from __future__ import annotations

import importlib
from typing import Any

import typer
from typer.core import TyperGroup

from tailpod import __version__
from tailpod.cli.helpfmt import polish_tree


class TailpodGroup(TyperGroup):
    """The root group: once typer has built every command, give their help what it lacks
    (cli/helpfmt.py: metavars, option groups, reflowed docstrings)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        polish_tree(self)


app = typer.Typer(
    cls=TailpodGroup,
    name="tailpod",
    help="Rent a GPU pod for LLM-serving experiments, benchmark it on the pod, and prove billing "
    "stopped.",
    no_args_is_help=True,
    add_completion=True,
    context_settings={"help_option_names": ["-h", "--help"]},
    pretty_exceptions_enable=False,
)

# Each module defines `register(app)`. Order is the order of `tailpod --help`.
COMMAND_MODULES = [
    "tailpod.cli.check",
    "tailpod.cli.pods",
    "tailpod.cli.volume",
    "tailpod.cli.gpus",
    "tailpod.cli.benchmark",
    "tailpod.cli.matrix",
    "tailpod.cli.eval",
    "tailpod.cli.demo",
    "tailpod.cli.checkpoint",
    "tailpod.cli.results",
    "tailpod.cli.decide",
    "tailpod.cli.ssh",
    "tailpod.cli.engine_tools",  # also `logs` (cli/logs.py)
    "tailpod.cli.sandbox",
]


def _version(value: bool) -> None:
    if value:
        typer.echo(f"tailpod {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: bool = typer.Option(
        False, "--version", "-V", callback=_version, is_eager=True, help="Print the version and exit."
    ),
) -> None:
    """tailpod: safe, cheap, honest GPU pods for LLM-serving experiments."""


for _name in COMMAND_MODULES:
    importlib.import_module(_name).register(app)


@app.command("help")
def _help(
    ctx: typer.Context,
    command: list[str] = typer.Argument(None, help="The command, e.g. `eval kl`."),
) -> None:
    """Show the help of tailpod or of one command (the same as COMMAND --help)."""
    from tailpod.cli.common import fail
    from tailpod.errors import ConfigError

    root = ctx.find_root()
    cmd: Any = root.command
    sub_ctx = root
    for name in command or []:
        sub = cmd.get_command(sub_ctx, name) if hasattr(cmd, "get_command") else None
        if sub is None:
            raise fail(ConfigError(f"no such command: {' '.join(command)}",
                                   hint="tailpod --help lists them"))
        sub_ctx = typer.Context(sub, info_name=name, parent=sub_ctx)
        cmd = sub
    typer.echo(cmd.get_help(sub_ctx), nl=False)


def main() -> None:
    app()


if __name__ == "__main__":
    main()
