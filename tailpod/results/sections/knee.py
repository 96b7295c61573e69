"""Knee: the first measured concurrency after which one step raises throughput by less than
`knee_throughput_gain` while the p50 latency grows by more than `knee_latency_growth`."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, TypedDict, cast

from tailpod.results.markdown import arm_label, fmt_num, table
from tailpod.results.section import (
    CompareContext,
    CompareRenderContext,
    Context,
    RenderContext,
    Section,
)


class KneeEntry(TypedDict, total=False):
    """One arm: arm, void, latency_metric and what find_knee() returns (throughput and latency
    only when status is "knee")."""

    arm: str
    void: bool
    latency_metric: str
    status: str  # knee, none_in_range, no_data
    concurrency: int | None
    throughput: float
    latency: float
    sustained: bool
    thresholds: dict[str, float]
    steps: list[dict[str, Any]]
    detail: str


def find_knee(
    points: Sequence[dict[str, Any]],
    throughput_gain: float = 0.10,
    latency_growth: float = 0.25,
) -> dict[str, Any]:
    """First c after which throughput grows < throughput_gain per step while latency grows more
    than latency_growth. `points`: {concurrency, throughput, latency} per measured c."""
    pts = sorted(
        (p for p in points if p.get("throughput") and p.get("latency")),
        key=lambda p: p["concurrency"],
    )
    thresholds = {"throughput_gain": throughput_gain, "latency_growth": latency_growth}
    if len(pts) < 2:
        return {
            "status": "no_data",
            "concurrency": None,
            "thresholds": thresholds,
            "steps": [],
            "detail": "fewer than two measured concurrencies",
        }
    steps = []
    for a, b in zip(pts, pts[1:], strict=False):
        gain = b["throughput"] / a["throughput"] - 1
        growth = b["latency"] / a["latency"] - 1
        steps.append(
            {
                "from": a["concurrency"],
                "to": b["concurrency"],
                "throughput_gain": gain,
                "latency_growth": growth,
                "saturated": gain < throughput_gain and growth > latency_growth,
            }
        )
    for i, step in enumerate(steps):
        if step["saturated"]:
            sustained = all(s["saturated"] for s in steps[i:])
            knee = pts[i]
            detail = (
                f"throughput {knee['throughput']:.1f} tok/s at c={knee['concurrency']}; next step "
                f"{step['throughput_gain'] * 100:+.1f}% throughput, "
                f"{step['latency_growth'] * 100:+.1f}% p50 latency"
            )
            if not sustained:
                detail += "; not sustained over every later step"
            return {
                "status": "knee",
                "concurrency": knee["concurrency"],
                "throughput": knee["throughput"],
                "latency": knee["latency"],
                "sustained": sustained,
                "thresholds": thresholds,
                "steps": steps,
                "detail": detail,
            }
    return {
        "status": "none_in_range",
        "concurrency": None,
        "thresholds": thresholds,
        "steps": steps,
        "detail": "throughput still growing (or latency flat) at every step",
    }


def compute(ctx: Context) -> list[KneeEntry]:
    st = ctx.settings
    knees: list[KneeEntry] = []
    for a in ctx.arms:
        pts = []
        for conc in ctx.concurrencies:
            at = ctx.cell_at.get((a.label, conc))
            tput = at["output_tok_s"] if at else None
            lat = at[st.knee_latency_metric] if at else None  # type: ignore[literal-required]
            if tput and lat:
                pts.append({"concurrency": conc, "throughput": tput["median"],
                            "latency": lat["median"]})  # fmt: skip
        knee = find_knee(pts, st.knee_throughput_gain, st.knee_latency_growth)
        knees.append(cast(KneeEntry, {"arm": a.label, "void": a.label in ctx.void,
                                      "latency_metric": st.knee_latency_metric, **knee}))  # fmt: skip
    return knees


def render(entries: list[KneeEntry], rc: RenderContext) -> list[str]:
    if rc.analysis.get("by_load") and not rc.analysis["cells"]:
        return []  # the crossover section says why an open-loop run has neither
    rows = [
        [
            arm_label(k["arm"], rc.void),
            k["status"],
            str(k["concurrency"]) if k.get("concurrency") else "—",
            fmt_num(k.get("throughput")),
            k.get("detail", ""),
        ]
        for k in entries
    ]
    return table(["arm", "knee", "at c", "tok/s there", "detail"], rows, rc.stamp)


def compare(cc: CompareContext) -> dict[str, Any]:
    rows = [
        {
            "arm": arm,
            "per_run": [
                next(
                    (
                        {
                            "status": k["status"],
                            "concurrency": k.get("concurrency"),
                            "throughput": k.get("throughput"),
                        }
                        for k in a["knee"]
                        if k["arm"] == arm
                    ),
                    None,
                )
                for a in cc.analyses
            ],
        }
        for arm in cc.arm_labels
    ]
    return {"knee": rows}


def _per_run(p: Mapping[str, Any] | None) -> str:
    if p is None:
        return "—"
    if p["status"] == "knee":
        return f"c={p['concurrency']} ({fmt_num(p['throughput'])} tok/s)"
    return str(p["status"])


def render_compare(cmp: Mapping[str, Any], rc: CompareRenderContext) -> list[str]:
    rows = [[k["arm"], *[_per_run(p) for p in k["per_run"]]] for k in cmp["knee"]]
    return ["## Knee", ""] + table(["arm", *rc.ids], rows, rc.stamp)


SECTION = Section(
    key="knee",
    rank=50,
    compute=compute,
    report_rank=50,  # under the crossover table, in its "Crossover and knee" heading
    render=render,
    compare_rank=60,
    compare=compare,
    render_compare=render_compare,
)
