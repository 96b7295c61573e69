"""`tailpod report`, `compare`, `cost` and `export`: read run directories, never a pod."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import typer

from tailpod.cli.common import err_console, handle_errors, print_json, settings_from
from tailpod.config import run_path
from tailpod.errors import ConfigError, TailpodError


def resolve_run(ref: str) -> Path:
    """A run directory by path, or by run id under the results directory (config.py `run_path`:
    an id that would reach outside it, an empty one or one with a NUL exits 2)."""
    path = Path(ref).expanduser()
    if ref and "\x00" not in ref and path.exists():  # Path("") is the working directory
        return path
    try:
        candidate = run_path(settings_from().results_dir, ref, what="RUN")
    except ConfigError as exc:
        raise ConfigError(f"no run directory {ref!r}, and {exc.message}",
                          hint="pass the path of a run directory, or a run id under the results "
                               "dir") from None
    if candidate.exists():
        return candidate
    raise TailpodError(
        f"no run directory {ref!r}", hint="pass a path or a run id under the results dir"
    )


def _settings(
    interpolation: str,
    knee_gain: float,
    knee_latency: float,
    knee_metric: str,
    prompt_class: str | None,
    cache: str = "cold",
) -> Any:
    from tailpod.results.analysis import LATENCY_METRICS, AnalysisSettings

    if interpolation not in ("log2", "linear"):
        raise ConfigError("--interpolation must be log2 or linear")
    if cache not in ("cold", "warm", "all"):
        raise ConfigError("--cache must be cold, warm or all")
    if knee_metric not in LATENCY_METRICS:
        raise ConfigError(f"--knee-metric must be one of {', '.join(LATENCY_METRICS)}")
    # A knee is a step that adds less than this share of throughput (0.10 = 10 %) while latency
    # grows more than that share: both are fractions, and a negative one means no knee at all.
    for flag, value in (("--knee-gain", knee_gain), ("--knee-latency", knee_latency)):
        if not math.isfinite(value) or value < 0:
            raise ConfigError(f"{flag} must be a non-negative fraction (0.10 = 10 %), "
                              f"got {value!r}")
    return AnalysisSettings(
        interpolation=interpolation,  # type: ignore[arg-type]
        knee_throughput_gain=knee_gain,
        knee_latency_growth=knee_latency,
        knee_latency_metric=knee_metric,
        prompt_class=prompt_class,
        cache=None if cache == "all" else cache,
    )


def _fmt_s(v: float | None) -> str:
    return "—" if v is None else f"{v:.1f} s"


def _out(text: str) -> None:
    # Plain echo, not rich: these lines must not be re-wrapped at the terminal width.
    typer.echo(text)


def _spot_versus_on_demand(directory: Path, as_json: bool) -> None:
    """`cost --matrix DIR`: the matrix report's spot-versus-on-demand rows (results/matrix.py
    spot_versus_on_demand), with the matrix's stamp."""
    import json

    from tailpod.cli.common import console
    from tailpod.cli.markdown_out import print_markdown
    from tailpod.results.matrix import purchase_lines, spot_lines

    path = directory / "matrix-report.json"
    try:
        doc = json.loads(path.read_text())
    except (OSError, ValueError):
        raise ConfigError(f"{directory} has no readable matrix-report.json",
                          hint="pass a `tailpod matrix` results directory") from None
    rows = doc.get("spot_vs_on_demand") if isinstance(doc, dict) else None
    if not rows:
        raise ConfigError(f"{directory}: no spot card with a recorded on-demand price, so nothing "
                          "to compare", hint="a matrix run with --spot records both")
    if as_json:
        print_json({"stamp": doc.get("stamp"), "spot_vs_on_demand": rows,
                    "purchase": {c["card"]: c.get("purchase") for c in doc.get("cards") or []}})
        return
    stamp = doc.get("stamp")
    bought = ["## Purchase per card", "", *purchase_lines(doc.get("cards") or []), ""]
    print_markdown("\n".join(([f"**{stamp}**", ""] if stamp else []) + bought
                             + spot_lines(rows)), console, directory)


def _price_source(res: dict[str, Any]) -> str:
    """Where the pod's $/hr came from, when not the flag (cost --log RUN reads the run's)."""
    source = res.get("pod_usd_hr_source")
    return f" (from {source})" if source and source != "--pod-usd-hr" else ""


def _print_cost(res: dict[str, Any]) -> None:
    d = res["duty"]
    g = d["gap_stats"]
    bill = res["serverless_billing"]
    lines = [
        f"requests           {d['requests']}",
        f"span               {d['span_s'] / 3600:.3f} h ({d['span_s']:.0f} s)",
        f"busy               {d['busy_s']:.0f} s  → duty cycle {d['duty']:.1%}",
        f"gaps               n={g['n']} min {_fmt_s(g['min'])} p50 {_fmt_s(g['p50'])} "
        f"mean {_fmt_s(g['mean'])} p90 {_fmt_s(g['p90'])} max {_fmt_s(g['max'])}",
        f"rates              pod ${res['pod_usd_hr']:g}/hr{_price_source(res)}, "
        f"serverless ${res['serverless_usd_hr']:g}/hr, "
        f"cold start {res['cold_start_s']:g} s, idle timeout "
        + (
            f"{res['idle_timeout_s']:g} s"
            if res["idle_timeout_s"] is not None
            else "not given (best case)"
        ),
        f"break-even duty    {res['break_even_duty']:.1%} (serverless cheaper below it, naively)",
        f"pod cost           ${res['pod_cost_usd']:.4f}",
        f"serverless naive   ${res['serverless_naive_cost_usd']:.4f} (busy time only) "
        f"→ {res['naive_verdict']}",
        f"serverless billed  ${res['serverless_cost_usd']:.4f} ({bill['billed_s']:.0f} s = "
        f"{res['effective_serverless_duty']:.1%} of span; {bill['cold_starts']} cold start(s), "
        f"{bill['gaps_kept_warm']} gaps kept warm)",
        f"VERDICT            {res['verdict'].upper()}: {res['reason']}",
    ]
    for line in lines:
        _out(line)
    proj = res.get("concurrency_projection")
    if proj:
        _out("")
        if proj["status"] != "ok":
            _out(f"raising client concurrency: {proj['reason']}")
        else:
            _out(
                "raising client concurrency "
                f"(log: mean {proj['mean_in_flight'] or 0:.2f} in flight, "
                f"{proj['tok_s_while_busy'] or 0:.1f} tok/s while busy; {proj['assumes']}):"
            )
            for r in proj["rows"]:
                _out(
                    f"  c={r['concurrency']:<4} {r['tok_s']:>9.1f} tok/s  "
                    f"busy {r['busy_s'] / 3600:.3f} h  "
                    f"pod ${r['pod_cost_usd']:.4f} (${r['usd_per_1m']:.3f}/Mtok)  "
                    + (f"saves ${r['saving_vs_current_usd']:.4f} vs the current pod"
                       if r["saving_vs_current_usd"] > 0 else
                       f"costs ${-r['saving_vs_current_usd']:.4f} more than the current pod")
                )
    if res.get("stamp"):
        _out(f"{res['stamp']}: throughput curve measured off-pod")


def _print_own(res: dict[str, Any]) -> None:
    _out("assumption                      value")
    for a in res["assumptions"]:
        _out(f"  {a['name']:<28} {a['value']:g} {a['unit']}")
    _out(f"depreciation  ${res['capex_usd_hr']:.4f}/hr → ${res['usd_per_mtok_capex']:.4f}/Mtok")
    _out(f"power         ${res['power_usd_hr']:.4f}/hr → ${res['usd_per_mtok_power']:.4f}/Mtok")
    _out(f"OWNED         ${res['usd_per_mtok']:.4f}/Mtok (from the assumptions above)")
    if res["rent_usd_per_mtok"] is not None:
        _out(
            f"RENTED        ${res['rent_usd_per_mtok']:.4f}/Mtok at ${res['rent_usd_hr']:g}/hr, "
            "billed only while busy"
        )
        _out(f"VERDICT       {res['verdict']}")
    if res.get("stamp"):
        _out(f"{res['stamp']}: tok/s measured off-pod")


def _analysis(run_dir: Path) -> Any:
    from tailpod.results.analysis import analyze
    from tailpod.results.io import load_run

    return analyze(load_run(run_dir))


def register(app: typer.Typer) -> None:
    @app.command("report")
    @handle_errors
    def report(
        runs: list[str] = typer.Argument(
            ..., help="Run directories (or run ids under the results dir)."
        ),
        as_json: bool = typer.Option(
            False, "--json", help="Print the analysis as JSON; write nothing."
        ),
        out: Path | None = typer.Option(None, "--out", help="Where a multi-run comparison goes."),
        interpolation: str = typer.Option("log2", help="Crossover interpolation: log2 or linear."),
        knee_gain: float = typer.Option(
            0.10, help="Knee: a step that adds less throughput than this."
        ),
        knee_latency: float = typer.Option(
            0.25, help="Knee: ... while p50 latency grows more than this."
        ),
        knee_metric: str = typer.Option("e2e_p50_s", help="Latency metric the knee watches."),
        prompt_class: str | None = typer.Option(
            None, help="Analyse one prompt class (default: pool all)."
        ),
        cache: str = typer.Option("cold", help="Cells to analyse: cold, warm or all."),
        as_html: bool = typer.Option(
            False, "--html", help="Write report.html (one self-contained page that opens "
            "offline) into each run directory instead of report.md and its PNGs; with several "
            "runs also compare-<ids>.html, ratios to the first."
        ),
    ) -> None:
        """Analyse runs; write report.md and PNG plots (or, with --html, report.html) into each
        run directory."""
        from tailpod.results.analysis import analyze
        from tailpod.results.compare import compare_analyses
        from tailpod.results.io import load_run
        from tailpod.results.report import check_settings_for_run, write_report

        st = _settings(interpolation, knee_gain, knee_latency, knee_metric, prompt_class, cache)
        if as_json and as_html:
            raise ConfigError("--json and --html are two outputs: choose one")
        dirs = [resolve_run(r) for r in runs]
        if as_json:
            loaded = [load_run(d) for d in dirs]
            for run in loaded:
                check_settings_for_run(run, st)
            analyses = [analyze(run, st) for run in loaded]
            if len(analyses) == 1:
                print_json(analyses[0])
            else:
                print_json({"runs": analyses, "compare": compare_analyses(analyses)})
            return
        if as_html:
            from tailpod.results.html import write_run_html

            typer.echo(f"report: {write_run_html(dirs, st, out)}")
            return
        path = write_report(dirs, st, out)
        typer.echo(f"report: {path}")

    @app.command("compare")
    @handle_errors
    def compare(
        runs: list[str] = typer.Argument(
            None, help="Run directories; ratios are to the first (or to --baseline)."
        ),
        as_json: bool = typer.Option(False, "--json", help="Print the comparison as JSON."),
        out: Path | None = typer.Option(
            None, "--out", help="Where compare-<ids>.md and its plot go (default: the first "
            "run's directory)."
        ),
        baseline: str | None = typer.Option(
            None, "--baseline", help="The run the others are compared against (default: the "
            "first run)."
        ),
        as_html: bool = typer.Option(
            False, "--html", help="Write compare-<ids>.html (one self-contained page: charts, "
            "per-cell differences against the baseline with the reps' spread, the decision) "
            "instead of the Markdown and its plot."
        ),
    ) -> None:
        """Compare runs side by side (ratios to the first run, provenance warnings), and check the
        acceptance fingerprint: an arm of the same model pair whose acceptance moved beyond the
        reps' spread is flagged (FLAG on stderr) with its likely cause from the startup facts.
        Writes compare-<ids>.md and the plot it links (--html: compare-<ids>.html); --json prints
        and writes nothing."""
        from tailpod.cli.common import console
        from tailpod.cli.markdown_out import print_markdown
        from tailpod.results.analysis import analyze
        from tailpod.results.compare import compare_analyses
        from tailpod.results.io import load_run
        from tailpod.results.report import render_compare_markdown, write_compare

        refs = ([baseline] if baseline else []) + [r for r in runs or [] if r != baseline]
        if len(refs) < 2:
            raise ConfigError("compare needs at least two runs (the baseline counts as one)")
        if as_json and as_html:
            raise ConfigError("--json and --html are two outputs: choose one")
        # the baseline also named among the runs is compared once
        dirs = list({d.resolve(): d for d in (resolve_run(r) for r in refs)}.values())
        if len(dirs) < 2:
            raise ConfigError("compare needs two different runs")
        if as_html:
            from tailpod.results.html import load_and_compare

            path, cmp = load_and_compare(dirs, out if out is not None else dirs[0])
            console.print(f"comparison: {path}", markup=False, highlight=False, soft_wrap=True)
        elif as_json:
            cmp = compare_analyses([analyze(load_run(d)) for d in dirs])
            print_json(cmp)
        else:
            analyses = [analyze(load_run(d)) for d in dirs]
            path, cmp = write_compare(analyses, out if out is not None else dirs[0])
            print_markdown(render_compare_markdown(cmp), console, path.parent)
            console.print(f"comparison: {path}", markup=False, highlight=False, soft_wrap=True)
        for w in cmp["warnings"]:
            err_console.print(f"warning: {w}", markup=False)
        for flag in cmp["fingerprint"]["flags"]:
            err_console.print(f"FLAG: {flag}", markup=False)

    @app.command("cost")
    @handle_errors
    def cost(
        log: Path | None = typer.Option(
            None, "--log", "--trace", help="Request log (JSON Lines) or a run dir."
        ),
        pod_usd_hr: float | None = typer.Option(None, help="Pod price, USD per hour."),
        serverless_usd_hr: float | None = typer.Option(
            None, help="Serverless worker price, USD/hr."
        ),
        cold_start_s: float | None = typer.Option(None, help="Serverless cold start, seconds."),
        idle_timeout_s: float | None = typer.Option(None, help="Serverless idle timeout, seconds."),
        run: str | None = typer.Option(
            None, "--run", help="Run dir for a measured throughput curve and the card's knee "
            "(the traffic advice in the verdict)."
        ),
        arm: str | None = typer.Option(None, help="Arm of --run to use (default plain)."),
        concurrency: int | None = typer.Option(None, help="--own: concurrency of --run to use."),
        own: bool = typer.Option(False, "--own", help="Buy vs rent for an owned box."),
        purchase_usd: float | None = typer.Option(None, help="--own: purchase price, USD."),
        resale_fraction: float = typer.Option(
            0.3, help="--own: resale value as a fraction of price."
        ),
        years: float = typer.Option(3.0, help="--own: years until resale."),
        power_w: float | None = typer.Option(None, help="--own: power draw while busy, W."),
        idle_power_w: float = typer.Option(0.0, help="--own: power draw while idle, W."),
        usd_per_kwh: float | None = typer.Option(None, help="--own: electricity, USD per kWh."),
        utilization: float | None = typer.Option(None, help="--own: fraction of hours busy (0-1]."),
        tok_s: float | None = typer.Option(None, help="--own: throughput while busy, tok/s."),
        matrix: str | None = typer.Option(
            None, "--matrix", help="A spot matrix's directory (or id): spot versus on-demand "
            "$/Mtok per card and concurrency, its preemptions included (docs/matrix.md)."
        ),
        as_json: bool = typer.Option(False, "--json", help="Print the result as JSON."),
    ) -> None:
        """Pod vs serverless on a request log, (--own) buy vs rent for an owned box, or
        (--matrix) spot versus on-demand for a spot matrix."""
        if matrix is not None:
            _spot_versus_on_demand(resolve_run(matrix), as_json)
            return
        from tailpod.results.cost import (
            arm_curve,
            best_measured_cell,
            concurrency_projection,
            cost_verdict,
            load_request_log,
            own_box_cost,
            recorded_pod_price,
            traffic_advice,
            with_traffic_advice,
        )

        if own:
            missing = [
                n
                for n, v in (
                    ("--purchase-usd", purchase_usd),
                    ("--power-w", power_w),
                    ("--usd-per-kwh", usd_per_kwh),
                    ("--utilization", utilization),
                )
                if v is None
            ]
            if missing:
                raise ConfigError(f"--own needs {', '.join(missing)}")
            source, stamp = "given", None
            rent = pod_usd_hr
            if tok_s is None:
                if run is None:
                    raise ConfigError("--own needs --tok-s or --run")
                an = _analysis(resolve_run(run))
                arm_curve(an, arm)  # a void or unknown --arm is refused naming the usable ones
                best = best_measured_cell(an, arm, concurrency)
                tok_s = best["output_tok_s"]["median"]
                source = f"{an['run_id']} {best['arm']} c={best['concurrency']} median"
                stamp = an.get("stamp")
                rent = rent if rent is not None else an.get("price_per_hr")
            assert purchase_usd is not None and power_w is not None
            assert usd_per_kwh is not None and utilization is not None
            res = own_box_cost(
                purchase_usd,
                resale_fraction,
                years,
                power_w,
                usd_per_kwh,
                utilization,
                tok_s,
                idle_power_w,
                rent,
                source,
            )
            res["stamp"] = stamp
            print_json(res) if as_json else _print_own(res)
            return

        pod_source, no_price = "--pod-usd-hr", ""
        if pod_usd_hr is None and log is not None:  # the run's own $/hr, said where it came from
            pod_usd_hr, pod_source = recorded_pod_price(log)
            no_price = f" ({pod_source})" if pod_usd_hr is None else ""
        missing = [
            n
            for n, v in (
                ("--log", log),
                ("--pod-usd-hr", pod_usd_hr),
                ("--serverless-usd-hr", serverless_usd_hr),
                ("--cold-start-s", cold_start_s),
            )
            if v is None
        ]
        if missing:
            raise ConfigError(f"cost needs {', '.join(missing)}{no_price}",
                              hint="or --own for buy vs rent")
        assert log is not None and pod_usd_hr is not None
        assert serverless_usd_hr is not None and cold_start_s is not None
        reqs = load_request_log(log)
        res = cost_verdict(reqs, pod_usd_hr, serverless_usd_hr, cold_start_s, idle_timeout_s)
        res["pod_usd_hr_source"] = pod_source
        run_dir = resolve_run(run) if run else (log if log.is_dir() else None)
        if run_dir is not None:
            an_full = _analysis(run_dir)
            curve, chosen = arm_curve(an_full, arm)
            stamp = an_full.get("stamp")
            res["concurrency_projection"] = concurrency_projection(
                res["duty"], curve, pod_usd_hr, serverless_usd_hr
            ) | {"arm": chosen}
            res["stamp"] = stamp
            knee = next((k for k in an_full["knee"] if k["arm"] == chosen), None)
            res = with_traffic_advice(res, traffic_advice(res["duty"], knee, curve, pod_usd_hr,
                                                          chosen))
        else:
            res["concurrency_projection"] = concurrency_projection(res["duty"], {}, pod_usd_hr)
        if as_json:
            res["duty"] = {k: v for k, v in res["duty"].items() if k != "gaps"}
            print_json(res)
        else:
            _print_cost(res)

    @app.command("import-vllm-bench")
    @handle_errors
    def import_vllm_bench(
        files: list[Path] = typer.Argument(
            ..., help="`vllm bench serve --save-result` JSON files, each one rep of the cell at "
            "its --max-concurrency."
        ),
        out: Path = typer.Option(..., "--out", help="The run directory to write (new or empty)."),
        arm: str = typer.Option("plain", help="The arm they measured: plain, or <method>-k<N>."),
        run_id: str | None = typer.Option(None, "--run-id", help="Default vllm-bench-<first file>."),
    ) -> None:
        """Turn vLLM's own benchmark results into a run directory that report, compare (--html),
        decide and export read; marked off-pod and, for a speculative arm, UNVERIFIED."""
        from tailpod.results.io import write_run
        from tailpod.results.vllm_bench import run_from_vllm_bench

        if out.exists() and (not out.is_dir() or any(out.iterdir())):
            raise ConfigError(f"{out} exists and is not an empty directory; nothing was written")
        run = run_from_vllm_bench(files, arm, run_id)
        typer.echo(str(write_run(run, out)))

    @app.command("export")
    @handle_errors
    def export(
        run: str = typer.Argument(..., help="Run directory (or run id)."),
        fmt: str = typer.Option(
            "csv", "--format", help="csv, jsonl, parquet (needs pyarrow), or llmd-report (llm-d's "
            "benchmark report v0.2.1: one JSON file per arm and load point, in a folder)."
        ),
        table: str = typer.Option("cells", "--table", help="cells or requests."),
        out: Path | None = typer.Option(
            None, "--out", help="Output file (default RUN/<table>.<format>; for llmd-report a "
            "folder, default RUN/llmd-report)."
        ),
    ) -> None:
        """Write a flat table of a run that pandas reads without tailpod, or the run as llm-d's
        benchmark reports."""
        from tailpod.results.io import export_table, load_run

        # a malformed flag is a usage error before anything is read (docs/exit-codes.md)
        if fmt not in ("csv", "jsonl", "parquet", "llmd-report"):
            raise ConfigError(f"unknown --format {fmt!r}",
                              hint="use csv, jsonl, parquet or llmd-report")
        if fmt == "llmd-report":
            from tailpod.results.llmd_report import LLMD_DIR, write_llmd_reports

            run_dir = resolve_run(run)
            typer.echo(str(write_llmd_reports(load_run(run_dir), out or run_dir / LLMD_DIR)))
            return
        if table not in ("cells", "requests"):
            raise ConfigError(f"unknown --table {table!r}", hint="use cells or requests")
        run_dir = resolve_run(run)
        target = out or run_dir / f"{table}.{fmt}"
        path = export_table(load_run(run_dir), fmt, target, table)
        typer.echo(str(path))
