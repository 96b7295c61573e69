"""PNG plots drawn from the analysis dict (never from raw rows), so a plot and the JSON agree.

Void arms are drawn grey and dashed with the legend label "VOID: <reason>"; off-pod runs carry the
DO NOT QUOTE AGGREGATE stamp across every figure; a run whose pod is not the GPU the provider
claimed, or ran on an emulated provider, carries that stamp across the top of every figure.
"""

from __future__ import annotations

import textwrap
from collections.abc import Sequence
from pathlib import Path
from typing import Any, cast

import matplotlib

matplotlib.use("Agg")  # files only; no display on a pod or in CI

import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.axes import Axes  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402

from tailpod.results.sections.soak import SOAK_PLOT_FILE, SoakRow  # noqa: E402
from tailpod.results.slo import RATE_PLOT_FILE, RatePoint, SloSection  # noqa: E402

VOID_COLOR = "0.55"
_BOX = {"boxstyle": "round,pad=0.15", "fc": "white", "ec": "none", "alpha": 0.85}
PLOT_FILES = {
    "throughput": "throughput.png",
    "speedup": "speedup.png",
    "acceptance": "acceptance.png",
    "ttft": "ttft.png",
    "cost": "cost.png",
}


def _label(arm: str, void: dict[str, str]) -> str:
    # Wrapped so a long gate reason cannot push the legend off the figure.
    return textwrap.fill(f"{arm} — VOID: {void[arm]}", 58) if arm in void else arm


def _void_map(analysis: dict[str, Any]) -> dict[str, str]:
    return {a["label"]: a["void_reason"] or "void" for a in analysis["arms"] if a["void"]}


def _colors(analysis: dict[str, Any]) -> dict[str, str]:
    """One colour per arm, the same in every plot; void arms are grey."""
    void = _void_map(analysis)
    return {
        a["label"]: VOID_COLOR if a["label"] in void else f"C{i % 10}"
        for i, a in enumerate(analysis["arms"])
    }


def _stamp(fig: Figure, stamp: str | None) -> None:
    if not stamp:
        return
    fig.text(
        0.5,
        0.5,
        stamp,
        rotation=25,
        fontsize=30,
        color="red",
        alpha=0.22,
        ha="center",
        va="center",
        weight="bold",
    )
    fig.text(
        0.99,
        0.005,
        f"{stamp} (measured off-pod)",
        fontsize=9,
        color="red",
        ha="right",
        va="bottom",
        weight="bold",
    )


def short_model(model: str | None, limit: int = 40) -> str:
    """A model as a subtitle shows it: `org/name` for a Hub id or a Hub cache snapshot path,
    the directory's name for a local checkpoint; the full path stays in run.json and the report.
    """
    text = str(model or "no model").rstrip("/")
    parts = text.split("/")
    for part in parts:
        if part.startswith("models--"):  # ~/.cache/huggingface/hub/models--org--name/snapshots/…
            return part[len("models--"):].replace("--", "/", 1)
    if text.startswith(("/", "~", ".")) or len(parts) > 2:
        name = next((p for p in reversed(parts) if p and p not in ("snapshots", "main")), text)
        text = name
    if len(text) > limit:  # a long name keeps its start and its end (quantization suffixes)
        head = limit // 2 - 1
        text = f"{text[:head]}…{text[-(limit - head - 1):]}"
    return text


def _title(analysis: dict[str, Any], what: str) -> str:
    gpu = analysis.get("gpu") or "no GPU"
    eng = f"{analysis['engine']} {analysis.get('engine_version') or ''}".strip()
    return f"{what}\n{analysis['run_id']} · {short_model(analysis['model'])} · {eng} · {gpu}"


def one_rep(analysis: dict[str, Any]) -> bool:
    """Every cell has one rep: error bars would be zero-length, so say there is no spread."""
    reps = [c.get("reps") for c in analysis.get("cells", []) if c.get("reps") is not None]
    return bool(reps) and max(reps) <= 1


def spread_note(analysis: dict[str, Any], bars: str) -> str:
    return "no spread (1 rep)" if one_rep(analysis) else bars


def usd(value: float, _pos: Any = None) -> str:
    """A dollar tick in plain decimals ($0.0025, $1.20): never 10⁻³ or 2.5e-03."""
    if value <= 0:
        return "$0"
    import math

    decimals = max(2, 1 - math.floor(math.log10(value)))
    text = f"{value:,.{decimals}f}"
    if "." in text:
        whole, frac = text.split(".")
        frac = frac.rstrip("0")
        text = whole + ("." + frac.ljust(2, "0") if frac or decimals else "")
    return f"${text}"


def dollar_axis(ax: Axes) -> None:
    """Plain-decimal dollar labels on the y axis. On a log axis the minor ticks are labelled
    too, thinned the way matplotlib thins them, so a range under one decade still has labels."""
    from matplotlib.ticker import FuncFormatter, LogFormatter

    if ax.get_yscale() != "log":
        ax.yaxis.set_major_formatter(FuncFormatter(usd))
        return

    class PlainDollars(LogFormatter):
        def _num_to_string(self, x: float, vmin: float, vmax: float) -> str:
            return usd(x)

    ax.yaxis.set_major_formatter(PlainDollars(labelOnlyBase=False))
    ax.yaxis.set_minor_formatter(PlainDollars(labelOnlyBase=False, minor_thresholds=(2, 0.4)))


def _log2_x(ax: Axes, concs: Sequence[int]) -> None:
    ax.set_xscale("log", base=2)
    if concs:
        ax.set_xticks(list(concs))
        ax.set_xticklabels([str(c) for c in concs])
        ax.minorticks_off()
    ax.set_xlabel("client concurrency (log2 scale)")


def _placeholder(ax: Axes, text: str) -> None:
    ax.text(
        0.5,
        0.5,
        text,
        ha="center",
        va="center",
        transform=ax.transAxes,
        fontsize=11,
        color="0.3",
        wrap=True,
    )


def _hardware_stamp(fig: Figure, stamps: Sequence[str]) -> None:
    """The claimed-vs-reported GPU stamp (tailpod/results/hardware.py) across the top of the figure,
    so a plot cut out of its report still says what the numbers ran on."""
    if not stamps:
        fig.tight_layout()
        return
    import math

    text = "\n".join(stamps)
    fig.text(0.5, 0.995, text, fontsize=8, color="red", ha="center", va="top", weight="bold",
             wrap=True)
    # the lines the wrapped stamp takes (8 pt bold: ~14 characters per inch of figure width)
    per_line = max(40, int(fig.get_figwidth() * 14))
    lines = sum(math.ceil(len(s) / per_line) for s in stamps)
    band = (lines * 11 + 8) / (fig.get_figheight() * 72)  # in figure height
    suptitle = getattr(fig, "_suptitle", None)
    if suptitle is not None:
        # a figure title goes under the stamp, never beneath it (tight_layout keeps it put)
        suptitle.set_y(1 - band)
        suptitle.set_va("top")
    fig.tight_layout(rect=(0, 0, 1, 1 - band))  # it makes room for a figure title itself



def _hardware_stamps(analyses: Sequence[dict[str, Any]]) -> list[str]:
    found = [str((a.get("hardware") or {}).get("stamp") or "") for a in analyses]
    return list(dict.fromkeys(s for s in found if s))


def _save(fig: Figure, path: Path, analysis: dict[str, Any]) -> Path:
    _stamp(fig, analysis.get("stamp"))
    _hardware_stamp(fig, _hardware_stamps([analysis]))
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def _series(
    analysis: dict[str, Any], arm: str, metric: str
) -> tuple[list[int], list[float], list[list[float]]]:
    xs, ys, lo, hi = [], [], [], []
    for c in analysis["cells"]:
        sp = c.get(metric)
        if c["arm"] == arm and sp:
            xs.append(c["concurrency"])
            ys.append(sp["median"])
            lo.append(sp["median"] - sp["min"])
            hi.append(sp["max"] - sp["median"])
    order = sorted(range(len(xs)), key=lambda i: xs[i])
    return (
        [xs[i] for i in order],
        [ys[i] for i in order],
        [[lo[i] for i in order], [hi[i] for i in order]],
    )


def _legend_below(ax: Axes, ncol: int = 2) -> None:
    if ax.get_legend_handles_labels()[0]:
        ax.legend(
            fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.14), ncol=ncol, frameon=False
        )


def plot_throughput(analysis: dict[str, Any], path: Path) -> Path:
    void = _void_map(analysis)
    fig, ax = plt.subplots(figsize=(9, 6.2))
    colors = _colors(analysis)
    drawn = False
    for arm in (a["label"] for a in analysis["arms"]):
        xs, ys, err = _series(analysis, arm, "output_tok_s")
        if not xs:
            continue
        drawn = True
        ax.errorbar(
            xs,
            ys,
            yerr=err,
            marker="o",
            capsize=3,
            label=_label(arm, void),
            color=colors[arm],
            linestyle="--" if arm in void else "-",
        )
    knees = [k for k in analysis["knee"] if k["status"] == "knee" and not k["void"]]
    for i, knee in enumerate(knees):
        color = colors.get(knee["arm"], "black")
        ax.plot(
            [knee["concurrency"]],
            [knee["throughput"]],
            marker="*",
            markersize=17,
            color=color,
            markeredgecolor="black",
            zorder=5,
            linestyle="none",
        )
        ax.annotate(
            f"knee {knee['arm']}: c={knee['concurrency']}, {knee['throughput']:.1f} tok/s",
            (knee["concurrency"], knee["throughput"]),
            textcoords="offset points",
            xytext=(10, -14 - 13 * i),
            fontsize=8,
            color=color,
            bbox=_BOX,
        )
    crossings = [
        c
        for c in analysis["crossover"]
        if c["status"] in ("crossover", "uncertain") and c["concurrency"]
    ]
    for i, cx in enumerate(crossings):
        tag = " (uncertain)" if cx["status"] == "uncertain" else ""
        color = colors.get(cx["arm"], "tab:red")
        ax.axvline(cx["concurrency"], color=color, linestyle=":", linewidth=1.5)
        ax.text(
            cx["concurrency"],
            0.03 + 0.09 * i,
            f" plain overtakes {cx['arm']} at c≈{cx['concurrency']:.2f}{tag}",
            transform=ax.get_xaxis_transform(),
            fontsize=8,
            color=color,
            va="bottom",
            bbox=_BOX,
        )
    if drawn:
        _log2_x(ax, analysis["concurrency"])
        ax.set_ylabel("aggregate output tokens/s\n(median; "
                      + spread_note(analysis, "bars = min–max over reps") + ")")
        ax.set_ylim(bottom=0)
        ax.grid(alpha=0.3)
        _legend_below(ax)
    else:
        _placeholder(ax, "no cell rows")
    ax.set_title(
        _title(analysis, "Throughput vs concurrency (★ knee, dotted: crossover)"), fontsize=10
    )
    return _save(fig, path, analysis)


def plot_speedup(analysis: dict[str, Any], path: Path) -> Path:
    void = _void_map(analysis)
    colors = _colors(analysis)
    fig, axes = plt.subplots(1, 2, figsize=(12, 5.6), sharex=True)
    titles = {
        "throughput": "aggregate throughput, spec / plain",
        "decode": "per-request decode speed (p50), spec / plain",
    }
    any_point = False
    arms = list(dict.fromkeys(s["arm"] for s in analysis["speedup"]))
    for ax, key in zip(axes, ("throughput", "decode"), strict=True):
        for arm in arms:
            pts = sorted(
                (s for s in analysis["speedup"] if s["arm"] == arm and s.get(key)),
                key=lambda s: s["concurrency"],
            )
            if arm in void:
                # Void arms never get a speedup; the legend still says why they are missing.
                ax.plot(
                    [],
                    [],
                    color=VOID_COLOR,
                    linestyle="--",
                    label=_label(arm, void) + " (no speedup)",
                )
                continue
            if not pts:
                continue
            any_point = True
            xs = [p["concurrency"] for p in pts]
            ys = [p[key]["speedup"] for p in pts]
            err = [
                [p[key]["speedup"] - p[key]["lo"] for p in pts],
                [p[key]["hi"] - p[key]["speedup"] for p in pts],
            ]
            ax.errorbar(xs, ys, yerr=err, marker="o", capsize=3, label=arm, color=colors[arm])
        if key == "throughput":
            for cx in analysis["crossover"]:
                if cx["status"] in ("crossover", "uncertain") and cx["concurrency"]:
                    ax.axvline(
                        cx["concurrency"],
                        color=colors.get(cx["arm"], "tab:red"),
                        linestyle=":",
                        linewidth=1.3,
                    )
        ax.axhline(1.0, color="black", linewidth=1, alpha=0.6)
        _log2_x(ax, analysis["concurrency"])
        ax.set_ylabel("speedup (×; " + spread_note(analysis, "bars = widest range over reps")
                      + ")")
        ax.set_title(titles[key], fontsize=10)
        ax.grid(alpha=0.3)
        _legend_below(ax, ncol=1)
    if not any_point:
        _placeholder(axes[0], "no spec arm with a usable plain baseline")
    fig.suptitle(
        _title(
            analysis,
            "Speculative decoding speedup vs concurrency (>1: spec wins; dotted: crossover)",
        ),
        fontsize=10,
    )
    return _save(fig, path, analysis)


def plot_acceptance(analysis: dict[str, Any], path: Path) -> Path:
    void = _void_map(analysis)
    fig, axes = plt.subplots(1, 2, figsize=(10, 4.5))
    rows = [a for a in analysis["acceptance"] if a["acceptance_length"] is not None]
    methods = sorted({a["method"] or "spec" for a in rows})
    for method in methods:
        own = sorted(
            (a for a in rows if (a["method"] or "spec") == method and not a["void"]),
            key=lambda a: a["k"],
        )
        if own:
            axes[0].plot(
                [a["k"] for a in own],
                [a["acceptance_length"] for a in own],
                marker="o",
                label=method,
            )
            axes[1].plot(
                [a["k"] for a in own], [a["acceptance_rate"] for a in own], marker="o", label=method
            )
    for a in rows:
        if a["void"]:
            for ax, key in zip(axes, ("acceptance_length", "acceptance_rate"), strict=True):
                ax.plot(
                    [a["k"]],
                    [a[key]],
                    marker="x",
                    color=VOID_COLOR,
                    linestyle="none",
                    markersize=9,
                    label=_label(a["arm"], void),
                )
    if rows:
        ks = sorted({a["k"] for a in rows})
        axes[0].plot(
            [ks[0], ks[-1]],
            [ks[0] + 1, ks[-1] + 1],
            color="0.7",
            linestyle=":",
            label="ceiling K+1",
        )
        for ax in axes:
            ax.set_xticks(ks)
            ax.set_xlabel("K (draft tokens per step)")
            ax.grid(alpha=0.3)
            ax.legend(fontsize=8)
        axes[0].set_ylabel("acceptance length (tokens per verify, incl. bonus)")
        axes[1].set_ylabel("acceptance rate (accepted / drafted)")
        axes[1].set_ylim(0, 1.05)
    else:
        _placeholder(axes[0], "no acceptance counters (no spec arm measured)")
        _placeholder(axes[1], "")
    fig.suptitle(_title(analysis, "Acceptance vs K (pooled over all cells)"), fontsize=10)
    return _save(fig, path, analysis)


def plot_ttft(analysis: dict[str, Any], path: Path) -> Path:
    void = _void_map(analysis)
    colors = _colors(analysis)
    fig, ax = plt.subplots(figsize=(9, 6))
    rows = analysis["ttft_cache"]
    for arm in (a["label"] for a in analysis["arms"]):
        for cache, ls, mk in (("cold", "-", "o"), ("warm", ":", "s")):
            pts = sorted(
                (r for r in rows if r["arm"] == arm and r[cache]), key=lambda r: r["concurrency"]
            )
            if pts:
                ax.plot(
                    [r["concurrency"] for r in pts],
                    [r[cache]["median"] for r in pts],
                    linestyle="--" if arm in void else ls,
                    marker=mk,
                    color=colors[arm],
                    label=f"{_label(arm, void)} ({cache})",
                )
    if rows:
        _log2_x(ax, analysis["concurrency"])
        ax.set_ylabel("TTFT, median over requests (s)")
        ax.set_ylim(bottom=0)
        ax.grid(alpha=0.3)
        _legend_below(ax)
    else:
        _placeholder(ax, "no closed-loop request rows with TTFT")
    ax.set_title(
        _title(analysis, "Time to first token: cold (solid) vs warm (dotted) prefix cache"),
        fontsize=10,
    )
    return _save(fig, path, analysis)


def plot_cost(analysis: dict[str, Any], path: Path) -> Path:
    void = _void_map(analysis)
    colors = _colors(analysis)
    fig, ax = plt.subplots(figsize=(9, 6))
    price = analysis.get("price_per_hr")
    # A $0/hr machine (your own box, the local provider) has no cost per token to draw, and zeros
    # cannot sit on a log axis.
    ok = [c for c in analysis["cost"] if c["status"] == "ok"] if price != 0 else []
    for arm in (a["label"] for a in analysis["arms"]):
        pts = sorted((c for c in ok if c["arm"] == arm), key=lambda c: c["concurrency"])
        if pts:
            ax.plot(
                [c["concurrency"] for c in pts],
                [c["usd_per_1k"] for c in pts],
                marker="o",
                color=colors[arm],
                label=arm,
            )
        elif arm in void and any(c["arm"] == arm for c in analysis["cost"]):
            ax.plot(
                [], [], color=VOID_COLOR, linestyle="--", label=_label(arm, void) + " (no cost)"
            )
    if ok:
        _log2_x(ax, analysis["concurrency"])
        ax.set_yscale("log")
        dollar_axis(ax)
        ax.set_ylabel("USD per 1k output tokens (log scale)")
        ax.grid(alpha=0.3, which="both")
        ax.text(
            0.99,
            0.98,
            f"pod ${price:g}/hr",
            transform=ax.transAxes,
            ha="right",
            va="top",
            fontsize=9,
            bbox=_BOX,
        )
    else:
        _placeholder(
            ax,
            "pod price unknown — cost not computed (not zero)"
            if price is None
            else "pod price $0/hr — nothing to price per token"
            if price == 0
            else "no throughput to price",
        )
        ax.set_xticks([])
        ax.set_yticks([])
    _legend_below(ax)
    ax.set_title(
        _title(analysis, "Cost per 1k output tokens vs concurrency (lower is better)"), fontsize=10
    )
    return _save(fig, path, analysis)


def _slo_section(analysis: dict[str, Any]) -> SloSection | None:
    return cast("SloSection | None", analysis.get("slo"))  # results/slo.py compute() wrote it


def _rate_points(analysis: dict[str, Any]) -> list[RatePoint]:
    """The SLO section's per (arm, rate) points with a finite rate (an `inf` rate has no place
    on a rate axis; its row stays in the table)."""
    section = _slo_section(analysis)
    return [p for p in (section["points"] if section else [])
            if isinstance(p["rate"], (int, float)) and 0 < p["rate"] < float("inf")]


def plot_rate(analysis: dict[str, Any], path: Path) -> Path:
    """SLO attainment (top) and TTFT p90 from the scheduled send (bottom) against the offered
    request rate, per arm: the open-loop ladder as results/slo.py computed it."""
    section = _slo_section(analysis)
    void = _void_map(analysis)
    colors = _colors(analysis)
    points = _rate_points(analysis)
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(9, 8), sharex=True)
    slo = (section["slo"] if section else None) or {}
    target = section["slo_percentile"] if section else None
    for arm in sorted({p["arm"] for p in points}):
        mine = sorted((p for p in points if p["arm"] == arm), key=lambda p: p["rate"])
        style = {"color": VOID_COLOR if arm in void else colors.get(arm, "C0"),
                 "linestyle": "--" if arm in void else "-", "marker": "o",
                 "label": _label(arm, void)}
        att = [(p["rate"], 100 * a) for p in mine if (a := p["slo_attainment"]) is not None]
        if att:
            top.plot([a for a, _ in att], [b for _, b in att], **style)
        ttft = [(p["rate"], 1000 * t) for p in mine if (t := p["ttft_sched_p90_s"]) is not None]
        if ttft:
            bottom.plot([a for a, _ in ttft], [b for _, b in ttft], **style)
    if not slo:
        _placeholder(top, "no SLO given (--slo): attainment not measured")
    elif target is not None:
        top.axhline(float(target), color="0.3", linestyle=":", linewidth=1)
        top.text(0.01, float(target), f" pass line {float(target):g}%", va="bottom",
                 fontsize=8, transform=top.get_yaxis_transform())
    top.set_ylabel("SLO attainment (% of requests)")
    top.set_ylim(-2, 102)
    top.grid(alpha=0.3)
    if slo.get("ttft_ms") is not None:
        bottom.axhline(float(slo["ttft_ms"]), color="0.3", linestyle=":", linewidth=1)
        bottom.text(0.01, float(slo["ttft_ms"]), f" TTFT target {float(slo['ttft_ms']):g} ms",
                    va="bottom", fontsize=8, transform=bottom.get_yaxis_transform())
    bottom.set_ylabel("TTFT p90 from the scheduled send (ms)")
    bottom.set_ylim(bottom=0)
    bottom.grid(alpha=0.3)
    rates = sorted({p["rate"] for p in points})
    if len(rates) > 1 and rates[-1] / rates[0] >= 4:
        bottom.set_xscale("log", base=2)
        bottom.set_xticks(rates)
        bottom.set_xticklabels([f"{r:g}" for r in rates])
        bottom.minorticks_off()
    bottom.set_xlabel("offered request rate (req/s)")
    _legend_below(bottom)
    top.set_title(_title(analysis, "Open loop: SLO attainment and latency against request rate"),
                  fontsize=10)
    return _save(fig, path, analysis)


def plot_soak(analysis: dict[str, Any], path: Path) -> Path:
    """Acceptance length per minute of each arm's soak cell (the soak section's figures; minutes
    with too few verify steps to judge are hollow), a dotted line where a collapse was flagged."""
    rows = cast("list[SoakRow]", analysis.get("soak") or [])
    void = _void_map(analysis)
    colors = _colors(analysis)
    fig, ax = plt.subplots(figsize=(9, 5))
    for r in rows:
        color = VOID_COLOR if r["arm"] in void else colors.get(r["arm"], "C0")
        pts = [(m["minute"], m["acceptance_length"], m["judged"]) for m in r["minutes"]
               if m["acceptance_length"] is not None]
        ax.plot([p[0] for p in pts], [p[1] for p in pts], color=color,
                linestyle="--" if r["arm"] in void else "-",
                label=_label(f"{r['arm']} ({r['prompt_class']}, c={r['concurrency']})"
                             if r["arm"] not in void else r["arm"], void))
        for minute, length, judged in pts:
            ax.plot([minute], [length], marker="o", color=color,
                    markerfacecolor=color if judged else "white")
        c = r["collapse"]
        if c is not None:
            ax.axvline(c["minute"], color=color, linestyle=":", linewidth=1.2)
            ax.text(c["minute"], 1.0, f" collapse, position {c['position'] or '?'}",
                    rotation=90, va="bottom", fontsize=8, color=color, bbox=_BOX)
    if not rows:
        _placeholder(ax, "no soak cell in this run (benchmark --soak MINUTES)")
    ax.axhline(1.0, color="0.3", linestyle=":", linewidth=1)
    ax.set_xlabel("minute of the soak")
    ax.set_ylabel("acceptance length (1 + accepted drafts / step)")
    ax.set_ylim(bottom=0.9)
    ax.grid(alpha=0.3)
    _legend_below(ax)
    ax.set_title(_title(analysis, "Soak: acceptance per minute"), fontsize=10)
    return _save(fig, path, analysis)


def write_plots(analysis: dict[str, Any], out_dir: Path) -> dict[str, Path]:
    """The closed-loop figures always; the rate figure when the run has open-loop points."""
    out_dir.mkdir(parents=True, exist_ok=True)
    makers = {
        "throughput": plot_throughput,
        "speedup": plot_speedup,
        "acceptance": plot_acceptance,
        "ttft": plot_ttft,
        "cost": plot_cost,
    }
    drawn = {name: fn(analysis, out_dir / PLOT_FILES[name]) for name, fn in makers.items()}
    if _rate_points(analysis):
        drawn["rate"] = plot_rate(analysis, out_dir / RATE_PLOT_FILE)
    if analysis.get("soak"):
        drawn["soak"] = plot_soak(analysis, out_dir / SOAK_PLOT_FILE)
    return drawn


def plot_compare(analyses: Sequence[dict[str, Any]], path: Path) -> Path:
    """Throughput of every run's non-void arms on one axis, one line style per run."""
    fig, ax = plt.subplots(figsize=(9, 6.5))
    styles = ["-", "--", "-.", ":"]
    concs: set[int] = set()
    for i, an in enumerate(analyses):
        void = _void_map(an)
        for arm in (a["label"] for a in an["arms"]):
            xs, ys, _ = _series(an, arm, "output_tok_s")
            if not xs:
                continue
            concs.update(xs)
            label = f"{an['run_id']}: {_label(arm, void)}"
            kw: dict[str, Any] = {"color": VOID_COLOR, "alpha": 0.7} if arm in void else {}
            ax.plot(xs, ys, marker="o", linestyle=styles[i % len(styles)], label=label, **kw)
    _log2_x(ax, sorted(concs))
    ax.set_ylabel("aggregate output tokens/s (median over reps)")
    ax.set_ylim(bottom=0)
    ax.grid(alpha=0.3)
    _legend_below(ax, ncol=1)
    ax.set_title(
        "Throughput vs concurrency, runs compared\n"
        + " vs ".join(f"{a['run_id']} ({a.get('gpu') or 'no GPU'})" for a in analyses),
        fontsize=10,
    )
    stamp = next((a["stamp"] for a in analyses if a.get("stamp")), None)
    _stamp(fig, stamp)
    _hardware_stamp(fig, _hardware_stamps(analyses))
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
