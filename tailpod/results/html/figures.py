"""The interactive figures of the HTML pages, as data: each chart is a title, axis labels and
series of points (x, y and the reps' min–max), taken from the same analysis fields the PNG plots of
results/plots.py draw (its `_series`, `_void_map` and `_rate_points`), so a page and report.md
never disagree about a number. page.js draws them; the tests read back what it drew."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, TypedDict

from tailpod.results.plots import _rate_points, _series, _void_map


class Point(TypedDict):
    x: float
    y: float
    lo: float | None  # the reps' min and max; None where there is no spread (1 rep)
    hi: float | None
    n: int | None  # reps behind the point, where the analysis says


class Series(TypedDict):
    name: str
    void: str | None  # why the arm is void (a failed gate); drawn grey and dashed
    points: list[Point]
    group: int  # which compared run (its line style); 0 on a run's own page


class Chart(TypedDict):
    id: str
    title: str
    x_label: str
    y_label: str
    x_log: bool  # the starting scale; the page has a toggle for each axis
    y_log: bool
    series: list[Series]
    x_labels: list[str] | None  # a categorical axis (offered loads): x is the label's index


def _cell_series(an: dict[str, Any], metric: str, name_prefix: str = "", group: int = 0
                 ) -> list[Series]:
    void = _void_map(an)
    n_at = {(c["arm"], c["concurrency"]): (c.get(metric) or {}).get("n") for c in an["cells"]}
    out: list[Series] = []
    for arm in (a["label"] for a in an["arms"]):
        xs, ys, (lo, hi) = _series(an, arm, metric)
        if not xs:
            continue
        points: list[Point] = []
        for x, y, dlo, dhi in zip(xs, ys, lo, hi, strict=True):
            n = n_at.get((arm, x))
            spread = n is None or n > 1
            points.append({"x": x, "y": y, "lo": y - dlo if spread else None,
                           "hi": y + dhi if spread else None, "n": n})
        out.append({"name": name_prefix + arm, "void": void.get(arm), "points": points,
                    "group": group})
    return out


def _speedup_series(an: dict[str, Any]) -> list[Series]:
    void = _void_map(an)
    by_arm: dict[str, list[Point]] = {}
    for s in an.get("speedup") or []:
        t = s.get("throughput")
        if not t or s.get("concurrency") is None:
            continue
        spread = t.get("n", 2) > 1
        by_arm.setdefault(s["arm"], []).append(
            {"x": s["concurrency"], "y": t["speedup"], "lo": t["lo"] if spread else None,
             "hi": t["hi"] if spread else None, "n": t.get("n")})
    return [{"name": arm, "void": void.get(arm), "points": sorted(pts, key=lambda p: p["x"]),
             "group": 0} for arm, pts in by_arm.items()]


def _rate_series(an: dict[str, Any], field: str, scale: float) -> list[Series]:
    void = _void_map(an)
    by_arm: dict[str, list[Point]] = {}
    for p in _rate_points(an):
        if isinstance(v := p.get(field), (int, float)):
            by_arm.setdefault(p["arm"], []).append(
                {"x": p["rate"], "y": scale * v, "lo": None, "hi": None, "n": p.get("reps")})
    return [{"name": arm, "void": void.get(arm), "points": sorted(pts, key=lambda q: q["x"]),
             "group": 0} for arm, pts in sorted(by_arm.items())]


def _load_series(an: dict[str, Any], field: str) -> tuple[list[str], list[Series]]:
    """The Throughput section's per-load table (sections/by_load.py) as series over its loads:
    open-loop rates, `inf` and a replayed trace alike, in the table's order."""
    by_load = an.get("by_load") or {}
    loads = [str(x) for x in by_load.get("loads") or []]
    void = _void_map(an)
    by_arm: dict[str, list[Point]] = {}
    for p in by_load.get("points") or []:
        if (v := p.get(field)) is not None and str(p["load"]) in loads:
            by_arm.setdefault(p["arm"], []).append(
                {"x": loads.index(str(p["load"])), "y": v, "lo": None, "hi": None,
                 "n": p.get("reps")})
    return loads, [{"name": arm, "void": void.get(arm),
                    "points": sorted(pts, key=lambda q: q["x"]), "group": 0}
                   for arm, pts in sorted(by_arm.items())]


def _finite(v: float | None) -> bool:
    return v is not None and math.isfinite(v)


def _drawable(series: list[Series]) -> list[Series]:
    """Points with a finite x and y only (JSON has no inf; an axis has no place for it); a
    non-finite bar end is no bar. A series left with no point is left out."""
    out: list[Series] = []
    for s in series:
        points: list[Point] = [
            {**p, "lo": p["lo"] if _finite(p["lo"]) and _finite(p["hi"]) else None,
             "hi": p["hi"] if _finite(p["lo"]) and _finite(p["hi"]) else None}
            for p in s["points"] if _finite(p["x"]) and _finite(p["y"])]
        if points:
            out.append({**s, "points": points})
    return out


def _chart(id_: str, title: str, x_label: str, y_label: str, series: list[Series],
           x_log: bool = True, y_log: bool = False, x_labels: list[str] | None = None) -> Chart:
    return {"id": id_, "title": title, "x_label": x_label, "y_label": y_label,
            "x_log": x_log and x_labels is None, "y_log": y_log, "series": _drawable(series),
            "x_labels": x_labels}


def run_charts(an: dict[str, Any]) -> list[Chart]:
    """One run's charts: the closed-loop ones where the run has cells, the offered-rate ones where
    it has open-loop points; a chart with no series is left out (the page says which)."""
    conc = "concurrency (clients)"
    load_axis = "offered load (req/s, or the replayed trace)"
    loads, load_tok_s = _load_series(an, "output_tok_s")
    _, load_goodput = _load_series(an, "goodput_tok_s")
    charts = [
        _chart("throughput", "Throughput vs concurrency (median; bars: min–max over reps)", conc,
               "aggregate output tok/s", _cell_series(an, "output_tok_s")),
        _chart("speedup", "Throughput speedup, spec / plain (bars: widest range the reps allow)",
               conc, "speedup (×)", _speedup_series(an)),
        _chart("latency", "p50 end-to-end latency", conc, "seconds",
               _cell_series(an, "e2e_p50_s")),
        _chart("ttft", "p50 time to first token", conc, "seconds", _cell_series(an, "ttft_p50_s")),
        _chart("acceptance", "Acceptance length (tokens per verify step)", conc, "tokens",
               [s for s in _cell_series(an, "acceptance_length")]),
        _chart("load_tok_s", "Output tok/s at each offered load (median over reps)", load_axis,
               "output tok/s", load_tok_s, x_labels=loads),
        _chart("load_goodput", "Goodput tok/s at each offered load (tokens of the requests that "
               "met the SLO)", load_axis, "goodput tok/s", load_goodput, x_labels=loads),
        _chart("rate_slo", "Open loop: SLO attainment against offered rate",
               "offered request rate (req/s)", "% of requests within the SLO",
               _rate_series(an, "slo_attainment", 100.0)),
        _chart("rate_ttft", "Open loop: TTFT p90 from the scheduled send",
               "offered request rate (req/s)", "ms", _rate_series(an, "ttft_sched_p90_s", 1000.0)),
    ]
    return [c for c in charts if c["series"]]


def compare_charts(analyses: Sequence[dict[str, Any]]) -> list[Chart]:
    """Every run's arms on one throughput axis (the series named `run: arm`), as plot_compare
    draws them, and the same for decode speed."""
    tput: list[Series] = []
    decode: list[Series] = []
    for i, an in enumerate(analyses):
        tput += _cell_series(an, "output_tok_s", f"{an['run_id']}: ", i)
        decode += _cell_series(an, "decode_tok_s_p50", f"{an['run_id']}: ", i)
    charts = [
        _chart("compare_throughput", "Throughput vs concurrency, runs compared (median; bars: "
               "min–max over reps)", "concurrency (clients)", "aggregate output tok/s", tput),
        _chart("compare_decode", "Per-request decode speed p50, runs compared",
               "concurrency (clients)", "tok/s", decode),
    ]
    return [c for c in charts if c["series"]]
