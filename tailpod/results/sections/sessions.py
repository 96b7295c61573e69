"""Session traces, by turn position: per arm, prompt class and cache, each turn's acceptance (the
requests' own figures, token-weighted), latency (TTFT, TPOT, end to end; p50) and prompt tokens
with the share the server served from its prefix cache. docs/results.md, "Sessions"; absent from
the analysis when no request row belongs to a session."""

from __future__ import annotations

from collections import defaultdict
from typing import Any, TypedDict

from tailpod.agent.probes.metrics import percentile
from tailpod.results.markdown import arm_label, fmt_num, table
from tailpod.results.section import Context, RenderContext, Section
from tailpod.results.stats import thin_percentile


class TurnRow(TypedDict):
    arm: str
    prompt_class: str
    cache: str
    turn: int
    void: bool
    requests: int  # the turn's successful requests (one per session that reached it, per rep)
    failed: int
    acceptance_length: float | None  # 1 + accepted / verify steps over the turn's requests
    acceptance_requests: int  # requests whose response carried their own figures
    ttft_p50_s: float | None
    tpot_p50_s: float | None
    e2e_p50_s: float | None
    prompt_tokens_mean: float | None
    cached_tokens_mean: float | None  # over the requests whose usage said; None: none did
    cached_share: float | None  # their cached / prompt tokens
    void_fields: dict[str, str]  # figure -> why it is null (too few requests for a p50)


def _p50(rows: list[Any], name: str, void: dict[str, str]) -> float | None:
    vals = [v for r in rows if (v := getattr(r, name)) is not None]
    why = thin_percentile(50, len(vals))
    if why is not None:
        void[f"{name.removesuffix('_s')}_p50_s"] = why
        return None
    return percentile(vals, 50)


def _turn(arm: str, key: tuple[str, str, int], rows: list[Any], failed: int,
          void_arm: bool) -> TurnRow:
    pclass, cache, turn = key
    void: dict[str, str] = {}
    spec = [s for r in rows if isinstance(s := r.spec_acceptance, dict)]
    steps = sum(int(s.get("steps") or 0) for s in spec)
    accepted = sum(int(s.get("accepted") or 0) for s in spec)
    prompts = [r.prompt_tokens for r in rows if r.prompt_tokens is not None]
    told = [r for r in rows if r.cached_tokens is not None and r.prompt_tokens]
    if not spec:
        void["acceptance_length"] = "no request carried its own speculative figures"
    elif not steps:
        void["acceptance_length"] = (f"no verify step: the drafter proposed nothing in "
                                     f"{len(spec)} request(s)")
    return {
        "arm": arm, "prompt_class": pclass, "cache": cache, "turn": turn, "void": void_arm,
        "requests": len(rows), "failed": failed,
        "acceptance_length": 1 + accepted / steps if steps else None,
        "acceptance_requests": len(spec),
        "ttft_p50_s": _p50(rows, "ttft_s", void),
        "tpot_p50_s": _p50(rows, "tpot_s", void),
        "e2e_p50_s": _p50(rows, "e2e_s", void),
        "prompt_tokens_mean": sum(prompts) / len(prompts) if prompts else None,
        "cached_tokens_mean": sum(r.cached_tokens for r in told) / len(told) if told else None,
        "cached_share": (sum(r.cached_tokens for r in told) / sum(r.prompt_tokens for r in told)
                         if told else None),
        "void_fields": void,
    }


def compute(ctx: Context) -> list[TurnRow] | None:
    pc = ctx.settings.prompt_class
    ok: dict[tuple[str, str, str, int], list[Any]] = defaultdict(list)
    failed: dict[tuple[str, str, str, int], int] = defaultdict(int)
    for r in ctx.run.requests:
        if r.session_id is None or r.turn is None or (pc is not None and r.prompt_class != pc):
            continue
        key = (r.arm, r.prompt_class, r.cache, r.turn)
        if r.ok:
            ok[key].append(r)
        else:
            failed[key] += 1
    keys = set(ok) | set(failed)
    if not keys:
        return None
    order = {a.label: i for i, a in enumerate(ctx.arms)}
    return [_turn(k[0], k[1:], ok.get(k, []), failed.get(k, 0), k[0] in ctx.void)
            for k in sorted(keys, key=lambda k: (order.get(k[0], 99), k[1], k[2], k[3]))]


def render(rows: list[TurnRow] | None, rc: RenderContext) -> list[str]:
    if not rows:
        return []
    L = ["## Sessions, by turn", "",
         "Each turn of a session trace's replay: its requests (one per session that reached it, "
         "per rep), their acceptance length (1 + accepted drafts / verify steps, token-weighted, "
         "from the responses; — where none carried them, as on plain), p50 latencies (s; — "
         "where too few requests for a p50), the mean "
         "prompt and the share of it the server served from its prefix cache "
         "(usage.prompt_tokens_details; — where it did not say). A speculative arm whose answer "
         "to a turn differs from plain's after identical earlier turns is void (the session "
         "gate).", ""]
    return L + table(
        ["arm", "class", "cache", "turn", "n", "failed", "accept len", "TTFT p50", "TPOT p50",
         "e2e p50", "prompt tok", "cached"],
        [[arm_label(r["arm"], rc.void), r["prompt_class"], r["cache"], str(r["turn"]),
          str(r["requests"]), str(r["failed"]), _acceptance(r),
          fmt_num(r["ttft_p50_s"]), fmt_num(r["tpot_p50_s"]), fmt_num(r["e2e_p50_s"]),
          fmt_num(r["prompt_tokens_mean"]),
          "—" if r["cached_share"] is None else f"{100 * r['cached_share']:.0f}%"]
         for r in rows], rc.stamp)


def _acceptance(r: TurnRow) -> str:
    """The turn's acceptance length; where its speculative requests never verified a draft,
    `— (no verify step)` (void_fields says how many)."""
    if r["acceptance_length"] is None and r["acceptance_requests"]:
        return "— (no verify step)"
    return fmt_num(r["acceptance_length"])


SECTION = Section(key="sessions", rank=106, compute=compute, report_rank=96, render=render,
                  omit_none=True)
