"""`tailpod benchmark`: the sweep, run where the engine runs, against 127.0.0.1."""

from __future__ import annotations

import math
import re
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import typer
from rich.table import Table

from tailpod.cli.common import (
    console,
    err_console,
    handle_errors,
    ledger_for,
    print_json,
    settings_from,
)
from tailpod.cli.pods import startup_progress
from tailpod.cli.sweep_progress import cell_progress_line
from tailpod.config import Settings, check_run_id, run_path, spot_problems
from tailpod.engines.adapters import get_adapter
from tailpod.engines.base import (
    MAX_SPEC_K,
    SPEC_METHODS,
    EngineConfig,
    check_spec_method,
    check_tool_parser,
)
from tailpod.engines.checkpoint import check_arms
from tailpod.engines.versions import parse_version
from tailpod.engines.vllm import PER_REQUEST_SPEC_FLAG, per_request_spec_args
from tailpod.errors import ConfigError
from tailpod.ledger import PodRecord
from tailpod.measure.benchmark import replacement_settings, run_benchmark
from tailpod.measure.deploy import (
    check_served_lanes_sweep,
    served_lanes,
    served_lanes_arm,
)
from tailpod.measure.plan import (
    ARRIVAL_PROCESSES,
    Arm,
    SweepPlan,
    check_open_loop_spans,
    check_trace_context,
    rate_text,
    spec_arms,
    trace_spec,
)
from tailpod.measure.sweep import RunContext, RunDirectory, check_resumable
from tailpod.results.io import STAMP


def int_list(text: str, what: str, minimum: int = 0, maximum: int | None = None) -> list[int]:
    """A comma list of integers, each at least `minimum`: no empty entry ("1,,2" is refused,
    not read as 1,2), checked before anything waits on a pod."""
    parts = text.replace(" ", "").split(",")
    if parts and parts[-1] == "" and len(parts) > 1:
        parts = parts[:-1]  # one trailing comma is harmless
    if not parts or any(p == "" for p in parts):
        raise ConfigError(f"{what} must be a comma list of integers with no empty entry, "
                          f"got {text!r}")
    try:
        values = [int(x) for x in parts]
    except ValueError:
        raise ConfigError(f"{what} must be a comma list of integers, got {text!r}") from None
    low = [v for v in values if v < minimum]
    if low:
        raise ConfigError(f"{what} values must be at least {minimum}, got {low[0]}")
    high = [v for v in values if maximum is not None and v > maximum]
    if high:
        raise ConfigError(f"{what} values must be at most {maximum}, got {high[0]}")
    return values


def prompt_class_list(text: str, what: str = "--prompt-classes") -> list[str]:
    """Prompt classes the pod agent ships, checked before anything waits on a pod."""
    from tailpod.agent.probes.prompt_classes import builtin_prompt_classes

    known = sorted(builtin_prompt_classes())
    names = [p for p in text.replace(" ", "").split(",") if p]
    if not names:
        raise ConfigError(f"{what} needs at least one class", hint=", ".join(known))
    unknown = [n for n in names if n not in known]
    if unknown:
        raise ConfigError(f"unknown prompt class {unknown[0]!r} in {what}",
                          hint=f"one of {', '.join(known)}")
    return names


def rate_list(text: str) -> list[float]:
    """`--request-rate 1,2,4,inf`: requests per second, each > 0 (inf: all at once), ascending
    (the ladder stops above a rate that saturates the arm, so its order is the measuring order),
    no empty entry ("1,,2" is refused as --concurrency refuses it)."""
    out: list[float] = []
    parts = text.replace(" ", "").split(",")
    if len(parts) > 1 and parts[-1] == "":
        parts = parts[:-1]  # one trailing comma is harmless
    for part in parts:
        if not part:
            raise ConfigError(f"--request-rate must be a comma list of rates with no empty "
                              f"entry, got {text!r}")
        try:
            value = math.inf if part.lower() == "inf" else float(part)
        except ValueError:
            raise ConfigError(f"--request-rate must be a comma list of numbers or inf, got "
                              f"{part!r}") from None
        if math.isnan(value) or value <= 0:
            raise ConfigError(f"--request-rate values must be > 0, got {part!r}")
        out.append(value)
    if not out:
        raise ConfigError("--request-rate needs at least one rate")
    if any(b <= a for a, b in zip(out, out[1:], strict=False)):
        raise ConfigError(f"--request-rate must ascend, each rate once (the ladder stops above "
                          f"a rate that saturates the arm), got {text!r}",
                          hint="--request-rate " + ",".join(rate_text(r) for r in sorted(set(out))))
    return out


SLO_KEYS = ("ttft_ms", "tpot_ms", "e2el_ms")


# vLLM's `vllm bench serve --goodput ttft:500 tpot:50` names, in ms (its benchmark docs).
VLLM_GOODPUT_KEYS = {"ttft": "ttft_ms", "tpot": "tpot_ms", "e2el": "e2el_ms"}


def slo_spec(text: str) -> dict[str, float]:
    """`--slo ttft_ms=500,tpot_ms=50`: any of ttft_ms, tpot_ms, e2el_ms, each > 0. vLLM's
    `--goodput ttft:500 tpot:50` form reads the same (`KEY:MS`, spaces or commas between)."""
    out: dict[str, float] = {}
    for part in re.split(r"[,\s]+", text.strip()):
        if not part:
            continue
        key, sep, raw = part.partition("=")
        if not sep:
            short, sep, raw = part.partition(":")
            key = VLLM_GOODPUT_KEYS.get(short, short) if sep else key
        if not sep or key not in SLO_KEYS:
            raise ConfigError(f"--slo takes {', '.join(k + '=MS' for k in SLO_KEYS)} (or vLLM's "
                              f"{' '.join(k + ':MS' for k in VLLM_GOODPUT_KEYS)}); got {part!r}")
        try:
            value = float(raw)
        except ValueError:
            raise ConfigError(f"--slo {key} must be a number of ms, got {raw!r}") from None
        if not math.isfinite(value) or value <= 0:
            raise ConfigError(f"--slo {key} must be > 0 ms")
        if key in out:
            raise ConfigError(f"--slo names {key} twice ({out[key]:g} and {value:g}): give each "
                              f"target once")
        out[key] = value
    if not out:
        raise ConfigError("--slo needs at least one target")
    return out


def open_loop_options(
    request_rate: str | None, arrival: str, burstiness: float, slo: str | None,
    slo_percentile: float,
) -> tuple[list[float], dict[str, float] | None]:
    """The open-loop flags, checked before anything waits on a pod."""
    if arrival not in ARRIVAL_PROCESSES:
        raise ConfigError(f"--arrival must be one of {', '.join(ARRIVAL_PROCESSES)}")
    if not math.isfinite(burstiness) or burstiness <= 0:
        raise ConfigError("--burstiness must be > 0 (1.0 = Poisson)")
    if burstiness != 1.0 and arrival != "gamma":
        raise ConfigError("--burstiness shapes gamma arrivals", hint="--arrival gamma")
    if not 0 < slo_percentile <= 100:
        raise ConfigError("--slo-percentile must be in (0, 100]")
    rates = rate_list(request_rate) if request_rate else []
    if not rates and (arrival != "poisson" or burstiness != 1.0):
        raise ConfigError("--arrival and --burstiness need --request-rate")
    return rates, slo_spec(slo) if slo else None


def _with_tool_parser(base: EngineConfig, classes: list[str], parser: str | None
                      ) -> EngineConfig:
    """`base` with the engine's tool-call parser when the run measures the tools class (vLLM
    refuses a forced tool_choice without one, SGLang reads no tool call: docs/engines.md); the
    choice is said when tailpod made it."""
    picked = get_adapter(base.engine).tool_parser_for(base.model)  # None: the engine takes none
    if parser is not None and picked is None:
        raise ConfigError(f"--tool-call-parser names a vLLM or SGLang parser; this pod serves "
                          f"{base.engine}", hint="drop --tool-call-parser")
    if parser is not None:  # again, now that the settings registered the secrets by value
        check_tool_parser(parser)
    if "tools" not in classes or picked is None:
        return base
    if parser is None:
        parser, why = picked
        err_console.print(f"tools class: {base.engine} arms start with --tool-call-parser "
                          f"{parser} ({why})")
    return replace(base, tool_call_parser=parser)


def soak_seconds(minutes: float | None) -> float | None:
    """`--soak MINUTES` as seconds, checked before anything waits on a pod: a finite number of
    minutes > 0 that fits one `probe run` call (agent/probes/load.py SOAK_MAX_S)."""
    from tailpod.agent.probes.load import SOAK_MAX_S

    if minutes is None:
        return None
    if not math.isfinite(minutes) or minutes <= 0:
        raise ConfigError(f"--soak must be a number of minutes > 0, got {minutes:g}")
    if minutes * 60.0 > SOAK_MAX_S:
        raise ConfigError(f"--soak {minutes:g} is longer than one soak cell may run "
                          f"({SOAK_MAX_S / 60:g} minutes)", hint=f"--soak {SOAK_MAX_S / 60:g}")
    return minutes * 60.0


def check_soak_fits(soak_s: float | None, arms: int, record: PodRecord, now: float) -> None:
    """Every arm's soak cell must end before the pod's TTL does (the dead-man switch would end
    the pod mid-cell), and each one inside the pod's heartbeat timeout where its dead-man switch
    has one (no heartbeat reaches the pod while one cell runs): ConfigError (exit 2) before
    anything waits."""
    if soak_s is None:
        return
    deadman = record.extra.deadman or {}
    heartbeat_timeout_s = deadman.get("heartbeat_timeout_s")
    if isinstance(heartbeat_timeout_s, (int, float)) and heartbeat_timeout_s > 0 \
            and soak_s >= heartbeat_timeout_s:
        raise ConfigError(f"--soak {soak_s / 60:g} minutes is not shorter than the heartbeat "
                          f"timeout ({heartbeat_timeout_s / 60:g} minutes): the pod's dead-man "
                          "switch would stop it mid-cell", hint="a shorter --soak, or raise "
                          "TAILPOD_HEARTBEAT_TIMEOUT before `up`")
    left = None if record.ttl_expires_at is None else record.ttl_expires_at - now
    if left is not None and arms * soak_s >= left:
        raise ConfigError(f"--soak {soak_s / 60:g} minutes for {arms} arm(s) needs "
                          f"{arms * soak_s / 60:g} minutes, but {record.run_tag}'s TTL ends in "
                          f"{max(0.0, left) / 60:.0f} minutes",
                          hint="a shorter --soak or fewer --spec-k arms")


def unjudged_soak(soak_s: float | None, arms: list[Arm]) -> str | None:
    """The line that says which speculative vLLM arms' soak cannot judge a collapse: their
    release gives no per-request acceptance (the flag's gate, engines/vllm.py
    per_request_spec_args), so the soak section has nothing to read (docs/probe.md). None when
    every arm's can be judged, or without --soak."""
    if soak_s is None:
        return None
    blind = [a for a in arms if a.config.engine == "vllm" and not a.config.spec.plain
             and not any(x.split("=", 1)[0] == PER_REQUEST_SPEC_FLAG
                         for x in a.config.extra_args)
             and not per_request_spec_args(parse_version(a.config.version, "vllm"), ())]
    if not blind:
        return None
    version = blind[0].config.version
    release = f"vLLM {version}" if version else "vLLM (release not known)"
    return (f"--soak: {release} gives {', '.join(a.label for a in blind)} no per-request "
            "acceptance (from 0.29, docs/probe.md): their soak cells cannot judge an acceptance "
            f"collapse, and the soak still takes {len(arms) * soak_s / 60:g} minutes of pod time")


def run_id_for(record: PodRecord, results_dir: Path) -> str:
    """The first benchmark of a pod is named by its run tag; later ones get -2, -3, …"""
    candidate, n = record.run_tag, 1
    while (results_dir / candidate / "rows.jsonl").exists():
        n += 1
        candidate = f"{record.run_tag}-{n}"
    return candidate


def gate_line(arm: dict[str, Any]) -> str:
    """`gate mtp-k2 against plain (token_ids, 6 prompts): pass`, with the first mismatch when
    it failed."""
    gate = arm["gate"]
    missed = gate.get("first_mismatch") or {}
    where = (f" at prompt {missed.get('prompt')}, position {missed.get('position')}"
             if missed else "")
    return (f"gate {arm['label']} against {arm.get('baseline') or 'plain'} ({gate.get('method')}, "
            f"{gate.get('prompts')} prompts): {gate.get('status')}{where}")


def summary_table(run_dir: Path, title: str) -> Table:
    from tailpod.results.analysis import analyze
    from tailpod.results.io import load_run
    from tailpod.results.markdown import flag_legend
    from tailpod.results.sections.soak import verdict as soak_verdict

    run = load_run(run_dir)
    analysis = analyze(run)
    stamp = analysis.get("stamp")
    table = Table(title=f"{title}{' — ' + stamp if stamp else ''}")
    hardware_stamp = analysis["hardware"].get("stamp")
    caption: list[str] = []
    if hardware_stamp:  # the claimed GPU is not what ran: said under the numbers, in red
        caption.append(f"[bold red]{hardware_stamp}[/]")
    for col in ("arm", "c", "reps", "output tok/s (median)", "× plain", "TTFT p50 ms",
                "accept len", "flags"):
        table.add_column(col)
    void = {a["label"]: a["void_reason"] for a in analysis["arms"] if a["void"]}
    # each arm's throughput against plain's at the same c, as report.md's Speedup section reads
    # it (results/analysis.py `speedup`; newcomer 2.10: the terminal's table had none)
    speedups = {(s["arm"], s["concurrency"]): s for s in analysis.get("speedup") or []}

    def vs_plain(cell: dict[str, Any]) -> str:
        found = speedups.get((cell["arm"], cell["concurrency"]))
        if found is None:
            return "-"
        if found["void"] or not found.get("throughput"):
            return "void"
        return f"{found['throughput']['speedup']:.2f}×"

    def med(cell: dict[str, Any], key: str, scale: float = 1.0, fmt: str = ".1f") -> str:
        spread = cell.get(key)
        return "-" if not spread else format(spread["median"] * scale, fmt)

    # the arms in the order the sweep ran them (plain first, then K ascending), not by name,
    # which put plain, the baseline, last (newcomer 2.10)
    measured = {arm.label: i for i, arm in enumerate(run.meta.arms)}
    for cell in sorted(analysis["cells"], key=lambda c: (measured.get(c["arm"], len(measured)),
                                                         c["arm"], c["concurrency"])):
        label = cell["arm"] if cell["arm"] not in void else f"[strike]{cell['arm']}[/] VOID"
        table.add_row(
            label,
            str(cell["concurrency"]),
            str(cell["reps"]),
            med(cell, "output_tok_s"),
            vs_plain(cell),
            med(cell, "ttft_p50_s", 1000.0, ".0f"),
            med(cell, "acceptance_length", 1.0, ".2f"),
            ",".join(cell["flags"]) or "",
        )
    # each spec arm's gate against its baseline, as report.md's Arms section gives it
    # (newcomer 2.10: no line of the terminal said the gate passed)
    caption += [gate_line(a) for a in analysis["arms"] if a.get("gate")]
    # and what the flags column's words mean
    caption += flag_legend(f for cell in analysis["cells"] for f in cell["flags"])
    # the soak's verdict (its cells are in no column above): what the soak section found
    for row in analysis.get("soak") or []:
        if row["soak_s"] is not None and row["arm"] != "plain":  # plain drafts nothing
            said = soak_verdict(row).replace("**COLLAPSE**", "[bold red]COLLAPSE[/]")
            caption.append(f"soak {row['arm']} ({row['prompt_class']}, c={row['concurrency']}, "
                           f"{row['soak_s'] / 60:g} min): {said}")
    if caption:
        table.caption = "\n".join(caption)
    return table


def check_resume_on_preemption(settings: Settings, record: PodRecord, lanes: Any,
                               deployment: Any, find_max_rate: bool) -> None:
    """`--resume-on-preemption` rents a new pod when a spot pod loses its bid, so it is refused
    (exit 2, before any wait or rental) where there is no bid to lose or no one way to go on."""
    if not record.extra.spot:
        raise ConfigError(f"--resume-on-preemption needs a spot pod; {record.run_tag} is "
                          "on-demand and is never preempted", hint="tailpod up --spot")
    if lanes is not None or deployment is not None or find_max_rate:
        what = "--find-max-rate" if find_max_rate else "--deploy" if deployment is not None \
            else "an `up --lanes` pod"
        raise ConfigError(f"--resume-on-preemption goes on with the sweep's cells on a new pod; "
                          f"{what} is not resumed that way",
                          hint="drop --resume-on-preemption and resume with --run-id")
    again = replacement_settings(settings, record)
    if again.max_price is None and again.bid is None:  # after a preemption, bids have risen
        raise ConfigError(f"--resume-on-preemption rents a replacement at the price of the "
                          f"moment; {record.run_tag} was rented with no price cap and no bid, so "
                          "nothing would bound what the replacement costs",
                          hint="set TAILPOD_MAX_PRICE=USD/H for the replacement (or rent with "
                               "up --spot --max-price or --bid)")
    problems = spot_problems(again)  # a bid over the cap would rent nothing, found too late
    if problems:
        raise ConfigError(f"--resume-on-preemption could not rent {record.run_tag}'s replacement:"
                          f" {'; '.join(problems)}",
                          hint="a TAILPOD_MAX_PRICE at or above the pod's bid")


def preemption_summary(preemptions: list[dict[str, Any]], finished_on: PodRecord) -> str:
    """One line after a sweep that went on on a new pod: how many, what they cost, where it ended."""
    minutes = sum(p["pod_minutes"] for p in preemptions)
    usd = sum(p["pod_usd"] for p in preemptions)
    return (f"preempted {len(preemptions)} time(s) ({', '.join(p['pod'] for p in preemptions)}): "
            f"the lost pods ran {minutes:.1f} min for ${usd:.4f}, each destroyed with its billing "
            f"proof; the sweep finished on {finished_on.run_tag}, which is still up: "
            f"tailpod down {finished_on.run_tag}")


def benchmark_document(run_dir: Path, run_id: str, measured_from: str,
                       elapsed_s: float) -> dict[str, Any]:
    """`benchmark --json`: where the run is, its stamp, and the analysis's arms and cells."""
    from tailpod.results.analysis import analyze
    from tailpod.results.io import load_run

    analysis = analyze(load_run(run_dir))
    return {"ok": True, "run_id": run_id, "results": str(run_dir),
            "measured_from": measured_from, "elapsed_s": round(elapsed_s, 1),
            "stamp": analysis.get("stamp"), "hardware": analysis.get("hardware"),
            "arms": analysis.get("arms"), "cells": analysis.get("cells"),
            "slo": analysis.get("slo"), "preemptions": analysis.get("preemptions")}


def register(app: typer.Typer) -> None:
    @app.command()
    @handle_errors
    def benchmark(
        run_tag: str = typer.Argument(None, help="Pod to measure; default: the only active one."),
        spec_k: str = typer.Option("0", help="SPEC_K values to sweep, e.g. 0,1,2,3 (0 = plain)."),
        spec_method: str = typer.Option(
            "mtp", help=f"Speculation method: {', '.join(SPEC_METHODS)}."
        ),
        draft_model: str = typer.Option(None, help="Draft checkpoint for draft_model arms."),
        concurrency: str = typer.Option(
            "1,2,4,8,16,32,64", "--concurrency", "--max-concurrency",
            help="Concurrency levels (vllm bench serve's --max-concurrency N is one of them)."),
        reps: int = typer.Option(5, min=1, help="Repetitions of every cell (medians over these)."),
        max_tokens: int = typer.Option(256, min=2, help="Output tokens per request."),
        requests_per_cell: int = typer.Option(
            None, "--requests-per-cell", "--num-prompts",
            help="Measured requests per cell (default: max(4, concurrency)); vllm bench serve's "
            "--num-prompts, the requests of one load point, names the same.",
        ),
        prompt_classes: str = typer.Option(
            "prose", help="Prompt classes: prose, code, structured, tools."
        ),
        cache: str = typer.Option("cold", help="TTFT cache state: cold, warm or both."),
        interleave_arms: bool = typer.Option(
            False, help="Cycle every arm inside every rep (a restart per arm per rep)."
        ),
        extend_k: bool = typer.Option(True, help="Extend K past the best until it stops paying."),
        max_k: int = typer.Option(8, help="Upper bound for the K extension."),
        run_id: str = typer.Option(None, help="Resume this run (skips finished cells)."),
        resume_on_preemption: bool = typer.Option(
            False, "--resume-on-preemption", help="On a spot pod: when it loses its bid mid-sweep, "
            "destroy it (proven, disk included), rent its card again (else the next of its "
            "--gpu list) under its price cap and bid, and go on from the last finished cell, the "
            "gate taken again first.",
        ),
        from_here: bool = typer.Option(
            False,
            help="Measure from this machine over the tailnet instead of on the pod "
            "(every number is then stamped DO NOT QUOTE AGGREGATE).",
        ),
        request_rate: str = typer.Option(
            None, help="Open loop: requests/s per cell instead of concurrency levels, e.g. "
            "1,2,4,inf (each request sent at its scheduled time; latency from that time).",
        ),
        arrival: str = typer.Option("poisson", help="Arrival process: poisson, gamma, constant."),
        burstiness: float = typer.Option(
            1.0, help="Gamma shape of the inter-arrival times (with --arrival gamma; <1 burstier)."
        ),
        arrival_seed: int = typer.Option(0, help="Schedule seed (rep r uses seed + r)."),
        slo: str = typer.Option(
            None, "--slo", "--goodput", help="Latency targets, e.g. ttft_ms=500,tpot_ms=50,"
            "e2el_ms=4000 (or vLLM's form, --goodput 'ttft:500 tpot:50'): each cell reports SLO "
            "attainment and goodput."
        ),
        slo_percentile: float = typer.Option(
            90.0, help="Share of requests (%) that must meet the SLO for a cell to pass."
        ),
        saturation_stop: bool = typer.Option(
            True, "--saturation-stop/--no-saturation-stop", help="Skip an arm's higher rates "
            "once a rate saturated it (latency from the schedule grew across the cell).",
        ),
        load_workers: int = typer.Option(
            1, "--load-workers", help="Processes generating each cell's load on the pod (one "
            "schedule dealt round robin; for rates one process cannot keep, see client_bound).",
        ),
        trace: Path = typer.Option(
            None, "--trace", help="Replay this request log at its own arrival times (one cell "
            "per arm, rep and class): the JSONL `tailpod cost --log` reads, or Mooncake's.",
        ),
        trace_speed: float = typer.Option(
            1.0, "--trace-speed", help="Replay speed: 2 sends the trace twice as fast as logged."
        ),
        trace_format: str = typer.Option(
            "tailpod", "--trace-format", help="Trace format: tailpod or mooncake (requests at "
            "their times); session or aiperf-multi-turn (multi-turn sessions, docs/probe.md)."
        ),
        find_max_rate: bool = typer.Option(
            False, "--find-max-rate", help="Per arm, bisect the request rate between the "
            "lowest and highest --request-rate (reps at each probed rate) for the highest rate "
            "meeting --slo at --slo-percentile.",
        ),
        max_rate_tol: float = typer.Option(
            0.1, "--max-rate-tol", help="Stop the search when high/low - 1 is at most this."
        ),
        max_rate_rounds: int = typer.Option(
            6, "--max-rate-rounds", help="At most this many bisection steps per arm."
        ),
        serve_tax: bool = typer.Option(
            False,
            "--serve-tax/--no-serve-tax",
            help="Also measure each arm's bare engine decode (vLLM's offline LLM API) at the same "
            "prompts, output length and concurrency, for the report's bare-vs-served table; "
            "costs one more engine start per arm (vLLM).",
        ),
        deploy: Path = typer.Option(
            None, "--deploy", help="Also measure this decision.json's deployment (`tailpod "
            "decide`) as one more arm, deploy-static or deploy-lanes (two lanes behind HAProxy, "
            "--provider local), through the same gate, cells and reps.",
        ),
        json_out: bool = typer.Option(False, "--json", help="Print the run's cells and arms as "
                                      "JSON (progress goes to stderr)."),
        unique_schema: bool = typer.Option(
            False, "--unique-schema", help="structured/tools classes: every request's schema is "
            "new text (no grammar cache hit), and each cell times a new schema's first request "
            "against its repeat (the grammar compile time).",
        ),
        soak: float = typer.Option(
            None, "--soak", metavar="MINUTES", help="After its cells, each arm runs one closed "
            "loop this long (lowest --concurrency, first prompt class) and the report flags "
            "where its acceptance collapsed, by minute and context position. Adds MINUTES of "
            "pod time per arm; judged from each request's own acceptance (vLLM 0.29+, SGLang).",
        ),
        tool_call_parser: str = typer.Option(
            None, "--tool-call-parser", metavar="NAME", help="vLLM or SGLang with the tools "
            "class: the parser every arm starts with (default: the engine's for the checkpoint's "
            "family, else hermes).",
        ),
    ) -> None:
        """Run the sweep on the pod: plain vs speculative arms × concurrency levels × reps.

        Each speculative arm must first pass the token-identity gate against plain decode;
        an arm that fails it is kept but marked VOID and never reported as a speedup.
        """
        if cache not in ("cold", "warm", "both"):
            raise ConfigError("--cache must be cold, warm or both")
        if run_id is not None:  # before the pod is looked up or waited on
            check_run_id(run_id)
        soak_s = soak_seconds(soak)
        check_spec_method(spec_method)
        rates, slo_targets = open_loop_options(
            request_rate, arrival, burstiness, slo, slo_percentile
        )
        if load_workers < 1:
            raise ConfigError("--load-workers must be >= 1")
        if rates and serve_tax:
            raise ConfigError("--serve-tax measures closed-loop cells; drop --request-rate")
        if find_max_rate:
            finite = sorted({r for r in rates if math.isfinite(r)})
            if not slo_targets or len(finite) < 2 or len(finite) != len(rates):
                raise ConfigError("--find-max-rate needs --slo and two finite --request-rate "
                                  "bounds", hint="--request-rate 1,16 --slo ttft_ms=500")
            if not max_rate_tol > 0:
                raise ConfigError("--max-rate-tol must be > 0")
            rates = [finite[0], finite[-1]]
        if max_rate_rounds < 1:
            raise ConfigError(f"--max-rate-rounds must be at least 1, got {max_rate_rounds}")
        trace_entry = None
        if trace is not None:
            if rates:
                raise ConfigError("--trace replays the log's own arrival times; drop "
                                  "--request-rate (or use --trace-speed)")
            if serve_tax:
                raise ConfigError("--serve-tax measures closed-loop cells; drop --trace")
            trace_entry = trace_spec(trace, trace_format, trace_speed)
        elif trace_speed != 1.0 or trace_format != "tailpod":
            raise ConfigError("--trace-speed and --trace-format need --trace FILE")
        ks = int_list(spec_k, "--spec-k", maximum=MAX_SPEC_K)
        if any(ks) and spec_method == "draft_model" and not draft_model:
            raise ConfigError("--spec-method draft_model needs --draft-model DIR")
        # Every flag is checked here, before the ledger, the SSH wait or the pod.
        levels = int_list(concurrency, "--concurrency", minimum=1)
        classes = prompt_class_list(prompt_classes)
        if unique_schema and not {"structured", "tools"} & set(classes):
            raise ConfigError("--unique-schema changes the schemas of the structured and tools "
                              "classes; --prompt-classes has neither",
                              hint="--prompt-classes structured,tools")
        if tool_call_parser is not None:
            check_tool_parser(tool_call_parser)
            if "tools" not in classes:
                raise ConfigError("--tool-call-parser is for the tools class; --prompt-classes "
                                  "has none", hint="--prompt-classes tools")
        if not 1 <= max_k <= MAX_SPEC_K:
            raise ConfigError(f"--max-k must be 1 to {MAX_SPEC_K}, got {max_k}")
        if requests_per_cell is not None and requests_per_cell < 1:
            raise ConfigError(f"--requests-per-cell must be at least 1, got {requests_per_cell}")
        check_open_loop_spans(SweepPlan(arms=[], reps=reps, requests_per_cell=requests_per_cell,
                                        request_rates=rates, arrival=arrival,
                                        burstiness=burstiness, arrival_seed=arrival_seed))
        deployment = None
        if deploy is not None:  # checked against its model before the ledger or the pod
            from tailpod.measure.deploy import read_deployment

            deployment = read_deployment(deploy)
        settings = settings_from()
        ledger = ledger_for(settings)
        record = ledger.resolve(run_tag)
        if record.status != "running":
            raise ConfigError(
                f"{record.run_tag} is {record.status}, not running", hint="tailpod up"
            )
        base = EngineConfig.from_json(record.engine)
        check_trace_context(trace_entry, base.context_length)
        base = _with_tool_parser(base, classes, tool_call_parser)
        if serve_tax and base.engine != "vllm":
            raise ConfigError("--serve-tax measures vLLM only for now (its offline LLM API)")
        if serve_tax and from_here:
            raise ConfigError(
                "--serve-tax compares the bare engine on the pod with the endpoint measured on "
                "the pod; it cannot be combined with --from-here"
            )
        plan = SweepPlan(
            arms=spec_arms(base, ks, spec_method, draft_model),
            concurrency=levels,
            prompt_classes=classes,
            reps=reps,
            max_tokens=max_tokens,
            requests_per_cell=requests_per_cell,
            interleave_arms=interleave_arms,
            extend_k=extend_k,
            max_k=max_k,
            serve_tax=serve_tax,
            request_rates=rates,
            arrival=arrival,
            burstiness=burstiness,
            arrival_seed=arrival_seed,
            slo=slo_targets,
            slo_percentile=slo_percentile,
            trace=trace_entry,
            load_workers=load_workers,
            saturation_stop=saturation_stop,
            soak_s=soak_s,
            unique_schema=unique_schema,
        )
        if deployment is not None:
            from tailpod.measure.deploy import deploy_arm

            arm = deploy_arm(base, deployment, spec_method)
            if not any(a.config.spec.plain for a in plan.arms):
                raise ConfigError("--deploy needs the plain arm in the sweep (--spec-k 0,…) for "
                                  "the gate and the comparison")
            plan.arms.append(arm)
        if serve_tax:
            console.print(
                f"serve tax: each of the {len(plan.arms)} arm(s) first runs the engine's offline "
                "decode at the same prompts, output length and concurrency: one more engine "
                "start per arm"
            )
        lanes = served_lanes(record)
        if lanes is not None:  # an `up --lanes` pod is measured as the lanes it is
            check_served_lanes_sweep(record.run_tag, lanes, ks, deploy is not None, serve_tax)
            plan.arms = [served_lanes_arm(base, lanes)]
        else:
            # An arm that cannot run is refused before the pod is touched (the arm switch checks
            # the K extension's arms again before each relaunch: pods/arm_switch.py).
            check_arms([a.config for a in plan.arms], settings)
        check_soak_fits(soak_s, len(plan.arms), record, time.time())
        blind_soak = unjudged_soak(soak_s, plan.arms)
        if blind_soak:
            err_console.print(f"[bold yellow]warning:[/] {blind_soak}", markup=True)
        if resume_on_preemption:
            check_resume_on_preemption(settings, record, lanes, deployment, find_max_rate)
        rid = run_id or run_id_for(record, settings.results_dir)
        run_dir = RunDirectory(run_path(settings.results_dir, rid))
        check_resumable(run_dir, base.model, base.engine, plan)
        ctx = RunContext.for_pod(record, rid, base)
        t0 = time.time()
        with startup_progress("benchmark") as spinner:
            # the cell being measured and its time left lead every progress line; the pod's own
            # latest line (SSH connect, engine start, probe) follows (cli/sweep_progress.py)
            progress, on_cell = cell_progress_line(spinner)
            done = run_benchmark(
                settings, ledger, record, plan, run_dir, ctx, cache=cache, from_here=from_here,
                lanes=lanes, deployment=deployment,
                max_rate=(max_rate_tol, max_rate_rounds) if find_max_rate else None,
                resume_on_preemption=resume_on_preemption,
                say=lambda msg: console.print(msg),
                say_plain=lambda line: console.print(line, markup=False),
                progress=progress, on_cell=on_cell)
        preemptions, finished_on = done.preemptions, done.finished_on
        if preemptions:
            console.print(preemption_summary(preemptions, finished_on), markup=False)
        if json_out:
            print_json(benchmark_document(run_dir.path, rid, done.measured_from,
                                          time.time() - t0))
            return
        if plan.request_rates or plan.trace:
            from tailpod.cli.markdown_out import print_markdown
            from tailpod.results.analysis import analyze
            from tailpod.results.io import load_run
            from tailpod.results.slo import render as render_slo

            print_markdown("\n".join(render_slo(analyze(load_run(run_dir.path)).get("slo"))),
                           console, run_dir.path)
        else:
            console.print(summary_table(run_dir.path, f"benchmark {rid}"))
        if done.measured_from != "pod":
            console.print(f"[bold red]{STAMP}[/]: measured off the pod")
        console.print(f"results: {run_dir.path} ({time.time() - t0:.0f} s)")
