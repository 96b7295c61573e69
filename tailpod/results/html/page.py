"""One self-contained HTML page per run and per comparison (docs/results.md, "The HTML pages").

The page's prose and tables are report.md's and the comparison's own Markdown (report.py renders
them from the analysis and its sections), turned into HTML here: one source for every number. What
only a page has is added around them: the stamps in a banner that stays on screen, the
interactive charts (figures.py, drawn by page.js), sortable tables, void cells marked, and on the
comparison the per-cell differences against the baseline with the reps' spread. The script and
style are inlined from this folder: the page opens offline and fetches nothing."""

from __future__ import annotations

import html
import json
import re
from collections.abc import Sequence
from importlib import resources
from typing import Any

from markdown_it import MarkdownIt

from tailpod import __version__
from tailpod.results.html.figures import Chart, compare_charts, run_charts
from tailpod.results.markdown import STAMP_LINE, fmt_num
from tailpod.results.stats import ratio_spread
from tailpod.secrets import redact

CHARTS_HERE = "TAILPODCHARTSHERE"  # a paragraph report.md's Plots section becomes, then the charts
_PLOTS = re.compile(r"^## Plots\n.*?(?=^## |\Z)", re.M | re.S)
_TD = re.compile(r"<td>(.*?)</td>", re.S)


def _asset(name: str) -> str:
    return resources.files("tailpod.results.html").joinpath(name).read_text(encoding="utf-8")


def markdown_to_html(md: str) -> str:
    """CommonMark with tables; raw HTML in the Markdown is escaped, never passed through (a model
    name or an engine line is text). A table cell that says void is marked for the eye."""
    body = MarkdownIt("commonmark", {"html": False}).enable("table").enable("strikethrough") \
        .render(md)

    def mark(m: re.Match[str]) -> str:
        inner = m.group(1)
        void = "VOID" in inner or inner.startswith("void")
        return f'<td class="void">{inner}</td>' if void else m.group(0)

    return _TD.sub(mark, body)


def hardware_note(analyses: Sequence[dict[str, Any]]) -> str:
    """What the header says when nothing is stamped: only what the runs' hardware check found
    (a match, or facts never recorded), never more."""
    said = []
    for an in analyses:
        verdict = (an.get("hardware") or {}).get("verdict")
        what = ("the pod reported the claimed hardware (or none was claimed)" if verdict == "match"
                else f"hardware {verdict or 'not checked'}: the pod's own facts were not recorded")
        said.append(what if len(analyses) == 1 else f"{an['run_id']}: {what}")
    return "measured on the pod; " + "; ".join(said)


def _stamps_html(stamps: Sequence[str], note: str) -> str:
    if not stamps:
        return f'<div class="clean">{html.escape(note)}</div>'
    return "".join(f'<div class="stamp" role="alert">{html.escape(s)}</div>' for s in stamps)


def _chart_boxes(charts: Sequence[Chart]) -> str:
    out = []
    for c in charts:
        out.append(
            f'<section class="chart" id="chart-{c["id"]}"><h3>{html.escape(c["title"])}</h3>'
            '<div class="controls">click a series to hide or show it · '
            '<label><input type="checkbox" name="xlog"> log x</label> '
            '<label><input type="checkbox" name="ylog"> log y</label></div>'
            f'<svg viewBox="0 0 760 380" role="img" aria-label="{html.escape(c["title"])}">'
            "</svg><div class=\"legend\"></div></section>")
    return "".join(out)


def _json_script(data: Any) -> str:
    # "<" escaped so no string in the data can close the script element
    text = json.dumps(data, allow_nan=False, default=str).replace("<", "\\u003c")
    return f'<script type="application/json" id="tailpod-data">{text}</script>'


def _page(title: str, provenance: str, stamps: Sequence[str], note: str, body: str,
          charts: Sequence[Chart], watermark: str | None) -> str:
    """`watermark`: the off-pod stamp, written across every chart as the PNGs have it."""
    charts_html = (_chart_boxes(charts) if charts
                   else "<p>No chart: the run has no cell a chart could draw.</p>")
    if CHARTS_HERE in body:
        body = body.replace(f"<p>{CHARTS_HERE}</p>", "<h2>Plots</h2>" + charts_html)
    else:
        body = "<h2>Plots</h2>" + charts_html + body
    page = f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta name="generator" content="tailpod {html.escape(__version__)}">
<title>{html.escape(title)}</title>
<style>{_asset("page.css")}</style></head>
<body data-stamps="{len(stamps)}">
<header><h1>{html.escape(title)}</h1><div class="provenance">{provenance}</div>
<div id="stamps">{_stamps_html(stamps, note)}</div></header>
<main>{body}</main>
<footer>Written by tailpod {html.escape(__version__)}; opens offline (no script or style is
fetched). Hover a point for its values; the raw numbers: <code>tailpod report RUN --json</code>.
</footer>
<div id="tip"></div>
{_json_script({"charts": list(charts), "watermark": watermark})}
<script>{_asset("page.js")}</script>
</body></html>
"""
    return redact(page)


def _plain_stamp(text: str) -> str:
    return text.replace("**", "")


def run_stamps(an: dict[str, Any]) -> list[str]:
    """Every stamp a run carries, as its report.md header says them: off-pod, then the hardware
    verdict's (emulated provider, wrong card)."""
    out = [_plain_stamp(STAMP_LINE)] if an.get("stamp") else []
    if (hardware := an.get("hardware") or {}).get("stamp"):
        out.append(str(hardware["stamp"]))
    return out


def _provenance(an: dict[str, Any]) -> str:
    bits = [
        f"model <b>{html.escape(str(an.get('model')))}</b>",
        f"{html.escape(str(an.get('engine')))} {html.escape(str(an.get('engine_version') or '(version unknown)'))}",
        f"{html.escape(str(an.get('provider')))} / {html.escape(str(an.get('gpu') or 'no GPU'))} × "
        f"{an.get('gpu_count') or '—'}",
        f"measured from {html.escape(str(an.get('measured_from')))}",
        f"created {html.escape(str(an.get('created_at') or '—'))}",
    ]
    return " · ".join(bits)


def render_run_html(an: dict[str, Any], md: str) -> str:
    """A run's page from its analysis and its report.md text (report.render_run_markdown)."""
    md = _PLOTS.sub(f"{CHARTS_HERE}\n\n", md, count=1)
    md = re.sub(r"^# .*\n", "", md, count=1)  # the page's header says the title
    return _page(f"tailpod report — {an['run_id']}", _provenance(an), run_stamps(an),
                 hardware_note([an]), markdown_to_html(md), run_charts(an), an.get("stamp"))


# --- the comparison --------------------------------------------------------------------------------

NOISE = "inside the noise"


def cell_differences(analyses: Sequence[dict[str, Any]], metric: str = "output_tok_s"
                     ) -> list[dict[str, Any]]:
    """Per run after the baseline (analyses[0]) and per (arm, concurrency) both measured: the
    two medians and spreads, the difference run/baseline - 1 with the widest range the reps allow
    (stats.ratio_spread), and whether it is inside the noise: the two rep ranges overlap, or a
    side has one rep (no spread to tell noise from a difference)."""
    base = analyses[0]
    at = {(c["arm"], c["concurrency"]): c for c in base["cells"]}
    void_base = {a["label"]: a.get("void_reason") or "void" for a in base["arms"] if a["void"]}
    out = []
    for an in analyses[1:]:
        void = {a["label"]: a.get("void_reason") or "void" for a in an["arms"] if a["void"]}
        for c in an["cells"]:
            b = at.get((c["arm"], c["concurrency"]))
            num, den = c.get(metric), (b or {}).get(metric)
            if b is None or not num or not den:
                continue
            r = ratio_spread(num, den)
            one_rep = min(num["n"], den["n"]) < 2
            out.append({
                "run_id": an["run_id"], "arm": c["arm"], "concurrency": c["concurrency"],
                "baseline": den, "value": num,
                "difference": None if r is None else r["speedup"] - 1,
                "range": None if r is None or one_rep else [r["lo"] - 1, r["hi"] - 1],
                "verdict": ("no spread: 1 rep" if one_rep else
                            NOISE if r is None or r["overlap"] else "beyond the reps' spread"),
                "void": void.get(c["arm"]) or void_base.get(c["arm"]),
            })
    return out


def _spread_text(sp: dict[str, Any]) -> str:
    if sp["n"] < 2:
        return f"{fmt_num(sp['median'])} (1 rep)"
    return f"{fmt_num(sp['median'])} [{fmt_num(sp['min'])}–{fmt_num(sp['max'])}] n={sp['n']}"


def _pct(v: float) -> str:
    return f"{v:+.1%}"


def differences_html(diffs: Sequence[dict[str, Any]], baseline: str) -> str:
    if not diffs:
        return ("<h2>Per-cell differences against the baseline</h2><p>No (arm, concurrency) cell "
                f"is measured both in {html.escape(baseline)} and in another run.</p>")
    rows = []
    for d in diffs:
        cls = "void" if d["void"] else ("noise" if d["verdict"] != "beyond the reps' spread"
                                        else "beyond")
        diff = "—" if d["difference"] is None else _pct(d["difference"])
        rng = "—" if d["range"] is None else f"{_pct(d['range'][0])} … {_pct(d['range'][1])}"
        verdict = d["verdict"] + (f"; VOID: {d['void']}" if d["void"] else "")
        rows.append(
            f'<tr class="{cls}"><td>{html.escape(d["run_id"])}</td><td>{html.escape(d["arm"])}'
            f"</td><td>{d['concurrency']}</td><td>{_spread_text(d['baseline'])}</td>"
            f"<td>{_spread_text(d['value'])}</td><td>{diff}</td><td>{rng}</td>"
            f'<td class="{cls}">{html.escape(verdict)}</td></tr>')
    return (
        "<h2>Per-cell differences against the baseline</h2>"
        f"<p>Output tok/s of each cell against the same arm and concurrency in the baseline "
        f"<b>{html.escape(baseline)}</b>: median [min–max] over reps; the difference's range is "
        "the widest the reps allow. Where the two rep ranges overlap the difference is "
        f"<i>{NOISE}</i> and is greyed; a cell of one rep has no spread to judge it by.</p>"
        '<table class="differences"><thead><tr><th>run</th><th>arm</th><th>c</th>'
        "<th>baseline tok/s</th><th>run tok/s</th><th>difference</th><th>difference range</th>"
        f"<th>verdict</th></tr></thead><tbody>{''.join(rows)}</tbody></table>")


def render_compare_html(analyses: Sequence[dict[str, Any]], cmp: dict[str, Any], md: str,
                        decision_md: str | None) -> str:
    """The comparison's page: its Markdown (report.render_compare_markdown), the differences
    against the baseline, the decision over the runs, and the compared charts."""
    md = re.sub(r"^# .*\n", "", md, count=1)
    ids = [a["run_id"] for a in analyses]
    stamps = [_plain_stamp(STAMP_LINE)] if cmp.get("stamp") else []
    stamps += [f"{rid}: {s}" for rid, s in (cmp.get("hardware_stamps") or {}).items()]
    provenance = (f"baseline <b>{html.escape(ids[0])}</b> · "
                  + " · ".join(f"{html.escape(a['run_id'])}: {html.escape(str(a.get('gpu') or 'no GPU'))}"
                               f", {html.escape(str(a.get('engine')))} "
                               f"{html.escape(str(a.get('engine_version') or '?'))}"
                               for a in analyses))
    body = differences_html(cell_differences(analyses), ids[0]) + markdown_to_html(md)
    if decision_md:
        body += markdown_to_html(decision_md)
    return _page(f"tailpod comparison — {' vs '.join(ids)}", provenance, stamps,
                 hardware_note(analyses), body, compare_charts(analyses), cmp.get("stamp"))
