"""`tailpod matrix`: the same gated sweep on several cards in parallel, and one report of which card
serves the checkpoint cheapest per token at each concurrency (the run itself, its pricing, resume
and report: measure/matrix_run.py `run_matrix`).
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import typer

from tailpod.cli.common import console, handle_errors, print_json
from tailpod.config import (
    Settings,
    check_run_id,
    check_run_settings,
    load_settings,
    replace_settings,
)
from tailpod.engines.adapters import CLOUD_ENGINES, require_cloud_engine
from tailpod.errors import BillingNotProven, ConfigError, TailpodError
from tailpod.measure import matrix_run
from tailpod.measure.matrix_run import (
    CloudSteps,
    CostModel,
    MatrixRun,
    SweepSpec,
)
from tailpod.results.matrix import (
    MATRIX_OBJECTIVES,
    parse_cards,
)


def finish(run: MatrixRun) -> None:
    """Raise with the right exit code when a pod is not proven down or a card did not finish."""
    if run.unproven:
        raise BillingNotProven(
            f"teardown NOT proven for {', '.join(sorted(run.unproven))}: they may still bill",
            hint="run `tailpod down --all`")
    unfinished = [label for label, e in run.state.data["cards"].items() if e["status"] != "done"]
    if unfinished:
        raise TailpodError(
            f"{len(unfinished)} card(s) did not finish: {', '.join(unfinished)}; every pod was "
            "torn down with its billing proof",
            hint=f"resume with `tailpod matrix --run-id {run.state.data['matrix_id']} "
                 "--budget ...`")


def register(app: typer.Typer) -> None:
    @app.command()
    @handle_errors
    def matrix(
        card: list[str] = typer.Option(
            None, "--card", help='A card, repeatable: provider:GPU, or provider:GPUxN for N GPUs '
            '(tensor parallelism), e.g. "runpod:NVIDIA H100 80GB HBM3", "vastai:RTX 4090x2"; '
            'append :spot for a spot card beside on-demand ones ("vastai:RTX 4090:spot").'),
        budget: float = typer.Option(
            None, help="Total USD cap for the whole matrix: checked against the projected spend "
            "before renting and against the live spend while it runs."),
        parallel: int = typer.Option(2, help="Pods rented at the same time, at most."),
        model: str = typer.Option(None, help="Checkpoint (Hub id or pod path; env TAILPOD_MODEL)."),
        engine: str = typer.Option(
            None, help=f"{' or '.join(CLOUD_ENGINES)} (env TAILPOD_ENGINE)."),
        image: str = typer.Option(None, help="Engine image; pinned once, the same digest on "
                                  "every card."),
        spec_k: str = typer.Option("0", help="SPEC_K values, e.g. 0,1,2,3 (0 = plain)."),
        spec_method: str = typer.Option("mtp", help="Speculation method of the K > 0 arms."),
        draft_model: str = typer.Option(None, help="Draft checkpoint for draft_model arms."),
        concurrency: str = typer.Option("1,2,4,8,16,32,64", help="Concurrency levels."),
        reps: int = typer.Option(3, min=1, help="Repetitions of every cell."),
        max_tokens: int = typer.Option(256, min=2, help="Output tokens per request."),
        requests_per_cell: int = typer.Option(None, help="Measured requests per cell."),
        prompt_classes: str = typer.Option("prose", help="Prompt classes: prose, code, "
                                           "structured, tools."),
        context_length: int = typer.Option(None, help="Maximum context length."),
        max_running_requests: int = typer.Option(None, help="Engine request slots (same on "
                                                 "every card)."),
        max_price: float = typer.Option(None, help="Refuse any pod above this $/hr."),
        spot: bool = typer.Option(
            None, "--spot/--no-spot", help="Rent every card as a spot (interruptible) pod, priced "
            "and budgeted at its bid; a card whose provider sells no spot, or one marked "
            ":on-demand, is refused (env TAILPOD_SPOT)."),
        bid: float = typer.Option(
            None, "--bid", metavar="USD/H", help="With --spot or :spot cards: the bid per "
            "machine in $/h of every spot card "
            "(default: each offer's minimum bid; env TAILPOD_BID)."),
        setup_minutes: float = typer.Option(
            None, help="Projection: rent, boot, image pull and first engine start per card "
            "(default: what an earlier run of the card and engine billed to serving, else "
            f"{CostModel.setup_min:g})."),
        restart_minutes: float = typer.Option(
            None, help="Projection: each further arm's engine restart (default: an earlier "
            "run's measured restarts or startup phases, else "
            f"{CostModel.restart_min:g})."),
        cell_minutes: float = typer.Option(CostModel.cell_min, help="Projection: one cell."),
        run_id: str = typer.Option(None, help="Resume this matrix: finished cards and cells "
                                   "are skipped."),
        dry_run: bool = typer.Option(False, help="Price the cards and project the cost; rent "
                                     "nothing."),
        tailnet: bool = typer.Option(True, help="Join each pod to the tailnet."),
        allow_unpinned: bool = typer.Option(False, help="Accept a mutable image tag."),
        objective: str = typer.Option(
            "cost", help="How the report ranks cards per load band: cost ($/Mtok), goodput "
            "($/Mtok of the tokens that met --slo) or throughput."),
        slo: str = typer.Option(None, "--slo", "--goodput",
                                help="Latency targets for the goodput objective, e.g. "
                                "ttft_ms=500,tpot_ms=50 or vLLM's 'ttft:500 tpot:50' (met per "
                                "request, from its rows)."),
        json_out: bool = typer.Option(False, "--json", help="Print the prices (with --dry-run) "
                                      "or the matrix report as JSON."),
    ) -> None:
        """Compare cards: the same gated sweep on each, in parallel, and which is cheapest per token.

        Every pod is rented with the same image digest, model, arms, prompts and plan, measured on
        the pod, and torn down with its billing proof. The report (matrix.md) ranks the cards by
        $/Mtok at each concurrency and names any card that failed.
        """
        from tailpod.cli.benchmark import int_list, prompt_class_list, slo_spec
        from tailpod.cli.pods import engine_config
        from tailpod.engines.base import MAX_SPEC_K, check_spec_method
        from tailpod.engines.checkpoint import check_arms

        if run_id is not None:  # before the matrix it names is read, priced or resumed
            check_run_id(run_id)
        if budget is None:
            raise ConfigError("--budget is required: the total USD the matrix may spend")
        if not math.isfinite(budget) or budget <= 0:
            raise ConfigError(f"--budget must be a positive number of USD, got {budget!r}")
        for flag, minutes in (("--setup-minutes", setup_minutes),
                              ("--restart-minutes", restart_minutes),
                              ("--cell-minutes", cell_minutes)):
            if minutes is not None and (not math.isfinite(minutes) or minutes < 0):
                raise ConfigError(f"{flag} must be a non-negative number, got {minutes!r}")
        if not cell_minutes > 0:  # a cell of no time would let the budget's one-cell floor pass
            raise ConfigError(f"--cell-minutes must be more than 0, got {cell_minutes!r}")
        if parallel < 1:
            raise ConfigError(f"--parallel must be at least 1 pod at a time, got {parallel}")
        if requests_per_cell is not None and requests_per_cell < 1:
            raise ConfigError(f"--requests-per-cell must be at least 1, got {requests_per_cell}")
        check_spec_method(spec_method)
        if objective not in MATRIX_OBJECTIVES:
            raise ConfigError(f"--objective must be one of {', '.join(MATRIX_OBJECTIVES)}")
        slo_targets = slo_spec(slo) if slo else None
        if objective == "goodput" and not slo_targets:
            raise ConfigError("--objective goodput needs --slo", hint="e.g. --slo ttft_ms=500")
        settings = load_settings(overrides={"model": model, "engine": engine, "image": image,
                                            "max_price": max_price, "spot": spot,
                                            "bid": bid})
        cards = parse_cards(card, bool(settings.spot)) if card else None
        # a `:spot` card (given, or of the matrix resumed) takes the bid as `--spot` does
        check_run_settings(replace_settings(settings, spot=True)
                           if matrix_run.marks_spot(settings, cards, run_id) else settings)
        require_cloud_engine(settings.engine)
        ks = int_list(spec_k, "--spec-k", maximum=MAX_SPEC_K)
        if any(ks) and spec_method == "draft_model" and not draft_model:
            raise ConfigError("--spec-method draft_model needs --draft-model DIR")
        sweep = SweepSpec(tuple(sorted(set(ks))), spec_method, draft_model,
                          tuple(int_list(concurrency, "--concurrency", minimum=1)), reps,
                          max_tokens, requests_per_cell, tuple(prompt_class_list(prompt_classes)))
        if not run_id and not settings.model:
            raise ConfigError("no model given", hint="pass --model or set TAILPOD_MODEL")
        base = engine_config(settings, 0, None, None, context_length, max_running_requests, False)
        if settings.model:  # every card's arms, before any card is priced or rented
            check_arms([a.config for a in sweep.plan(base).arms], settings)
        report: dict[str, Any] = {}
        try:
            run = run_matrix(settings, cards=cards, sweep=sweep,
                             cost=CostModel(
                                 CostModel.setup_min if setup_minutes is None else setup_minutes,
                                 CostModel.restart_min if restart_minutes is None
                                 else restart_minutes, cell_minutes,
                                 pin_setup=setup_minutes is not None,
                                 pin_restart=restart_minutes is not None),
                             budget=budget, parallel=parallel, base=base, run_id=run_id,
                             dry_run=dry_run, allow_unpinned=allow_unpinned,
                             steps=CloudSteps(use_tailnet=tailnet, allow_unpinned=allow_unpinned),
                             report=report, decision={"objective": objective,
                                                      "slo": slo_targets})
        finally:
            if json_out and report:
                print_json(matrix_document(report))
        if run is not None:
            finish(run)


def run_matrix(settings: Settings, **options: Any) -> MatrixRun | None:
    """`matrix`'s run (measure/matrix_run.py `run_matrix`: price, refuse or start or resume, run,
    write the report) with its lines on this terminal."""
    return matrix_run.run_matrix(settings, say=console.print, **options)


def matrix_document(report: dict[str, Any]) -> dict[str, Any]:
    """`matrix --json`: the projection, and after a run the report's own matrix.json."""
    doc = {k: v for k, v in report.items() if k != "paths"}
    paths = report.get("paths")
    if paths:
        doc["report"] = json.loads(Path(paths["json"]).read_text())
        doc["paths"] = {k: str(v) for k, v in paths.items()}
    return doc
