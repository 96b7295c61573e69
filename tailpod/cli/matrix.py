"""`tailpod matrix`: the same gated sweep on several cards in parallel, and one report of which card
serves the checkpoint cheapest per token at each concurrency (the run itself: cli/matrix_run.py).
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import typer

from tailpod.cli.common import console, handle_errors, print_json
from tailpod.config import Settings, check_run_settings, load_settings
from tailpod.engines.adapters import CLOUD_ENGINES, require_cloud_engine
from tailpod.engines.base import EngineConfig
from tailpod.errors import BillingNotProven, ConfigError, TailpodError
from tailpod.measure.matrix_run import (
    BudgetPolicy,
    CardSteps,
    CloudSteps,
    CostModel,
    MatrixRun,
    MatrixState,
    SweepSpec,
    price_cards,
    refuse_cards_past_ttl,
    spent_so_far,
    start_line,
    take_over,
)
from tailpod.preflight.cloud import image_cuda, offer_settings
from tailpod.results.matrix import (
    MATRIX_OBJECTIVES,
    MATRIX_PLOT,
    MATRIX_REPORT,
    Card,
    build_matrix,
    check_purchases,
    parse_cards,
    plot_matrix_cost,
    purchase_text,
    render_matrix_markdown,
)
from tailpod.secrets import redact

# -- report ----------------------------------------------------------------------------------


def cells_by_pod(run_dir: Path) -> dict[str, int]:
    """How many finished cells each pod measured (the `pod` every matrix row carries)."""
    from tailpod.measure.sweep import RunDirectory

    counts: dict[str, int] = {}
    if not (run_dir / "rows.jsonl").exists():
        return counts
    for row in RunDirectory(run_dir).read_rows():
        if row.get("kind") == "cell" and isinstance(row.get("pod"), dict):
            tag = str(row["pod"].get("run_tag"))
            counts[tag] = counts.get(tag, 0) + 1
    return counts


def write_matrix_report(state: MatrixState) -> dict[str, Path]:
    """matrix-report.json, matrix.md and the $/Mtok plot, next to matrix.json."""
    from tailpod.results.analysis import analyze
    from tailpod.results.io import load_run

    outcomes = []
    for label, entry in state.data["cards"].items():
        outcome: dict[str, Any] = {"card": label, "status": entry["status"],
                                   "error": entry.get("error"), "spend_usd": entry.get("spend_usd"),
                                   "proof": ", ".join(entry.get("proofs", {}).values()) or None,
                                   "run_tag": entry.get("run_tag"), "run_dir": entry["run_dir"],
                                   "preemptions": entry.get("preemptions") or [],
                                   "cells_by_pod": cells_by_pod(Path(entry["run_dir"])),
                                   "spot": entry.get("spot"), "bid": entry.get("bid"),
                                   "on_demand_per_hr": entry.get("on_demand_per_hr")}
        run_json = Path(entry["run_dir"]) / "run.json"
        if run_json.exists():
            try:
                outcome["analysis"] = analyze(load_run(entry["run_dir"]))
                outcome["run"] = json.loads(run_json.read_text())
            except (TailpodError, ValueError, OSError) as exc:
                outcome["error"] = "; ".join(filter(None, [outcome["error"],
                                                           f"results unreadable: {exc}"]))
        outcomes.append(outcome)
    # `--objective`/`--slo` as the matrix was started (matrix.json); cost, no SLO before them
    decision = state.data.get("decision") or {}
    matrix = build_matrix(outcomes, objective=decision.get("objective", "cost"),
                          slo=decision.get("slo"))
    for label, entry in state.data["cards"].items():
        prices = {p for p in (entry.get("pod_prices") or {}).values() if p is not None}
        if len(prices) > 1:  # a resumed card measured on a new pod: run.json keeps the first price
            matrix["warnings"].append(
                f"{label} was measured on pods at different prices "
                f"({', '.join(f'${p:.2f}/h' for p in sorted(prices))}); its $/Mtok uses the "
                "first pod's price")
    matrix.update(matrix_id=state.data["matrix_id"], budget_usd=state.data["budget_usd"],
                  stopped=state.data.get("stopped"), image=state.data["image"],
                  model=state.data["engine_config"].get("model"))
    directory = state.path.parent
    paths = {"json": directory / "matrix-report.json", "markdown": directory / MATRIX_REPORT,
             "plot": directory / MATRIX_PLOT}
    paths["json"].write_text(redact(json.dumps(matrix, indent=2, default=str)))
    paths["markdown"].write_text(redact(render_matrix_markdown(
        matrix, f"Card matrix {state.data['matrix_id']}: {matrix['model']}")))
    plot_matrix_cost(matrix, paths["plot"])
    return paths


def print_summary(state: MatrixState, paths: dict[str, Path]) -> None:
    matrix = json.loads(paths["json"].read_text())
    if matrix.get("stamp"):
        console.print(f"[bold red]{matrix['stamp']}[/]")
    for band in matrix["bands"]:
        span = f"c={band['from']}" + (f"–{band['to']}" if band["to"] != band["from"] else "")
        console.print(f"  cheapest at {span}: [bold]{band['card']}[/]")
    for table in matrix["tables"]:
        console.print(f"  c={table['concurrency']}: " + (" < ".join(table["ranking"]) or "—")
                      + "  ($/Mtok, lowest first)")
    for card in matrix["cards"]:
        console.print(f"  {card['card']}: {card['status']}"
                      + (f" ({card['error']})" if card.get("error") else "")
                      + f", spent ${card.get('spend_usd') or 0:.4f}")
    console.print(f"matrix report: {paths['markdown']} (plot {paths['plot'].name})")


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


def new_matrix_id() -> str:
    return "mx-" + time.strftime("%Y%m%d-%H%M%S", time.gmtime()) + "-" + os.urandom(2).hex()


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
        # a `:spot` card (given, or of the matrix resumed) takes the bid as `--spot` does: the
        # bid and cap checks of spot_problems
        marked = cards or (MatrixState.load(Path(settings.results_dir) / run_id).cards
                           if run_id else [])
        check_run_settings(dataclasses.replace(settings, spot=True)
                           if any(c.spot for c in marked) else settings)
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


def run_matrix(settings: Settings, *, cards: list[Card] | None, sweep: SweepSpec,
               cost: CostModel, budget: float, parallel: int, base: EngineConfig,
               steps: CardSteps, run_id: str | None = None, dry_run: bool = False,
               allow_unpinned: bool = False, port_for: Callable[[int], int] | None = None,
               policy: BudgetPolicy | None = None,
               report: dict[str, Any] | None = None,
               decision: dict[str, Any] | None = None) -> MatrixRun | None:
    """Price, refuse or start (or resume, with `run_id`) a matrix, run it and write its report.

    None after a dry run. A resumed matrix keeps its cards, sweep, image and cost model; the
    budget covers every pod of the matrix, those of earlier runs included."""
    from tailpod.pods.cloud import pinned_image

    results = Path(settings.results_dir)
    state: MatrixState | None = None
    spent_before = 0.0
    adopted: dict[str, Any] = {}
    if run_id:
        state = MatrixState.load(results / run_id)
        check_purchases(state.cards, settings.spot)  # `--spot` again over `:on-demand` cards
        if cards and [c.label for c in cards] != [c.label for c in state.cards]:
            raise ConfigError("--card differs from the matrix being resumed",
                              hint="leave --card out to resume the same cards")
        sweep = SweepSpec.from_json(state.data["sweep"])
        cost = CostModel(**state.data["cost_model"])
        settings = dataclasses.replace(settings, model=state.data["engine_config"]["model"],
                                       engine=state.data["engine_config"]["engine"])
        pinned, digest = str(state.data["image"]["ref"]), state.data["image"]["digest"]
        if not dry_run:  # before anything is priced or rented: what the killed run left
            adopted = take_over(settings, state, steps, console.print)
        todo = [c for c in state.cards if state.card(c.label)["status"] != "done"]
        # every pod of the matrix from the ledger (matrix.json's spend a killed run never wrote)
        spent_before, source = spent_so_far(settings, state)
        state.data["spent_before_usd"] = spent_before
        console.print(f"resuming {run_id}: {len(state.cards) - len(todo)} card(s) done, "
                      f"${spent_before:.4f} spent so far (every pod of the matrix, from "
                      f"{source})")
    else:
        if not cards:
            raise ConfigError("no cards given", hint='pass --card "provider:GPU[xN]"')
        refuse_cards_past_ttl(settings, cards, sweep, cost)  # before the registry is asked
        pinned, digest = pinned_image(settings, allow_unpinned)
        todo = cards
    # priced as `up` rents: hosts must reach the image's CUDA (the one offer query, issue 37)
    cuda = image_cuda(dataclasses.replace(settings, image=pinned))[0]
    prices = price_cards(offer_settings(settings, cuda), todo, sweep, cost,
                         budget - spent_before, pinned)
    for label, entry in prices.items():
        line = (f"${entry['price_per_hr']:.2f}/h, projected ${entry['projected_usd']:.2f} "
                f"({purchase_text(entry)})"
                if entry["price_per_hr"] is not None else f"cannot run: {entry['problem']}")
        console.print(f"  {label}: {line}")
        console.print(f"    start: {start_line(entry['start'])}")
    total = sum(e["projected_usd"] or 0 for e in prices.values())
    if report is not None:
        report.update(dry_run=dry_run, budget_usd=budget, prices=prices,
                      projected_usd=round(total, 4))
    console.print(f"projected spend ${total:.2f} of ${budget - spent_before:.2f} left in the "
                  f"budget ({sweep.projected_cells()} cells per card, at most)")
    if dry_run:
        return None
    if state is None:
        assert cards is not None
        matrix_id = new_matrix_id()
        state = MatrixState.create(results / matrix_id, matrix_id, cards, budget=budget,
                                   parallel=parallel, image=pinned, digest=digest, cfg=base,
                                   sweep=sweep, cost=cost)
    else:
        state.data.update(budget_usd=budget, parallel=parallel, stopped=None)
    if decision is not None:  # the report's ranking: kept in matrix.json, a resume may change it
        state.data["decision"] = decision
    for label, entry in prices.items():
        fields: dict[str, Any] = {"projected_usd": entry["projected_usd"],
                                  "price_per_hr": entry["price_per_hr"],
                                  "projected_start": entry["start"]}
        fields.update(spot=bool(entry.get("spot")), bid=entry.get("bid"))  # the purchase
        if entry.get("spot"):
            fields.update(on_demand_per_hr=entry.get("on_demand_per_hr"))
        if entry["problem"]:
            fields.update(status="failed", error=entry["problem"])
        state.update(label, **fields)
    console.print(f"matrix {state.data['matrix_id']}: {len(todo)} card(s), {parallel} at a time, "
                  f"budget ${budget:.2f}")
    run = MatrixRun(settings, state, steps, say=console.print, policy=policy, port_for=port_for,
                    adopted=adopted)
    try:
        run.run(only={label for label, e in prices.items() if not e["problem"]})
    finally:
        paths = write_matrix_report(state)
        if report is not None:
            report.update(matrix_id=state.data["matrix_id"], paths=paths)
        print_summary(state, paths)
    return run


def matrix_document(report: dict[str, Any]) -> dict[str, Any]:
    """`matrix --json`: the projection, and after a run the report's own matrix.json."""
    doc = {k: v for k, v in report.items() if k != "paths"}
    paths = report.get("paths")
    if paths:
        doc["report"] = json.loads(Path(paths["json"]).read_text())
        doc["paths"] = {k: str(v) for k, v in paths.items()}
    return doc
