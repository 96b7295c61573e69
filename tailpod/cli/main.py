"""Assemble the `tailpod` app from the per-verb modules."""

from __future__ import annotations

import importlib

import typer

from tailpod import __version__

app = typer.Typer(
    name="tailpod",
    help="Rent a GPU pod for LLM-serving experiments, benchmark it on the pod, and prove billing "
    "stopped.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)

# Each module defines `register(app)`. Order is the order of `tailpod --help`.
COMMAND_MODULES = [
    "tailpod.cli.check",
    "tailpod.cli.pods",
    "tailpod.cli.volume",
    "tailpod.cli.benchmark",
    "tailpod.cli.matrix",
    "tailpod.cli.eval",
    "tailpod.cli.demo",
    "tailpod.cli.checkpoint",
    "tailpod.cli.results",
    "tailpod.cli.decide",
    "tailpod.cli.ssh",
    "tailpod.cli.engine_tools",
    "tailpod.cli.sandbox",
]


def _version(value: bool) -> None:
    if value:
        typer.echo(f"tailpod {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: bool = typer.Option(
        False, "--version", callback=_version, is_eager=True, help="Print the version and exit."
    ),
) -> None:
    """tailpod: safe, cheap, honest GPU pods for LLM-serving experiments."""


for _name in COMMAND_MODULES:
    importlib.import_module(_name).register(app)


def main() -> None:
    app()


if __name__ == "__main__":
    main()
