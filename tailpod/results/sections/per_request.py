"""Per request, by arm and prompt class: the distribution of the requests' own acceptance (p10,
p50, p90, request mean, token-weighted) beside the /metrics figure of the same cells, and the
structure checks of structured and tools classes (parse, validity, tool calls, finish reasons,
the largest gap between chunks), and acceptance by prompt length band with its collapse rule.
docs/results.md, "Acceptance, one definition", "Acceptance by context length" and "The structure
gate"; absent from the analysis when no request row carries either."""

from __future__ import annotations

from collections import defaultdict
from typing import Any, TypedDict

from tailpod.agent.probes.metrics import censored_percentile, percentile
from tailpod.results.markdown import arm_label, fmt_num, table
from tailpod.results.section import Context, RenderContext, Section
from tailpod.results.stats import thin_percentile


class PerRequestRow(TypedDict):
    arm: str
    prompt_class: str
    void: bool
    requests: int
    acceptance: dict[str, Any] | None  # p10, p50, p90, request_mean, token_weighted, metrics
    structure: dict[str, Any] | None  # json_ok, schema_ok, tool_call_ok, finish_reasons, gap
    bands: list[dict[str, Any]] | None  # acceptance per prompt length band (_bands)
    ttfa: dict[str, Any] | None  # time to first answer token beside TTFT (_ttfa)


# Prompt length bands in prompt tokens from usage, [low, high): context windows and the positions
# where acceptance has been seen to fail (vLLM #52873: zero past position 32,768) are powers of two.
BANDS: tuple[tuple[str, int, float], ...] = (
    ("<1k", 0, 1024), ("1k-4k", 1024, 4096), ("4k-16k", 4096, 16384),
    (">16k", 16384, float("inf")))
# A band collapsed when its accepted drafts per verify step fall below this share of the shortest
# band's. Drafts per step (length - 1), not length: the length's floor of 1 would hide a fall to
# zero acceptance from a shortest band below length 2.
COLLAPSE_SHARE = 0.5
# Why a class's (or band's) lengths are void when its requests carried their figures but none
# verified a draft: ngram proposed nothing under a tool-call grammar on the CPU engine.
NO_STEP = "no verify step: the drafter proposed nothing"


def _band(prompt_tokens: int | None) -> str | None:
    if prompt_tokens is None:
        return None
    return next((name for name, lo, hi in BANDS if lo <= prompt_tokens < hi), None)


def _bands(rows: list[Any]) -> list[dict[str, Any]] | None:
    """Token-weighted acceptance per prompt length band over the requests with their own figures
    and a prompt length; `collapse` where a band's accepted drafts per step < COLLAPSE_SHARE x the
    shortest band's (the shortest band with a verify step is the reference, never flagged)."""
    sums: dict[str, list[int]] = {}
    for r in rows:
        spec = getattr(r, "spec_acceptance", None)
        band = _band(r.prompt_tokens)
        if not isinstance(spec, dict) or band is None:
            continue
        acc = sums.setdefault(band, [0, 0, 0])  # requests, steps, accepted
        acc[0] += 1
        acc[1] += int(spec.get("steps") or 0)
        acc[2] += int(spec.get("accepted") or 0)
    if not sums:
        return None
    out: list[dict[str, Any]] = []
    ref: float | None = None
    for name, _, _ in BANDS:
        if name not in sums:
            continue
        n, steps, accepted = sums[name]
        per_step = accepted / steps if steps else None
        collapse = (ref is not None and per_step is not None and ref > 0
                    and per_step < COLLAPSE_SHARE * ref)
        if ref is None and per_step is not None:
            ref = per_step
        out.append({"band": name, "requests": n, "steps": steps,
                    "accepted_per_step": per_step,
                    "acceptance_length": None if per_step is None else 1 + per_step,
                    "collapse": collapse})
    return out


def _acceptance(items: list[dict[str, Any]], counters: tuple[int, int]) -> dict[str, Any] | None:
    lengths = [i["acceptance_length"] for i in items if i.get("acceptance_length") is not None]
    steps = sum(int(i.get("steps") or 0) for i in items)
    if not items:
        return None
    drafts, accepted = counters
    told = [i for i in items if i.get("drafts_trimmed") is not None]
    trimmed = sum(int(i["drafts_trimmed"]) for i in told) if told else None
    slots = sum(int(i["drafts_trimmed"]) + int(i.get("draft_tokens") or 0) for i in told)
    return {
        "requests": len(items),
        "p10": percentile(lengths, 10), "p50": percentile(lengths, 50),
        "p90": percentile(lengths, 90),
        "request_mean": sum(lengths) / len(lengths) if lengths else None,
        "token_weighted": 1 + sum(int(i.get("accepted") or 0) for i in items) / steps
        if steps else None,
        "metrics": 1 + accepted / drafts if drafts else None,
        # K x steps - draft tokens over the requests whose engine said (vLLM): under a grammar,
        # the drafts it killed before verification; None where no request said, never 0
        "drafts_trimmed": trimmed,
        "drafts_trimmed_share": trimmed / slots if trimmed is not None and slots else None,
        "void": None if steps else NO_STEP,
    }


def _ttfa(rows: list[Any]) -> dict[str, Any] | None:
    """p50 of the time to first answer token beside p50 TTFT: a request that reasoned answers
    at its `ttfa_s` (never, with the flag no_answer: later than every answer), one that did not
    at its first token. None where the p50 would fall on a request that never answered."""
    answered: list[float] = []
    missing = reasoned = 0
    for r in rows:
        if r.ttfa_s is not None or "no_answer" in r.flags:
            reasoned += 1
            if r.ttfa_s is None:
                missing += 1
            else:
                answered.append(r.ttfa_s)
        elif r.ttft_s is not None:
            answered.append(r.ttft_s)
    ttft = [r.ttft_s for r in rows if r.ttft_s is not None]
    n = len(answered) + missing
    if not n:
        return None
    void = thin_percentile(50, n)
    p50 = None if void else censored_percentile(answered, missing, 50)
    if void is None and p50 is None:
        void = f"the p50 falls on a request that never answered ({missing} of {n})"
    return {"requests": n, "reasoned": reasoned,
            "ttft_p50_s": percentile(ttft, 50) if ttft and not thin_percentile(50, len(ttft))
            else None,
            "ttfa_p50_s": p50, "void": void}


def _structure(rows: list[Any]) -> dict[str, Any] | None:
    checked = [r for r in rows if r.json_ok is not None]
    if not checked:
        return None
    reasons: dict[str, int] = defaultdict(int)
    for r in checked:
        reasons[str(r.finish_reason)] += 1
    gaps = [r.chunk_gap_max_s for r in checked if r.chunk_gap_max_s is not None]
    tools = [r for r in checked if r.tool_call_ok is not None]
    return {
        "requests": len(checked),
        "json_ok": sum(1 for r in checked if r.json_ok),
        "schema_ok": sum(1 for r in checked if r.schema_ok is True),
        "tool_call_ok": sum(1 for r in tools if r.tool_call_ok) if tools else None,
        "finish_reasons": dict(sorted(reasons.items())),
        "chunk_gap_max_s": max(gaps) if gaps else None,
    }


def compute(ctx: Context) -> list[PerRequestRow] | None:
    pc = ctx.settings.prompt_class
    reqs: dict[tuple[str, str], list[Any]] = defaultdict(list)
    for r in ctx.run.requests:
        if r.ok and (pc is None or r.prompt_class == pc):
            reqs[(r.arm, r.prompt_class)].append(r)
    counters: dict[tuple[str, str], tuple[int, int]] = defaultdict(lambda: (0, 0))
    with_spec: set[tuple[str, str]] = set()
    compile_s: dict[tuple[str, str], list[float]] = defaultdict(list)
    for c in ctx.run.cells:
        got = ((c.structure or {}).get("grammar_compile") or {}).get("compile_s")
        if isinstance(got, (int, float)):  # --unique-schema: a new schema's first request
            compile_s[(c.arm, c.prompt_class)].append(float(got))
        if getattr(c, "acceptance_per_request", None):
            with_spec.add((c.arm, c.prompt_class))
            if c.acceptance is not None:
                d, a = counters[(c.arm, c.prompt_class)]
                counters[(c.arm, c.prompt_class)] = (d + c.acceptance.drafts,
                                                     a + c.acceptance.accepted)
    order = {a.label: i for i, a in enumerate(ctx.arms)}
    out: list[PerRequestRow] = []
    for (arm, pclass), rows in sorted(reqs.items(), key=lambda kv: (order.get(kv[0][0], 99),
                                                                    kv[0][1])):
        items = [s for r in rows if isinstance(s := getattr(r, "spec_acceptance", None), dict)]
        acc = _acceptance(items, counters[(arm, pclass)]) if (arm, pclass) in with_spec else None
        struct = _structure(rows)
        if struct is not None and compile_s.get((arm, pclass)):
            struct["grammar_compile_s"] = percentile(compile_s[(arm, pclass)], 50)
        if acc is None and struct is None:
            continue
        out.append({"arm": arm, "prompt_class": pclass, "void": arm in ctx.void,
                    "requests": len(rows), "acceptance": acc, "structure": struct,
                    "bands": _bands(rows) if acc is not None else None, "ttfa": _ttfa(rows)})
    return out or None


def render(rows: list[PerRequestRow] | None, rc: RenderContext) -> list[str]:
    if not rows:
        return []
    L: list[str] = []
    acc = [r for r in rows if r["acceptance"]]
    if acc:
        L += ["## Acceptance per request", "",
              "Each request's own acceptance length (1 + accepted drafts / verify steps), from "
              "its response: p10/p50/p90 and the mean over requests, beside the token-weighted "
              "length (every verify step weighs the same) and the /metrics figure of the same "
              "cells, which it should match. Trimmed drafts: K × verify steps − draft tokens, "
              "the draft slots never verified (vLLM; — where the engine did not say), with their "
              "share of K × steps: under a grammar (structured, tools) the grammar-killed drafts, "
              "which vLLM leaves out of its acceptance counters; elsewhere, slots the request's "
              "end cut (docs/probe.md).", ""]
        L += table(["arm", "class", "n", "p10", "p50", "p90", "request mean", "token-weighted",
                    "/metrics", "trimmed drafts"],
                   [[arm_label(r["arm"], rc.void), r["prompt_class"], str(a["requests"]),
                     _or_no_step(a["p10"], a.get("void")), fmt_num(a["p50"]), fmt_num(a["p90"]),
                     fmt_num(a["request_mean"]), fmt_num(a["token_weighted"]),
                     fmt_num(a["metrics"]), _trimmed(a)]
                    for r in acc if (a := r["acceptance"])], rc.stamp)
    banded = [r for r in rows if r.get("bands")]
    if banded:
        L += ["## Acceptance by context length", "",
              "The requests' own acceptance, token-weighted, by prompt length (prompt tokens from "
              "usage). **COLLAPSE**: accepted drafts per step below half the shortest band's.", ""]
        L += table(["arm", "class", "prompt tokens", "n", "accepted/step", "length", "flag"],
                   [[arm_label(r["arm"], rc.void), r["prompt_class"], b["band"],
                     str(b["requests"]), _or_no_step(b["accepted_per_step"],
                                                     None if b["steps"] else NO_STEP),
                     fmt_num(b["acceptance_length"]), "**COLLAPSE**" if b["collapse"] else ""]
                    for r in banded for b in r["bands"] or []], rc.stamp)
    st = [r for r in rows if r["structure"]]
    compiled = any((r["structure"] or {}).get("grammar_compile_s") is not None for r in st)
    if st:
        L += ["## Structured output and tool calls", "",
              "Per request: the output parses as JSON, validates against the class's schema, "
              "makes a whole tool call; how the streams ended; the largest gap between chunks. "
              "A speculative arm below plain on any of them is void (the structure gate).", ""]
        if compiled:
            L += ["Grammar compile: with `--unique-schema`, a new schema's first request's TTFT "
                  "less its repeat's (median over cells); every measured request's schema was "
                  "new text.", ""]
        L += table(["arm", "class", "n", "parse", "valid", "tool call", "finish reasons",
                    "max gap (s)", *(["grammar compile (s)"] if compiled else [])],
                   [[arm_label(r["arm"], rc.void), r["prompt_class"], str(s["requests"]),
                     str(s["json_ok"]), str(s["schema_ok"]),
                     "—" if s["tool_call_ok"] is None else str(s["tool_call_ok"]),
                     ", ".join(f"{k} {v}" for k, v in s["finish_reasons"].items()),
                     fmt_num(s["chunk_gap_max_s"]),
                     *([fmt_num(s.get("grammar_compile_s"))] if compiled else [])]
                    for r in st if (s := r["structure"])], rc.stamp)
    timed = [(r, t) for r in rows if (t := r.get("ttfa"))]
    if timed:
        quiet = all(t["reasoned"] == 0 for _, t in timed)
        L += ["## Time to first answer token", "",
              "p50 of the time to the first answer token (the first `content` or tool call after "
              "any reasoning deltas) beside p50 TTFT (the first token, reasoning included); a "
              "request that reasoned and never answered counts as later than every answer."
              + (" No request reasoned here, so the first answer token is the first token."
                 if quiet else ""), ""]
        L += table(["arm", "class", "n", "reasoned", "TTFT p50 (s)", "TTFA p50 (s)"],
                   [[arm_label(r["arm"], rc.void), r["prompt_class"], str(t["requests"]),
                     str(t["reasoned"]), fmt_num(t["ttft_p50_s"]),
                     fmt_num(t["ttfa_p50_s"]) if t["void"] is None else f"— ({t['void']})"]
                    for r, t in timed], rc.stamp)
    return L


def _or_no_step(value: float | None, void: str | None) -> str:
    """A figure, or `— (no verify step)` where none of its requests verified a draft."""
    return "— (no verify step)" if value is None and void == NO_STEP else fmt_num(value)


def _trimmed(a: dict[str, Any]) -> str:
    if a.get("drafts_trimmed") is None:
        return "—"
    share = a.get("drafts_trimmed_share")
    return f"{a['drafts_trimmed']}" + ("" if share is None else f" ({share * 100:.0f}%)")


SECTION = Section(key="per_request", rank=105, compute=compute, report_rank=95, render=render,
                  omit_none=True)
