"""The serve tax: the served endpoint's throughput against the engine's own offline decode.

`benchmark --serve-tax` records, per arm, the bare engine's output tok/s at the same prompts,
output length and concurrency (`arms[].serve_tax.rows`, written by probes/bare.py). Here each
(arm, concurrency) gets the bare median over reps (a rep's classes pooled as Σtokens / Σwall, as
the served samples are), the served median from the analysis, their ratio, and the best K both
ways: serving can move the optimum, since its overhead per step weighs less on a longer verify.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, TypedDict

from tailpod.results.io import Run
from tailpod.results.markdown import arm_label, fmt_spread, table
from tailpod.results.section import Context, RenderContext, Section
from tailpod.results.stats import spread


class ServeTaxRow(TypedDict):
    """One (arm, concurrency): bare and served output tok/s (spreads over reps) and their ratio."""

    arm: str
    k: int
    concurrency: int
    void: bool
    bare_tok_s: dict[str, Any] | None  # stats.spread
    served_tok_s: dict[str, Any] | None  # the analysis cell's output_tok_s spread
    served_over_bare: float | None
    served_vs_bare_pct: float | None
    tool: str | None  # what decoded bare (probes/bare.py records it)


class BestArm(TypedDict):
    arm: str
    k: int


class ServeTaxBestK(TypedDict):
    """At one concurrency, the best non-void arm served and bare; `moved` when their K differ."""

    concurrency: int
    served: BestArm | None
    bare: BestArm | None
    moved: bool


class ServeTax(TypedDict):
    """The analysis' `serve_tax` (None when the run measured no bare decode)."""

    rows: list[ServeTaxRow]
    best_k: list[ServeTaxBestK]
    notes: list[str]


def _best(rows: Sequence[ServeTaxRow], way: str) -> BestArm | None:
    """The row with the highest median `way` (served or bare) tok/s, the smaller K of equals."""
    measured = [
        (sp["median"], -r["k"], r)
        for r in rows
        if (sp := r["served_tok_s"] if way == "served" else r["bare_tok_s"])
    ]
    if not measured:
        return None
    top = max(measured, key=lambda m: (m[0], m[1]))[2]
    return BestArm(arm=top["arm"], k=top["k"])


def _bare_by_concurrency(rows: list[dict[str, Any]]) -> dict[int, dict[str, Any] | None]:
    pooled: dict[tuple[int, int], list[float]] = {}
    for row in rows:
        if row.get("output_tokens") is None or not row.get("wall_s"):
            continue
        acc = pooled.setdefault((int(row["concurrency"]), int(row["rep"])), [0.0, 0.0])
        acc[0] += float(row["output_tokens"])
        acc[1] += float(row["wall_s"])
    levels = sorted({c for c, _ in pooled})
    return {
        c: spread(tok / wall for (cc, _), (tok, wall) in sorted(pooled.items()) if cc == c and wall)
        for c in levels
    }


def serve_tax(
    run: Run, cells: Sequence[Mapping[str, Any]], void: dict[str, str]
) -> ServeTax | None:
    """None when the run measured no bare decode; else the table rows, arm notes and best K."""
    cell_at = {(c["arm"], c["concurrency"]): c for c in cells}
    rows: list[ServeTaxRow] = []
    notes: list[str] = []
    ks: dict[str, int] = {}
    for arm in run.meta.arms:
        record = arm.serve_tax
        if not isinstance(record, dict):
            continue
        if record.get("status") != "measured":
            why = record.get("reason") or "; ".join(record.get("error") or []) or "no rows"
            notes.append(f"{arm.label}: bare decode {record.get('status')}: {why}")
            continue
        ks[arm.label] = arm.k
        for c, bare in _bare_by_concurrency(record.get("rows") or []).items():
            served = (cell_at.get((arm.label, c)) or {}).get("output_tok_s")
            ratio = served["median"] / bare["median"] if served and bare and bare["median"] else None
            rows.append(
                ServeTaxRow(
                    arm=arm.label,
                    k=arm.k,
                    concurrency=c,
                    void=arm.label in void,
                    bare_tok_s=bare,
                    served_tok_s=served,
                    served_over_bare=ratio,
                    served_vs_bare_pct=None if ratio is None else round((ratio - 1) * 100, 1),
                    tool=record.get("tool"),
                )
            )
    if not rows and not notes:
        return None
    best = []
    for c in sorted({r["concurrency"] for r in rows}):
        here = [r for r in rows if r["concurrency"] == c and not r["void"]]
        top_served, top_bare = _best(here, "served"), _best(here, "bare")
        moved = bool(top_served and top_bare and top_served["k"] != top_bare["k"])
        best.append(ServeTaxBestK(concurrency=c, served=top_served, bare=top_bare, moved=moved))
    return ServeTax(rows=rows, best_k=best, notes=notes)


def render(tax: ServeTax | None, rc: RenderContext) -> list[str]:
    """Bare engine vs served endpoint per arm and concurrency, and the best K both ways."""
    if not tax:
        return []
    L = ["## Serve tax (bare engine vs served endpoint)", ""]
    tools = sorted({t for r in tax["rows"] if (t := r["tool"])})
    L += [
        "Output tok/s, median [min–max] over reps, at the same prompts, output length and "
        f"concurrency; bare is the engine's own offline decode ({', '.join(tools) or '—'}).",
        "",
    ]
    L += table(
        ["arm", "c", "bare tok/s", "served tok/s", "served / bare", "served vs bare"],
        [
            [
                arm_label(r["arm"], rc.void),
                str(r["concurrency"]),
                fmt_spread(r["bare_tok_s"]),
                fmt_spread(r["served_tok_s"]),
                f"{r['served_over_bare']:.3f}" if r["served_over_bare"] is not None else "—",
                f"{r['served_vs_bare_pct']:+.1f} %" if r["served_vs_bare_pct"] is not None else "—",
            ]
            for r in tax["rows"]
        ],
        rc.stamp,
    )
    for b in tax["best_k"]:
        served, bare = b["served"], b["bare"]
        if served and bare:
            moved = " (serving moved it)" if b["moved"] else ""
            L.append(
                f"- c={b['concurrency']}: best K served K={served['k']} ({served['arm']}), "
                f"bare K={bare['k']} ({bare['arm']}){moved}"
            )
    L += [f"- {n}" for n in tax["notes"]]
    L.append("")
    return L


def compute(ctx: Context) -> ServeTax | None:
    return serve_tax(ctx.run, ctx.cells, ctx.void)


SECTION = Section(key="serve_tax", rank=120, compute=compute, report_rank=70, render=render)
