"""`tailpod eval kl`: how faithful is a checkpoint to a reference, measured on the pod.

KL(reference ‖ candidate) and top-1 agreement at every position of the reference's greedy
continuations, several candidates served one after the other on one pod (docs/kl-eval.md).
"""

from __future__ import annotations

import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import typer
from rich.table import Table

from tailpod.cli.common import console, handle_errors, ledger_for, print_json, settings_from
from tailpod.config import Settings, check_run_id, run_path
from tailpod.errors import ConfigError
from tailpod.ledger import Ledger, PodRecord
from tailpod.measure.sweep import RunContext, RunDirectory
from tailpod.pods.kinds import kind_for

eval_app = typer.Typer(
    name="eval",
    help="Evaluate checkpoints against a reference on the pod (KL divergence, top-1 agreement).",
    no_args_is_help=True,
)


def _fmt(v: float | None, spec: str = ".4g") -> str:
    return "—" if v is None else format(v, spec)


def results_table(doc: dict[str, Any]) -> Table:
    ref = doc.get("reference") or {}
    table = Table(
        title=f"KL vs reference {ref.get('model')} — top-{doc['top_k']}, "
        f"{ref.get('positions')} positions (a lower bound: docs/kl-eval.md)"
    )
    for col in ("candidate", "KL mean", "p90", "p99", "max", "top-1 agree", "ref mass covered",
                "greedy diverges"):  # fmt: skip
        table.add_column(col)
    for c in doc.get("candidates", []):
        k = c["kl"]
        inf = f" +{k['infinite']}∞" if k["infinite"] else ""
        med = c.get("first_divergence_median")
        table.add_row(
            c["label"],
            _fmt(k["mean"]) + inf,
            _fmt(k["p90"]),
            _fmt(k["p99"]),
            _fmt(k["max"]),
            _fmt(c["top1_agreement"], ".1%"),
            _fmt((c.get("ref_mass_covered") or {}).get("mean"), ".1%"),
            f"{c['diverged_prompts']}/{c['prompts']}"
            + (f" (median @{med:g})" if med is not None else ""),
        )
    return table


def _up_here(
    settings: Settings, ledger: Ledger, model: str, context_length: int | None, top_k: int
) -> PodRecord:
    """An engine on this machine for the evaluation, through its pod kind as `up` starts one."""
    from tailpod.cli.pods import engine_config, startup_progress
    from tailpod.measure.kl_eval import with_max_logprobs
    from tailpod.pods.base import UpOptions

    cfg = engine_config(replace(settings, model=model), 0, None, None, context_length or 1024,
                        None, True)  # fmt: skip
    cfg = with_max_logprobs(cfg, top_k)
    with startup_progress(f"starting {cfg.engine} for the KL evaluation") as update:
        return kind_for(settings.provider).up(settings, cfg, ledger, update, UpOptions()).record


def _down(settings: Settings, ledger: Ledger, run_tag: str, say: Any) -> None:
    record = ledger.get(run_tag)
    if record is None or record.status == "terminated":
        return
    # raises (exit 3) unless the engine is proven gone
    kind_for(record.provider).down(settings, ledger, record)
    say(f"[green]down[/] {run_tag}: the engine this evaluation started is gone (proven)")


def register(app: typer.Typer) -> None:
    @eval_app.command("kl")
    @handle_errors
    def kl(
        tag: str = typer.Argument(None, help="Pod to use; default: the only active one."),
        reference: str = typer.Option(
            None, help="Reference checkpoint (e.g. the BF16 one); default: what the pod serves."
        ),
        candidate: list[str] = typer.Option(
            None, "--candidate", help="Candidate checkpoint, repeatable (FP8, NVFP4, …)."
        ),
        run_tag: str = typer.Option(None, "--run-tag", hidden=True,
                                    help="The pod, as TAG (the old spelling)."),
        provider: str = typer.Option(
            None, help="local: use the local engine, starting one (and stopping it after) if none runs."
        ),
        reference_url: str = typer.Option(None, help="A running reference endpoint instead of a pod."),
        candidate_url: list[str] = typer.Option(
            None, "--candidate-url", help="A running candidate endpoint, repeatable."
        ),
        engine: str = typer.Option("auto", help="With URLs: vllm, sglang or auto (from /metrics)."),
        top_k: int = typer.Option(20, min=1, help="Logprobs per position (vLLM > 20 raises --max-logprobs)."),
        max_tokens: int = typer.Option(128, min=1, help="Greedy continuation length per prompt."),
        prompts: Path = typer.Option(None, help="Prompt set JSON (default: the shipped kl_prompts.json)."),
        prompt_classes: str = typer.Option(None, help="Only these classes, e.g. prose,code."),
        run_id: str = typer.Option(None, help="Run directory name (default: <run tag>-kl)."),
        port: int = typer.Option(None, help="Engine port when this command starts the local engine."),
        context_length: int = typer.Option(None, help="Context length of a local engine it starts."),
        restore: bool = typer.Option(
            True, help="Serve the pod's original model again afterwards (one more restart)."
        ),
        keep: bool = typer.Option(False, help="Keep a local engine this command started."),
        json_out: bool = typer.Option(False, "--json", help="Print kl.json."),
    ) -> None:
        """KL(reference ‖ candidate) and top-1 agreement on the reference's greedy tokens.

        Each arm is served on the same pod in turn; the probe collects top-k logprobs there with
        teacher forcing, so every candidate is scored on exactly the reference's tokens.
        """
        from tailpod.measure.kl_eval import (
            EndpointLogprobSource,
            kl_run_id,
            label_arms,
            load_prompts,
            run_kl_eval,
        )

        if run_id is not None:  # before an engine is started, a pod waited on or a file written
            check_run_id(run_id)
        if tag and run_tag and tag != run_tag:
            raise ConfigError(f"two pods named: {tag} and --run-tag {run_tag}",
                              hint="give the pod once, as TAG")
        run_tag = tag or run_tag
        classes = [c for c in (prompt_classes or "").split(",") if c]
        prompt_set = load_prompts(prompts, classes or None)
        candidates = list(candidate or [])
        say = (lambda msg: None) if json_out else (lambda msg: console.print(msg))
        t0 = time.time()
        if reference_url or candidate_url:
            if not (reference_url and candidate_url):
                raise ConfigError("give both --reference-url and at least one --candidate-url")
            if candidates and len(candidates) != len(candidate_url):
                raise ConfigError("give one --candidate name per --candidate-url, or none")
            names = candidates or [f"candidate-{i + 1}" for i in range(len(candidate_url))]
            arms = label_arms(reference or "reference", names, reference_url, candidate_url)
            settings = settings_from()
            rid = run_id or kl_run_id(settings.results_dir, time.strftime("urls-%Y%m%d-%H%M%S"))
            ctx = RunContext(run_id=rid, provider="endpoints", model=arms[0].model, engine=engine)
            doc = run_kl_eval(
                EndpointLogprobSource(engine), arms, prompt_set,
                RunDirectory(run_path(settings.results_dir, rid)), ctx, top_k, max_tokens, say,
            )  # fmt: skip
        else:
            if not candidates:
                raise ConfigError("give at least one --candidate checkpoint")
            settings = settings_from(provider=provider, port=port)
            ledger = ledger_for(settings)
            started_here = None
            if run_tag:
                record = ledger.resolve(run_tag)
            elif provider and kind_for(settings.provider).starts_engine_when_none_held(
                    settings, ledger):
                if not reference:
                    raise ConfigError("--reference is needed to start a local engine")
                record = _up_here(settings, ledger, reference, context_length, top_k)
                started_here = record.run_tag
                say(f"started a local engine for the evaluation: {record.run_tag}")
            else:
                record = ledger.resolve(None)
            try:
                from tailpod.cli.pods import startup_progress
                from tailpod.measure.kl_eval import kl_on_pod

                with startup_progress("KL evaluation") as progress:
                    doc = kl_on_pod(
                        settings, ledger, record, reference, candidates, prompt_set, top_k,
                        max_tokens, run_id, restore and started_here is None, say, progress,
                    )  # fmt: skip
            finally:
                if started_here and not keep:
                    _down(settings, ledger, started_here, say)
        if json_out:
            print_json(doc)
            return
        console.print(results_table(doc))
        for note in doc.get("notes") or []:
            console.print(f"note: {note}")
        console.print(f"results: {settings.results_dir / doc['run_id']} ({time.time() - t0:.0f} s)")

    app.add_typer(eval_app, name="eval")
