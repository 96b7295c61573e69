"""The "KL vs reference" section of report.md, from the run directory's kl.json (written by `tailpod
eval kl`; the numbers are results/kl.py's, the format docs/kl-eval.md). Report-only: kl.json sits
beside run.json and is not part of the analysis. A directory that holds only a KL evaluation gets
this section under its own frame (report.render_kl_markdown)."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from tailpod.results.kl import KL_FILE
from tailpod.results.markdown import fmt_num, table
from tailpod.results.section import AFTER_PLOTS, Context, RenderContext, Section


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
    L += table(
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
        L += table(["candidate", "class", "positions", "KL mean", "KL p90", "top-1 agreement"],
                    by_class, None)  # fmt: skip
    skipped = [(c["label"], s) for c in cands for s in c.get("skipped_prompts") or []]
    if skipped:
        L += ["Skipped prompts:", ""]
        L += [f"- {label}: {s.get('prompt')}: {s.get('reason')}" for label, s in skipped] + [""]
    for note in kl.get("notes") or []:
        L += [f"- {note}"]
    return L + ["Raw logprobs: `logprobs-*.json`; every number above: `kl.json`.", ""]


def compute(ctx: Context) -> dict[str, Any] | None:
    return load_kl(ctx.run.path) if ctx.run.path else None


def render(kl: dict[str, Any] | None, rc: RenderContext) -> list[str]:
    return render_kl_section(kl) if kl is not None else []


SECTION = Section(key="kl", rank=1020, compute=compute, report_rank=AFTER_PLOTS + 20,
                  render=render, in_analysis=False)  # fmt: skip
