"""report.md (+ PNGs) for one run, and a side-by-side comparison for several.

Every number in a table is formatted from the analysis dict by the `fmt_*` helpers below, so a
table can be checked against `tailpod report --json` mechanically.
"""

from __future__ import annotations

import json
import os
import re
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from tailpod.errors import ConfigError
from tailpod.results.analysis import AnalysisSettings, analyze
from tailpod.results.compare import compare_analyses
from tailpod.results.io import STAMP, Run, load_run
from tailpod.results.kl import KL_FILE
from tailpod.results.plots import PLOT_FILES, plot_compare, write_plots
from tailpod.results.provider_facts import provider_facts_line
from tailpod.results.slo import render as render_slo_section
from tailpod.secrets import redact

REPORT_FILE = "report.md"
STAMP_LINE = f"**{STAMP}** (measured off-pod: numbers include the network and client path)"
_SECRETISH_FLAG = re.compile(r"(token|key|secret|password|auth)", re.I)
_SECRETISH_VALUE = re.compile(r"^(hf_|tskey-|rpa_|sk-)|(_TOKEN|_KEY|_SECRET)=", re.I)


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


def _table(headers: Sequence[str], rows: Sequence[Sequence[str]], stamp: str | None) -> list[str]:
    lines = [STAMP_LINE, ""] if stamp else []
    lines.append("| " + " | ".join(headers) + " |")
    lines.append("|" + "|".join("---" for _ in headers) + "|")
    lines += ["| " + " | ".join(str(c).replace("|", "\\|") for c in row) + " |" for row in rows]
    return lines + [""]


def _voids(an: dict[str, Any]) -> dict[str, str]:
    return {a["label"]: a["void_reason"] or "void" for a in an["arms"] if a["void"]}


def _grid(an: dict[str, Any], entries: Sequence[dict[str, Any]], cell_fmt: Any) -> list[list[str]]:
    void = _voids(an)
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


def render_run_markdown(an: dict[str, Any]) -> str:
    stamp = an.get("stamp")
    void = _voids(an)
    concs = an["concurrency"]
    chead = ["arm"] + [f"c={c}" for c in concs]
    L: list[str] = [f"# tailpod report — {an['run_id']}", ""]
    if stamp:
        L += [f"> {STAMP_LINE}", ""]
    hardware = an.get("hardware") or {}
    if hardware.get("stamp"):
        L += [f"> **{hardware['stamp']}**", ""]
    plan = an.get("plan") or {}
    price = an.get("price_per_hr")
    L += _table(
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
            ["provider facts", provider_facts_line(an.get("provider_facts"))],
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

    L += ["## Arms", ""]
    arm_rows = []
    for a in an["arms"]:
        gate = a.get("gate") or {}
        gate_txt = gate.get("status", "—")
        if gate.get("first_mismatch"):
            mm = gate["first_mismatch"]
            gate_txt += f" (prompt {mm['prompt']}, position {mm['position']})"
        if a.get("unverified"):
            gate_txt += f" — UNVERIFIED: {a['unverified']}"
        arm_rows.append(
            [
                arm_label(a["label"], void),
                str(a["k"]),
                a.get("method") or "—",
                a.get("checkpoint") or "—",
                gate_txt,
                a.get("baseline") or "—",
                "`" + " ".join(scrub_argv(a.get("argv") or [])) + "`" if a.get("argv") else "—",
            ]
        )
    L += _table(["arm", "K", "method", "checkpoint", "gate", "baseline", "argv"], arm_rows, stamp)

    L += ["## Throughput", "", "Aggregate output tokens/s, median [min–max] over reps.", ""]
    L += _table(chead, _grid(an, an["cells"], lambda e: fmt_spread(e["output_tok_s"])), stamp)
    L += ["p50 end-to-end latency (s), median [min–max] over reps.", ""]
    L += _table(chead, _grid(an, an["cells"], lambda e: fmt_spread(e["e2e_p50_s"])), stamp)
    L += ["Per-request decode speed p50 (tok/s), median [min–max] over reps.", ""]
    L += _table(chead, _grid(an, an["cells"], lambda e: fmt_spread(e["decode_tok_s_p50"])), stamp)

    L += [
        "## Speedup over plain",
        "",
        "Aggregate throughput, spec / plain: median ratio "
        "[min(spec)/max(plain)–max(spec)/min(plain)]. "
        "Void arms never get a speedup; an arm whose output the gate did not verify (gate "
        "skipped, or text compared instead of token ids) is marked UNVERIFIED.",
        "",
    ]

    def sp_cell(key: str) -> Any:
        def f(e: dict[str, Any]) -> str:
            if e.get("void"):
                return "VOID"
            if not e.get(key):
                return str(e.get("reason") or "—")
            # A speedup whose output nobody verified is never printed as a plain figure.
            return fmt_ratio(e[key]) + (" UNVERIFIED" if e.get("unverified") else "")

        return f

    L += _table(chead, _grid(an, an["speedup"], sp_cell("throughput")), stamp)
    L += ["Per-request decode speed (p50), spec / plain.", ""]
    L += _table(chead, _grid(an, an["speedup"], sp_cell("decode")), stamp)

    L += ["## Crossover and knee", ""]
    L += _table(
        ["arm", "crossover", "at c", "detail"],
        [
            [
                arm_label(c["arm"], void),
                c["status"],
                f"{c['concurrency']:.2f}" if c.get("concurrency") else "—",
                c.get("detail", ""),
            ]
            for c in an["crossover"]
        ],
        stamp,
    )
    L += _table(
        ["arm", "knee", "at c", "tok/s there", "detail"],
        [
            [
                arm_label(k["arm"], void),
                k["status"],
                str(k["concurrency"]) if k.get("concurrency") else "—",
                fmt_num(k.get("throughput")),
                k.get("detail", ""),
            ]
            for k in an["knee"]
        ],
        stamp,
    )

    bk = an["best_k"]
    L += ["## Best K", ""]
    if bk["per_concurrency"]:
        L += _table(
            ["method", "c", "best K", "arm", "tok/s", "stops?", "evidence"],
            [
                [
                    p["method"],
                    str(p["concurrency"]),
                    str(p["best_k"]),
                    p.get("best_arm") or "—",
                    fmt_num(p.get("value")),
                    "yes" if p["stops"] else "no",
                    p["evidence"],
                ]
                for p in bk["per_concurrency"]
            ],
            stamp,
        )
        L += _table(
            ["method", "overall best K", "arm", "basis", "wins per K", "evidence"],
            [
                [
                    o["method"],
                    str(o["best_k"]),
                    o.get("best_arm") or "—",
                    f"{o['basis']} over c={o['over_concurrency']}",
                    ", ".join(f"K={k}: {n}" for k, n in o["wins"].items()),
                    o["evidence"],
                ]
                for o in bk["overall"]
            ],
            stamp,
        )
    else:
        L += ["No spec arm to choose K from.", ""]
    if bk.get("excluded_void"):
        L += ["Excluded (void): " + ", ".join(f"~~{v}~~" for v in bk["excluded_void"]), ""]
    L += render_serve_tax_section(an.get("serve_tax"), _voids(an), stamp)
    L += render_slo_section(an.get("slo"), stamp)

    L += ["## Acceptance", ""]
    L += _table(
        ["arm", "K", "acceptance length", "acceptance rate", "per position", "drafts"],
        [
            [
                arm_label(a["arm"], void),
                str(a["k"]),
                fmt_num(a["acceptance_length"]),
                fmt_num(a["acceptance_rate"]),
                ", ".join(f"{p:.2f}" for p in a["per_position"]) or "—",
                str(a.get("drafts", "—")),
            ]
            for a in an["acceptance"]
        ],
        stamp,
    )

    L += ["## TTFT, cold vs warm prefix cache", "", "Median TTFT (s) over successful requests.", ""]
    if an["ttft_cache"]:
        L += _table(
            ["arm", "c", "cold", "warm", "n cold / warm"],
            [
                [
                    arm_label(t["arm"], void),
                    str(t["concurrency"]),
                    fmt_num(t["cold"]["median"] if t["cold"] else None),
                    fmt_num(t["warm"]["median"] if t["warm"] else None),
                    f"{t['cold']['n'] if t['cold'] else 0} / {t['warm']['n'] if t['warm'] else 0}",
                ]
                for t in an["ttft_cache"]
            ],
            stamp,
        )
    else:
        L += ["No request rows with TTFT.", ""]

    L += [
        "## Capacity",
        "",
        "From each arm's engine startup lines (raw lines are in run.json).",
        "",
    ]
    L += _table(
        [
            "arm",
            "K",
            "KV pool tokens",
            "max running requests",
            "vLLM max concurrency",
            "drop vs plain",
        ],
        [
            [
                arm_label(c["arm"], void),
                str(c["k"]),
                fmt_num(c["kv_tokens"]),
                fmt_num(c["max_running_requests"]),
                fmt_num(c["max_concurrency"]),
                (c["drop"] or {}).get("detail", "—") if c["drop"] else "—",
            ]
            for c in an["capacity"]
        ],
        stamp,
    )

    L += ["## Cost", ""]
    if price is None:
        L += ["Pod price unknown: cost is **unknown** (not zero).", ""]
    else:
        L += [f"At the pod's ${price:g}/hr: USD per 1k output tokens (per 1M in brackets).", ""]
    if hardware.get("stamp"):
        L += [f"**{hardware['stamp']}**", ""]

    def cost_cell(e: dict[str, Any]) -> str:
        if e["status"] == "void":
            return "VOID"
        if e["status"] != "ok":
            return "unknown"
        return f"{fmt_usd(e['usd_per_1k'])} ({fmt_usd(e['usd_per_1m'])})"

    L += _table(chead, _grid(an, an["cost"], cost_cell), stamp)

    if an["bytes_model"]:
        L += [
            "## Bytes model",
            "",
            "Decode speedup that weight bytes alone predict (A/B) next to the measured one.",
            "",
        ]
        L += _table(
            ["A", "B", "weights A / B (GB)", "predicted", "measured", "at c", "detail"],
            [
                [
                    b["arm_a"],
                    b["arm_b"],
                    f"{fmt_num(b['weights_a_gb'])} / {fmt_num(b['weights_b_gb'])}",
                    f"{b['predicted']:.2f}×" if b["predicted"] else "—",
                    f"{b['measured']:.2f}×" if b["measured"] else "—",
                    str(b.get("concurrency") or "—"),
                    b["detail"],
                ]
                for b in an["bytes_model"]
            ],
            stamp,
        )

    if an.get("by_prompt_class"):
        L += ["## Throughput by prompt class", ""]
        for pc, rows in an["by_prompt_class"].items():
            L += [f"### {pc}", ""]
            L += _table(chead, _grid(an, rows, lambda e: fmt_spread(e["output_tok_s"])), stamp)

    L += ["## Plots", ""]
    for name, file in PLOT_FILES.items():
        L += [f"![{name}]({file})", ""]
    L += [
        "Raw data: `run.json` (with every arm's startup lines) and `rows.jsonl`; this analysis as "
        "JSON: `tailpod report RUN --json`.",
        "",
    ]
    return redact("\n".join(L))


def load_kl(run_dir: str | os.PathLike[str]) -> dict[str, Any] | None:
    """kl.json of a run directory (written by `tailpod eval kl`), or None when it has none."""
    path = Path(run_dir) / KL_FILE
    if not path.is_file():
        return None
    try:
        data = json.loads(path.read_text())
    except ValueError:
        return None
    return data if isinstance(data, dict) else None


def _pct(v: float | None) -> str:
    return "—" if v is None else f"{v:.1%}"


def render_kl_section(kl: dict[str, Any]) -> list[str]:
    """The "KL vs reference" section: one row per candidate, then per prompt class."""
    ref = kl.get("reference") or {}
    cands = kl.get("candidates") or []
    L = ["## KL vs reference", ""]
    L += [
        f"Reference `{ref.get('model')}`: greedy continuations of up to {kl.get('max_tokens')} "
        f"tokens over {len(kl.get('prompts') or [])} prompts ({ref.get('positions')} positions); "
        f"every candidate scored on the reference's tokens (teacher forcing, "
        f"{kl.get('method') or 'method unknown'}), top-{kl.get('top_k')} logprobs.",
        "",
        f"Estimator: {kl.get('estimator')}.",
        "",
        f"Reference noise floor: its own scored top-1 is its greedy token at "
        f"{_pct(ref.get('top1_is_greedy_token'))} of positions.",
        "",
    ]
    if not cands:
        return L + ["No candidate finished.", ""]
    rows = []
    for c in cands:
        k = c["kl"]
        inf = f" (+{k['infinite']} ∞)" if k.get("infinite") else ""
        div = c.get("first_divergence_median")
        rows.append([
            c["label"], f"`{c.get('model')}`", fmt_num(k.get("mean")) + inf, fmt_num(k.get("p90")),
            fmt_num(k.get("p99")), fmt_num(k.get("max")), _pct(c.get("top1_agreement")),
            _pct((c.get("ref_mass_covered") or {}).get("mean")),
            f"{c.get('diverged_prompts')}/{c.get('prompts')}"
            + (f" (median at token {fmt_num(div)})" if div is not None else ""),
        ])  # fmt: skip
    L += _table(
        ["candidate", "model", "KL mean (nats)", "p90", "p99", "max", "top-1 agreement",
         "ref mass covered", "greedy diverges"],
        rows, None,
    )  # fmt: skip
    by_class = [
        [c["label"], cls, str(v.get("positions")), fmt_num(v.get("kl_mean")),
         fmt_num(v.get("kl_p90")), _pct(v.get("top1_agreement"))]
        for c in cands for cls, v in sorted((c.get("by_class") or {}).items())
    ]  # fmt: skip
    if by_class:
        L += ["By prompt class.", ""]
        L += _table(["candidate", "class", "positions", "KL mean", "KL p90", "top-1 agreement"],
                    by_class, None)  # fmt: skip
    skipped = [(c["label"], s) for c in cands for s in c.get("skipped_prompts") or []]
    if skipped:
        L += ["Skipped prompts:", ""]
        L += [f"- {label}: {s.get('prompt')}: {s.get('reason')}" for label, s in skipped] + [""]
    for note in kl.get("notes") or []:
        L += [f"- {note}"]
    return L + ["Raw logprobs: `logprobs-*.json`; every number above: `kl.json`.", ""]


def render_kl_markdown(kl: dict[str, Any]) -> str:
    """A report for a run directory that holds only a KL evaluation."""
    engine = kl.get("engine") or {}
    L = [f"# tailpod KL evaluation — {kl.get('run_id')}", ""]
    L += _table(
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


def render_serve_tax_section(
    tax: dict[str, Any] | None, void: dict[str, str], stamp: str | None
) -> list[str]:
    """Bare engine vs served endpoint per arm and concurrency, and the best K both ways."""
    if not tax:
        return []
    L = ["## Serve tax (bare engine vs served endpoint)", ""]
    tools = sorted({r["tool"] for r in tax["rows"] if r.get("tool")})
    L += [
        "Output tok/s, median [min–max] over reps, at the same prompts, output length and "
        f"concurrency; bare is the engine's own offline decode ({', '.join(tools) or '—'}).",
        "",
    ]
    L += _table(
        ["arm", "c", "bare tok/s", "served tok/s", "served / bare", "served vs bare"],
        [
            [
                arm_label(r["arm"], void),
                str(r["concurrency"]),
                fmt_spread(r["bare_tok_s"]),
                fmt_spread(r["served_tok_s"]),
                f"{r['served_over_bare']:.3f}" if r["served_over_bare"] is not None else "—",
                f"{r['served_vs_bare_pct']:+.1f} %" if r["served_vs_bare_pct"] is not None else "—",
            ]
            for r in tax["rows"]
        ],
        stamp,
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


def render_fingerprint_section(fp: dict[str, Any], stamp: str | None) -> list[str]:
    """Acceptance of the same pair across runs (results/fingerprint.py), with the flags first."""
    if not fp.get("checks"):
        return []
    L = ["## Acceptance fingerprint (same pair, run_i vs run_0)", ""]
    L += [f"- **FLAG**: {f}" for f in fp["flags"]] or ["- every shared arm agrees"]
    L.append("")
    L += _table(
        ["arm", "prompt class", "runs", "acceptance length", "rep ranges", "allowed", "status"],
        [
            [
                c["arm"],
                c["prompt_class"],
                " vs ".join(c["runs"]),
                " vs ".join(fmt_num(v) for v in c["acceptance_length"]),
                " / ".join(fmt_num(v) for v in c["rep_range"]),
                fmt_num(c["allowed"]),
                c["status"],
            ]
            for c in fp["checks"]
        ],
        stamp,
    )
    return L


def render_compare_markdown(cmp: dict[str, Any]) -> str:
    stamp = cmp.get("stamp")
    runs = cmp["runs"]
    ids = [r["run_id"] for r in runs]
    L = [f"# tailpod comparison — {' vs '.join(ids)}", ""]
    if stamp:
        L += [f"> {STAMP_LINE}", ""]
    for run_id, hardware_stamp in (cmp.get("hardware_stamps") or {}).items():
        L += [f"> **{run_id}: {hardware_stamp}**", ""]
    L += _table(
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
    L += render_fingerprint_section(cmp.get("fingerprint") or {}, stamp)

    def side(rows: Sequence[dict[str, Any]], key: str, fmt: Any) -> list[list[str]]:
        out = []
        for e in rows:
            void = [v for v in e["void"] if v]
            label = f"~~{e['arm']}~~ (VOID: {void[0]})" if void else e["arm"]
            vals = [fmt(v) for v in e[key]]
            ratios = ["—" if r is None else f"{r:.2f}×" for r in e.get("ratios", [])[1:]]
            out.append([label, str(e["concurrency"]), *vals, *ratios])
        return out

    ratio_heads = [f"{i} / {ids[0]}" for i in ids[1:]]
    L += ["## Throughput (median output tok/s)", ""]
    L += _table(["arm", "c", *ids, *ratio_heads], side(cmp["throughput"], "values", fmt_num), stamp)
    L += ["## Per-request decode speed (median p50 tok/s)", ""]
    L += _table(["arm", "c", *ids, *ratio_heads], side(cmp["decode"], "values", fmt_num), stamp)
    if cmp["speedup"]:
        L += ["## Spec speedup over plain, per run", ""]
        L += _table(
            ["arm", "c", *ids],
            side(cmp["speedup"], "values", lambda v: "—" if v is None else f"{v:.2f}×"),
            stamp,
        )
    L += ["## Cost (USD per 1M output tokens)", ""]
    L += _table(["arm", "c", *ids, *ratio_heads], side(cmp["cost"], "usd_per_1m", fmt_usd), stamp)
    if cmp["crossover"]:
        L += ["## Crossover", ""]
        L += _table(
            ["arm", *ids],
            [
                [
                    c["arm"],
                    *[
                        "—"
                        if p is None
                        else (
                            f"{p['status']} c≈{p['concurrency']:.2f}"
                            if p.get("concurrency")
                            else p["status"]
                        )
                        for p in c["per_run"]
                    ],
                ]
                for c in cmp["crossover"]
            ],
            stamp,
        )
    L += ["## Knee", ""]
    L += _table(
        ["arm", *ids],
        [
            [
                k["arm"],
                *[
                    "—"
                    if p is None
                    else (
                        f"c={p['concurrency']} ({fmt_num(p['throughput'])} tok/s)"
                        if p["status"] == "knee"
                        else p["status"]
                    )
                    for p in k["per_run"]
                ],
            ]
            for k in cmp["knee"]
        ],
        stamp,
    )
    L += ["## Capacity (KV tokens / max running requests)", ""]
    L += _table(
        ["arm", *ids],
        [
            [
                c["arm"],
                *[
                    f"{fmt_num(kv)} / {fmt_num(s)}"
                    for kv, s in zip(c["kv_tokens"], c["max_running_requests"], strict=True)
                ],
            ]
            for c in cmp["capacity"]
        ],
        stamp,
    )
    if cmp["bytes_model"]:
        L += ["## Bytes model across checkpoints", ""]
        L += _table(
            ["A", "B", "weights A / B (GB)", "predicted", "measured", "detail"],
            [
                [
                    f"{b['run_a']} ({b['checkpoint_a']})",
                    f"{b['run_b']} ({b['checkpoint_b']})",
                    f"{fmt_num(b['weights_a_gb'])} / {fmt_num(b['weights_b_gb'])}",
                    f"{b['predicted']:.2f}×" if b["predicted"] else "—",
                    f"{b['measured']:.2f}×" if b["measured"] else "—",
                    b["detail"],
                ]
                for b in cmp["bytes_model"]
            ],
            stamp,
        )
    L += [f"![compare]({cmp.get('plot_file', 'compare_throughput.png')})", ""]
    return redact("\n".join(L))


def _compare_name(ids: Sequence[str]) -> str:
    safe = [re.sub(r"[^A-Za-z0-9._-]+", "_", i)[:40] for i in ids]
    return "compare-" + "-vs-".join(safe) + ".md"


def decision_section(run: Any, an: dict[str, Any]) -> str:
    """The "Decision" section: the run's decision.json when `tailpod decide` wrote one, else the
    throughput decision computed here."""
    from tailpod.results.decide import DECISION_FILE, compute, render

    saved = run.path / DECISION_FILE if run.path else None
    dec = None
    if saved is not None and saved.is_file():
        try:
            dec = json.loads(saved.read_text())
        except json.JSONDecodeError:
            dec = None
    if dec is None:
        dec = compute([run], analyses=[an])
    lines = render(dec, STAMP_LINE)
    return ("\n" + redact("\n".join(lines))) if lines else ""


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
    analyses = [analyze(run, settings) for run in loaded]
    for run, an in zip(loaded, analyses, strict=True):
        assert run.path is not None
        kl = load_kl(run.path)
        with tempfile.TemporaryDirectory(dir=run.path, prefix=".report-") as tmp:
            stage = Path(tmp)
            if kl is not None and not run.cells:  # a KL evaluation only: no throughput to plot
                text = render_kl_markdown(kl)
            else:
                write_plots(an, stage)
                text = render_run_markdown(an) + decision_section(run, an)
                if kl is not None:
                    text += "\n" + redact("\n".join(render_kl_section(kl)))
            plots = sorted(stage.iterdir())  # whatever the plotter drew, all complete by now
            (stage / REPORT_FILE).write_text(text)
            _move_into_place([*plots, stage / REPORT_FILE], run.path)
    first = Path(analyses[0]["run_dir"])
    if len(analyses) == 1:
        return first / REPORT_FILE
    target = Path(out_dir) if out_dir else first
    target.mkdir(parents=True, exist_ok=True)
    cmp = compare_analyses(analyses)
    path = target / _compare_name([a["run_id"] for a in analyses])
    cmp["plot_file"] = path.with_suffix(".png").name
    cmp["hardware_stamps"] = {a["run_id"]: a["hardware"]["stamp"] for a in analyses
                              if (a.get("hardware") or {}).get("stamp")}
    with tempfile.TemporaryDirectory(dir=target, prefix=".report-") as tmp:
        stage = Path(tmp)
        png = plot_compare(analyses, stage / path.with_suffix(".png").name)
        (stage / path.name).write_text(render_compare_markdown(cmp))
        _move_into_place([png, stage / path.name], target)
    return path
