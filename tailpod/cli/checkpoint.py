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
        # No metavar="SIZE" here: typer 0.27 named an option after a metavar equal to its name
        # (`--SIZE`), so `--size` was "No such option" (helpfmt gives SIZE from the name).
        size: str = typer.Option(
            "tiny",
            help="tiny (a few MB, for the CPU engine), gpu (hidden 2048, about 0.5 B "
            "parameters) or gpu8b (Qwen3-8B's shape, 14 GB: the GPU's memory bandwidth sets the "
            "pace); gpu and gpu8b decide each token by a wide margin.",
        ),
        draft_disagree: float = typer.Option(
            0.3, metavar="FRACTION",
            help="With --size gpu or gpu8b and --kind draft: the share of tokens where the draft "
            "proposes another token than the target's.",
        ),
    ) -> None:
        """Build a small, deterministic checkpoint that vLLM serves, in a few seconds."""
        from tailpod.engines.tiny_checkpoint import KINDS, SIZES, build_checkpoint

        if kind not in KINDS:
            raise ConfigError(f"unknown kind {kind!r}", hint=f"choose one of: {', '.join(KINDS)}")
        if size not in SIZES:
            raise ConfigError(f"unknown size {size!r}", hint=f"choose one of: {', '.join(SIZES)}")
        if not 0.0 <= draft_disagree <= 1.0:
            raise ConfigError(
                f"--draft-disagree {draft_disagree} is not a fraction", hint="give 0 to 1"
            )
        path = build_checkpoint(
            out_dir, kind=kind, seed=seed, size=size, draft_disagree=draft_disagree
        )
        console.print(f"built {kind} checkpoint ({size}) in {path}")
