"""`tailpod checkpoint build`: the tiny offline checkpoint the demo and the tests serve."""

from __future__ import annotations

from pathlib import Path

import typer

from tailpod.cli.common import console, handle_errors
from tailpod.errors import ConfigError


def register(app: typer.Typer) -> None:
    group = typer.Typer(
        help="Make checkpoints offline (tokenizer + small model).", no_args_is_help=True
    )
    app.add_typer(group, name="checkpoint")

    @group.command("build")
    @handle_errors
    def build(
        out_dir: Path = typer.Argument(..., help="Directory to write the checkpoint into."),
        kind: str = typer.Option(
            "target", help="target (Qwen3), draft (smaller Qwen3) or mimo (Qwen2 + one MTP layer)."
        ),
        seed: int = typer.Option(0, help="Weights seed; the same seed gives the same bytes."),
    ) -> None:
        """Build a small, deterministic checkpoint that vLLM serves, in a few seconds."""
        from tailpod.engines.tiny_checkpoint import KINDS, build_checkpoint

        if kind not in KINDS:
            raise ConfigError(f"unknown kind {kind!r}", hint=f"choose one of: {', '.join(KINDS)}")
        path = build_checkpoint(out_dir, kind=kind, seed=seed)
        console.print(f"built {kind} checkpoint in {path}")
