"""The markdown every report section writes with: number formats, tables and the arm-by-concurrency
grid. Every number in a table is formatted from the analysis by the `fmt_*` helpers here, so a
table can be checked against `tailpod report --json` mechanically."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from tailpod.results.io import STAMP

STAMP_LINE = f"**{STAMP}** (measured off-pod: numbers include the network and client path)"
_SECRETISH_FLAG = re.compile(r"(token|key|secret|password|auth)", re.I)
_SECRETISH_VALUE = re.compile(r"^(hf_|tskey-|rpa_|sk-)|(_TOKEN|_KEY|_SECRET)=", re.I)


# What each flag a cell row may carry means (agent/probes/rows.py writes them; measure/sweep.py
# adds void and unverified), for the legend under a table that shows them (newcomer 2.13:
# `loop_lag` was explained nowhere in the output).
CELL_FLAG_MEANINGS = {
    "failures": "some requests failed; the latency figures leave them out",
    "no_usage": "the engine reported no token usage for some requests: output tokens are a floor",
    "client_bound": "the load generator's busiest process used 80% of a CPU or more: the client "
                    "may have held throughput down, so it is a floor",
    "loop_lag": "the load generator's event loop stalled for more than 50 ms: request timings "
                "may include the client's own delay",
    "behind_schedule": "open loop: requests left more than 10 ms late (median): the offered rate "
                       "was not fully kept",
    "void": "the arm failed its token-identity gate or its structure gate: no speedup or cost "
            "is taken from it",
    "unverified": "nothing checked that the arm decodes what plain decode does",
    STAMP: "measured off the pod: the numbers include the network and the client path",
}


def flag_legend(flags: Iterable[str]) -> list[str]:
    """`flag: meaning` for each known flag among `flags`, in CELL_FLAG_MEANINGS' order."""
    shown = set(flags)
    return [f"{name}: {text}" for name, text in CELL_FLAG_MEANINGS.items() if name in shown]


def fmt_num(v: float | None) -> str:
    if v is None:
        return "—"
    a = abs(v)
    if a >= 1 and float(v).is_integer():
        return f"{int(v):,}"
    if a >= 1000:
        return f"{v:,.0f}"
    if a >= 100:
        return f"{v:.1f}"
    if a >= 1:
        return f"{v:.2f}"
    return f"{v:.3g}"


def fmt_usd(v: float | None) -> str:
    return "—" if v is None else f"${v:.4g}"


def fmt_spread(sp: dict[str, Any] | None) -> str:
    if not sp:
        return "—"
    if sp["n"] == 1:
        return f"{fmt_num(sp['median'])} ({NO_SPREAD})"
    return f"{fmt_num(sp['median'])} [{fmt_num(sp['min'])}–{fmt_num(sp['max'])}]"


def fmt_metric(entry: Mapping[str, Any], metric: str) -> str:
    """A cell summary's spread of `metric`, or "void: why" where thin evidence voided it
    (results/evidence.py)."""
    why = (entry.get("void_metrics") or {}).get(metric)
    return f"void: {why}" if entry.get(metric) is None and why else fmt_spread(entry.get(metric))


NO_SPREAD = "no spread: 1 rep"  # a range over one rep is a single number, not a spread


def fmt_ratio(r: dict[str, Any] | None) -> str:
    if not r:
        return "—"
    if r.get("n") == 1:
        return f"{r['speedup']:.2f}× ({NO_SPREAD})"
    return f"{r['speedup']:.2f}× [{r['lo']:.2f}–{r['hi']:.2f}]"


def arm_label(label: str, void: dict[str, str]) -> str:
    return f"~~{label}~~ (VOID: {void[label]})" if label in void else label


def scrub_argv(argv: Sequence[str]) -> list[str]:
    """Mask anything in an argv that looks like a credential (defence in depth over redact())."""
    out: list[str] = []
    mask_next = False
    for arg in argv:
        if mask_next:
            out.append("***")
            mask_next = False
            continue
        if (
            arg.startswith("--")
            and _SECRETISH_FLAG.search(arg)
            and "max" not in arg
            and "tokens" not in arg
        ):
            if "=" in arg:
                out.append(arg.split("=", 1)[0] + "=***")
            else:
                out.append(arg)
                mask_next = True
            continue
        out.append("***" if _SECRETISH_VALUE.search(arg) else arg)
    return out


def table(headers: Sequence[str], rows: Sequence[Sequence[str]], stamp: str | None) -> list[str]:
    lines = [STAMP_LINE, ""] if stamp else []
    lines.append("| " + " | ".join(headers) + " |")
    lines.append("|" + "|".join("---" for _ in headers) + "|")
    lines += ["| " + " | ".join(str(c).replace("|", "\\|") for c in row) + " |" for row in rows]
    return lines + [""]


def voids(an: Mapping[str, Any]) -> dict[str, str]:
    """Void arm → why, from the analysis' arm rows."""
    return {a["label"]: a["void_reason"] or "void" for a in an["arms"] if a["void"]}


def grid(
    an: Mapping[str, Any], entries: Sequence[Mapping[str, Any]], cell_fmt: Callable[[Any], str]
) -> list[list[str]]:
    """One row per arm that has entries, one column per measured concurrency."""
    void = voids(an)
    unverified = {a["label"]: a["unverified"] for a in an["arms"] if a.get("unverified")}
    concs = an["concurrency"]
    rows = []
    for arm in (a["label"] for a in an["arms"]):
        at = {e["concurrency"]: e for e in entries if e["arm"] == arm}
        if not at:
            continue
        label = arm_label(arm, void)
        if arm in unverified:
            label += f" (UNVERIFIED: {unverified[arm]})"
        rows.append([label] + [cell_fmt(at[c]) if c in at else "—" for c in concs])
    return rows



def load_head(loads: Sequence[str]) -> list[str]:
    """The column heads of an open-loop table: one per offered load (a rate, or the trace)."""
    return ["arm"] + [ld if ld == "trace" else f"rate={ld}" for ld in loads]


def load_grid(
    an: Mapping[str, Any], entries: Sequence[Mapping[str, Any]], cell_fmt: Callable[[Any], str]
) -> list[list[str]]:
    """One row per arm that has entries, one column per offered load of the analysis' by_load."""
    void = voids(an)
    rows = []
    for arm in (a["label"] for a in an["arms"]):
        at = {e["load"]: e for e in entries if e["arm"] == arm}
        if at:
            rows.append([arm_label(arm, void)]
                        + [cell_fmt(at[ld]) if ld in at else "not measured"
                           for ld in an["by_load"]["loads"]])
    return rows


def side_by_side(
    rows: Sequence[Mapping[str, Any]], key: str, fmt: Callable[[Any], str]
) -> list[list[str]]:
    """Comparison rows: arm (struck through when void in any run), c, each run's value, and the
    ratios to the first run."""
    out = []
    for e in rows:
        void = [v for v in e["void"] if v]
        label = f"~~{e['arm']}~~ (VOID: {void[0]})" if void else e["arm"]
        void_values = e.get("void_values") or [None] * len(e[key])
        vals = [f"void: {why}" if v is None and why else fmt(v)
                for v, why in zip(e[key], void_values, strict=True)]
        ratios = ["—" if r is None else f"{r:.2f}×" for r in e.get("ratios", [])[1:]]
        out.append([label, str(e["concurrency"]), *vals, *ratios])
    return out
