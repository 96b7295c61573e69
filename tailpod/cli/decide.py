"""`tailpod decide`: from one run, several, or a matrix, the best arm per load band under an
objective, and the deployment that follows (decision.json; docs/decide.md)."""

from __future__ import annotations

import json
from pathlib import Path

import typer

from tailpod.cli.common import console, handle_errors, print_json
from tailpod.cli.markdown_out import print_markdown
from tailpod.errors import ConfigError


def register(app: typer.Typer) -> None:
    @app.command("decide")
    @handle_errors
    def decide(
        runs: list[str] = typer.Argument(
            ..., help="Run directories (or run ids under the results dir)."
        ),
        objective: str = typer.Option(
            "throughput", help="throughput, goodput (needs an SLO) or cost (USD/Mtok)."
        ),
        slo: str | None = typer.Option(
            None, "--slo", "--goodput", help="Goodput targets, e.g. ttft_ms=500,tpot_ms=50 or "
            "vLLM's 'ttft:500 tpot:50' (default: the one "
            "the run was measured with)."
        ),
        out: Path | None = typer.Option(
            None, "--out", help="Where decision.json goes (default: the first run's directory)."
        ),
        as_json: bool = typer.Option(False, "--json", help="Print the decision as JSON."),
    ) -> None:
        """The best arm per load band and prompt class, the crossover and knee it rests on, and
        a deployment: one static arm, or two lanes with the spec lane's admission limit."""
        from tailpod.cli.benchmark import slo_spec
        from tailpod.cli.results import resolve_run
        from tailpod.results.analysis import analyze
        from tailpod.results.decide import DECISION_FILE, OBJECTIVES, compute, render
        from tailpod.results.io import load_run

        if objective not in OBJECTIVES:
            raise ConfigError(f"--objective must be one of {', '.join(OBJECTIVES)}")
        targets = slo_spec(slo) if slo else None
        loaded = [load_run(resolve_run(r)) for r in runs]
        dec = compute(loaded, objective, targets, analyses=[analyze(r) for r in loaded])
        first = loaded[0].path
        target = out if out is not None else (first / DECISION_FILE if first else
                                              Path(DECISION_FILE))
        if target.is_dir():
            target = target / DECISION_FILE
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(json.dumps(dec, indent=2, sort_keys=True, default=str) + "\n")
        if as_json:
            print_json(dec)
            return
        # rendered on a terminal, plain markdown in a pipe (cli/markdown_out.py)
        print_markdown("\n".join(render(dec)) or "no band has a usable arm", console)
        typer.echo(f"decision: {target}")
