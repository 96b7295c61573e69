"""report.md (+ PNGs) for one run, and a side-by-side comparison for several.

The run's frame (title, the run table, warnings, plots) is written here; everything between is the
registered report sections' (results/sections/), each rendered from its own part of the analysis.
Every number in a table is formatted by the `fmt_*` helpers of results/markdown.py, so a table can
be checked against `tailpod report --json` mechanically.
"""

from __future__ import annotations

import os
import re
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from tailpod.errors import ConfigError
from tailpod.results.analysis import AnalysisSettings, analyze_for_report
from tailpod.results.compare import compare_analyses
from tailpod.results.io import Run, load_run
from tailpod.results.markdown import (
    NO_SPREAD,
    STAMP_LINE,
    arm_label,
    fmt_num,
    fmt_ratio,
    fmt_spread,
    fmt_usd,
    scrub_argv,
    table,
    voids,
)
from tailpod.results.plots import PLOT_FILES, plot_compare, write_plots
from tailpod.results.provider_facts import provider_facts_line, start_billed_line
from tailpod.results.section import AFTER_PLOTS, CompareRenderContext, RenderContext, Section
from tailpod.results.sections import in_compare, in_report
from tailpod.results.sections.kl_reference import render_kl_section
from tailpod.secrets import redact

# Formatting names callers and tests import from here (defined in results/markdown.py).
__all__ = [
    "NO_SPREAD", "REPORT_FILE", "STAMP_LINE", "arm_label", "fmt_num", "fmt_ratio", "fmt_spread",
    "fmt_usd", "render_compare_markdown", "render_run_markdown", "scrub_argv", "write_report",
]  # fmt: skip

REPORT_FILE = "report.md"

def reported_hardware(hardware: dict[str, Any]) -> str:
    """What the pod's own facts say it is, with the verdict against the provider's claim."""
    if not hardware:
        return "—"
    reported = hardware.get("reported") or {}
    gpus = [g for g in reported.get("gpus") or [] if g]
    what = ", ".join(gpus) if gpus else f"none (CPU: {reported.get('cpu') or 'unrecorded'})"
    if hardware.get("verdict") == "unverified":
        what = "not recorded"
    return f"{what} ({hardware.get('verdict')})"


def render_run_markdown(an: dict[str, Any], report_only: Mapping[str, Any] | None = None) -> str:
    """report.md: the frame (title, run table, warnings, plots) and every registered section in
    report rank. The report-only sections (Decision, KL) render from `report_only`
    (analysis.analyze_for_report); without it they are left out."""
    stamp = an.get("stamp")
    L: list[str] = [f"# tailpod report — {an['run_id']}", ""]
    if stamp:
        L += [f"> {STAMP_LINE}", ""]
    hardware = an.get("hardware") or {}
    if hardware.get("stamp"):
        L += [f"> **{hardware['stamp']}**", ""]
    plan = an.get("plan") or {}
    price = an.get("price_per_hr")
    L += table(
        ["field", "value"],
        [
            ["model", an["model"]],
            ["engine", f"{an['engine']} {an.get('engine_version') or '(version unknown)'}"],
            ["image", f"{an.get('image_ref') or '—'} @ {an.get('image_digest') or 'no digest'}"],
            [
                "provider / GPU",
                f"{an['provider']} / {an.get('gpu') or 'none'} × {an.get('gpu_count') or '—'}",
            ],
            ["GPU the pod reports", reported_hardware(hardware)],
            # only for a run that recorded them (a rented pod, since they were kept): a run
            # written before reads the same (tests/unit/results/test_sections.py)
            *([["provider facts", provider_facts_line(an["provider_facts"])]]
              if an.get("provider_facts") is not None else []),
            *([["start billed", start_billed_line(an["cold_start"])]]
              if an.get("cold_start") is not None else []),
            ["pod price", f"${price:g}/hr" if price is not None else "unknown"],
            ["measured from", an["measured_from"]],
            ["created", an.get("created_at") or "—"],
            [
                "plan",
                f"arms {plan.get('arms')}, c={plan.get('concurrency')}, reps={plan.get('reps')}, "
                f"max_tokens={plan.get('max_tokens')}, prompt classes {plan.get('prompt_classes')}",
            ],
            [
                "analysis",
                f"crossover interpolated in {an['settings']['interpolation']}(c); knee: step "
                f"throughput gain < {an['settings']['knee_throughput_gain']:.0%} while "
                f"{an['settings']['knee_latency_metric']} grows > "
                f"{an['settings']['knee_latency_growth']:.0%}",
            ],
        ],
        stamp,
    )
    if an["warnings"]:
        L += ["## Warnings", ""] + [f"- {w}" for w in an["warnings"]] + [""]
    rc = RenderContext(analysis=an, stamp=stamp, void=voids(an))
    sections = [s for s in in_report() if s.in_analysis or report_only is not None]
    L += _section_lines([s for s in sections if (s.report_rank or 0) <= AFTER_PLOTS], an,
                        report_only, rc)  # fmt: skip
    L += _plots_and_raw_data()
    L += _section_lines([s for s in sections if (s.report_rank or 0) > AFTER_PLOTS], an,
                        report_only, rc)  # fmt: skip
    return redact("\n".join(L))


def _section_lines(sections: Sequence[Section[Any]], an: dict[str, Any],
                   report_only: Mapping[str, Any] | None, rc: RenderContext) -> list[str]:
    L: list[str] = []
    for section in sections:
        assert section.render is not None
        value = an.get(section.key) if section.in_analysis else (report_only or {}).get(section.key)
        L += section.render(value, rc)
    return L


def _plots_and_raw_data() -> list[str]:
    L = ["## Plots", ""]
    for name, file in PLOT_FILES.items():
        L += [f"![{name}]({file})", ""]
    return L + [
        "Raw data: `run.json` (with every arm's startup lines) and `rows.jsonl`; this analysis as "
        "JSON: `tailpod report RUN --json`.",
        "",
    ]


def render_kl_markdown(kl: dict[str, Any]) -> str:
    """A report for a run directory that holds only a KL evaluation."""
    engine = kl.get("engine") or {}
    L = [f"# tailpod KL evaluation — {kl.get('run_id')}", ""]
    L += table(
        ["field", "value"],
        [
            ["run tag", str(kl.get("run_tag") or "—")],
            ["engine", f"{engine.get('name')} {engine.get('version') or '(version unknown)'}"],
            ["provider / GPU", f"{kl.get('provider')} / {(kl.get('pod') or {}).get('gpu') or 'none'}"],
            ["measured from", str(kl.get("measured_from"))],
            ["created", f"{kl.get('created_at')} (finished {kl.get('finished_at') or 'no'})"],
        ],
        None,
    )
    return redact("\n".join(L + render_kl_section(kl)))


def render_compare_markdown(cmp: dict[str, Any]) -> str:
    stamp = cmp.get("stamp")
    runs = cmp["runs"]
    ids = [r["run_id"] for r in runs]
    L = [f"# tailpod comparison — {' vs '.join(ids)}", ""]
    if stamp:
        L += [f"> {STAMP_LINE}", ""]
    for run_id, hardware_stamp in (cmp.get("hardware_stamps") or {}).items():
        L += [f"> **{run_id}: {hardware_stamp}**", ""]
    L += table(
        ["run", "GPU", "provider", "engine", "image digest", "model", "$/hr", "measured from"],
        [
            [
                r["run_id"],
                f"{r.get('gpu') or 'none'} × {r.get('gpu_count') or '—'}",
                r["provider"],
                f"{r['engine']} {r.get('engine_version') or ''}",
                r.get("image_digest") or "—",
                r["model"],
                f"{r['price_per_hr']:g}" if r.get("price_per_hr") is not None else "unknown",
                r["measured_from"],
            ]
            for r in runs
        ],
        stamp,
    )
    if cmp["warnings"]:
        L += ["## Warnings", ""] + [f"- {w}" for w in cmp["warnings"]] + [""]
    rc = CompareRenderContext(stamp=stamp, ids=ids)
    for section in in_compare():
        if section.render_compare is not None:
            L += section.render_compare(cmp, rc)
    if cmp.get("plot_file"):  # only a comparison written beside its plot links one
        L += [f"![compare]({cmp['plot_file']})", ""]
    return redact("\n".join(L))


def compare_file_name(ids: Sequence[str], suffix: str = ".md") -> str:
    """compare-<ids><suffix>: the comparison's file name, for its Markdown and its HTML page."""
    safe = [re.sub(r"[^A-Za-z0-9._-]+", "_", i)[:40] for i in ids]
    return "compare-" + "-vs-".join(safe) + suffix


def run_prompt_classes(run: Run) -> list[str]:
    """The prompt classes a run holds: its plan's, and any a row names."""
    found = list(run.meta.plan.prompt_classes) if run.meta.plan else []
    found += [c.prompt_class for c in run.cells] + [r.prompt_class for r in run.requests]
    return sorted(dict.fromkeys(found))


def check_settings_for_run(run: Run, settings: AnalysisSettings | None) -> None:
    """ConfigError (exit 2) when the settings ask for something the run does not hold: a report
    of a prompt class the run never measured would be empty tables over a good report."""
    if settings is None or settings.prompt_class is None:
        return
    held = run_prompt_classes(run)
    if settings.prompt_class not in held:
        raise ConfigError(
            f"run {run.meta.run_id} has no prompt class {settings.prompt_class!r}; nothing was "
            "written",
            hint=f"--prompt-class one of {', '.join(held) or '(none)'}, or leave it out to pool",
        )


def _move_into_place(staged: Sequence[Path], final_dir: Path) -> None:
    """Each staged file renamed over its final name (same filesystem: atomic per file); the
    report itself comes last, so a report.md is never newer than its plots."""
    for path in staged:
        os.replace(path, final_dir / path.name)


def write_report(
    run_dirs: Sequence[str | os.PathLike[str]],
    settings: AnalysisSettings | None = None,
    out_dir: str | os.PathLike[str] | None = None,
) -> Path:
    """Write report.md and the PNGs into each run directory. With several runs also write a
    comparison (compare-<ids>.md + compare_throughput.png) into out_dir or the first run's
    directory, and return its path; with one run, return that run's report.md.

    Every run is loaded, checked against the settings and analysed before anything is written;
    each file is rendered into a staging directory beside its target and renamed into place only
    when all of that run's files are complete, so a refused or failed report leaves the previous
    report.md and plots as they were."""
    if not run_dirs:
        raise ValueError("no run directories")
    loaded = []
    for d in run_dirs:
        run = load_run(d)
        check_settings_for_run(run, settings)
        loaded.append(run)
    values = [analyze_for_report(run, settings) for run in loaded]
    analyses = [v.analysis for v in values]
    for run, v in zip(loaded, values, strict=True):
        assert run.path is not None
        kl = v.report_only.get("kl")
        with tempfile.TemporaryDirectory(dir=run.path, prefix=".report-") as tmp:
            stage = Path(tmp)
            if kl is not None and not run.cells:  # a KL evaluation only: no throughput to plot
                text = render_kl_markdown(kl)
            else:
                write_plots(v.analysis, stage)
                text = render_run_markdown(v.analysis, v.report_only)
            plots = sorted(stage.iterdir())  # whatever the plotter drew, all complete by now
            (stage / REPORT_FILE).write_text(text)
            _move_into_place([*plots, stage / REPORT_FILE], run.path)
    first = Path(analyses[0]["run_dir"])
    if len(analyses) == 1:
        return first / REPORT_FILE
    return write_compare(analyses, Path(out_dir) if out_dir else first)[0]


def write_compare(analyses: Sequence[dict[str, Any]], target: Path) -> tuple[Path, dict[str, Any]]:
    """compare-<ids>.md and the .png it links, into `target`; returns the .md's path and the
    comparison (with `plot_file`, the name of the .png beside it)."""
    target.mkdir(parents=True, exist_ok=True)
    cmp = compare_analyses(analyses)
    path = target / compare_file_name([a["run_id"] for a in analyses])
    cmp["plot_file"] = path.with_suffix(".png").name
    with tempfile.TemporaryDirectory(dir=target, prefix=".report-") as tmp:
        stage = Path(tmp)
        png = plot_compare(analyses, stage / path.with_suffix(".png").name)
        (stage / path.name).write_text(render_compare_markdown(cmp))
        _move_into_place([png, stage / path.name], target)
    return path, cmp
