"""KL divergence of a candidate checkpoint against a reference, from top-k logprobs only.

Pure computation, no I/O. The inputs are what an engine returns per position: the logprobs of its
top-k tokens plus the logprob of the token actually at that position (teacher forcing). The full
distributions are never available, so the divergence is computed on a *coarsened* vocabulary:

    S      = tokens whose logprob BOTH models reported at this position
             (reference top-k ∪ forced token) ∩ (candidate top-k ∪ forced token)
    other  = every token not in S, merged into one bucket
    P(s), Q(s)   for s in S: the reported probabilities
    P(other) = max(0, 1 - Σ_S P(s))        Q(other) = max(MASS_FLOOR, 1 - Σ_S Q(s))

    KL_k(P‖Q) = Σ_S P(s) log(P(s)/Q(s)) + P(other) log(P(other)/Q(other))     (clamped at 0)

Bias: merging tokens into one bucket can only lose information (log-sum inequality, the data
processing inequality for KL), so KL_k ≤ KL(P‖Q) at every position: the estimator is a LOWER
BOUND, exact when S covers the vocabulary or when P/Q is constant over the "other" bucket. The
bound is loose when the reference's mass outside S is large; `covered` (the reference mass
resolved token by token, Σ_S P(s)) is reported beside every KL so that looseness is visible.
Flooring Q(other) (reported masses sum to 1 only up to float32 rounding) keeps the bound: it can
only lower the bucket's term. A shared token the candidate gives probability 0 while the
reference does not makes KL_k infinite, as the true KL is.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from tailpod.agent.probes.metrics import percentile  # the probe's own: one definition

KL_FILE = "kl.json"  # in a run directory, beside run.json
# Remaining mass below this is float32 rounding of the reported logprobs, not probability.
MASS_FLOOR = 1e-6
ESTIMATOR = (
    "top-k coarsened KL(ref||cand): tokens both models reported (top-k plus the forced token) "
    "are kept one by one, all others merged into one 'other' bucket per distribution; a lower "
    "bound on the true KL at every position (log-sum inequality), exact when the shared tokens "
    f"cover the vocabulary; candidate 'other' mass floored at {MASS_FLOOR:g}"
)
WORST_POSITIONS = 5


@dataclass(frozen=True)
class PositionKL:
    kl: float  # KL_k(ref‖cand) in nats; math.inf when the candidate rules out a shared token
    covered: float  # reference probability mass in the shared buckets
    shared: int  # number of shared tokens
    ref_top1: int | None
    cand_top1: int | None

    @property
    def agree(self) -> bool:
        return self.ref_top1 is not None and self.ref_top1 == self.cand_top1


def _check(logprobs: Mapping[int, float]) -> None:
    for token, lp in logprobs.items():
        if math.isnan(lp) or lp > 1e-4:  # a logprob is ≤ 0; allow float noise just above
            raise ValueError(f"token {token}: {lp!r} is not a logprob")


def topk_kl(
    ref: Mapping[int, float], cand: Mapping[int, float], floor: float = MASS_FLOOR
) -> tuple[float, float, int]:
    """KL_k(ref‖cand), the reference mass covered, and the number of shared tokens.

    `ref` and `cand` map token id → logprob for every token each model reported at this position.
    """
    _check(ref)
    _check(cand)
    shared = [t for t in ref if t in cand]
    total = 0.0
    p_shared = q_shared = 0.0
    for t in shared:
        lp, lq = min(ref[t], 0.0), min(cand[t], 0.0)
        p, q = math.exp(lp), math.exp(lq)
        p_shared += p
        q_shared += q
        if p == 0.0:
            continue  # 0·log(0/q) = 0
        if q == 0.0:
            total = math.inf
            continue
        total += p * (lp - lq)
    p_other = max(0.0, 1.0 - p_shared)
    q_other = max(floor, 1.0 - q_shared)
    if p_other > 0.0:
        total += p_other * math.log(p_other / q_other)
    return max(0.0, total), min(1.0, p_shared), len(shared)


def first_divergence(a: Sequence[int], b: Sequence[int]) -> int | None:
    """First index where two greedy continuations differ; None when identical.

    When one is a prefix of the other (one stopped earlier), they diverge where the shorter ends.
    """
    for i, (x, y) in enumerate(zip(a, b, strict=False)):
        if x != y:
            return i
    return None if len(a) == len(b) else min(len(a), len(b))


def distribution_summary(values: Sequence[float]) -> dict[str, Any]:
    """Mean and tail of per-position KL; infinite positions are counted, not averaged."""
    finite = [v for v in values if math.isfinite(v)]
    return {
        "n": len(values),
        "mean": sum(finite) / len(finite) if finite else None,
        "p50": percentile(finite, 50),
        "p90": percentile(finite, 90),
        "p99": percentile(finite, 99),
        "max": max(finite) if finite else None,
        "infinite": len(values) - len(finite),
    }


# --------------------------------------------------------------------------------------------
# The probe's `logprobs` output (docs/kl-eval.md) → per-candidate results
# --------------------------------------------------------------------------------------------


def reported(position: Mapping[str, Any]) -> dict[int, float]:
    """token id → logprob for every token one model reported at one position."""
    out = {int(t): float(lp) for t, lp in position.get("top") or []}
    if position.get("token") is not None and position.get("logprob") is not None:
        out.setdefault(int(position["token"]), float(position["logprob"]))
    return out


def top1(position: Mapping[str, Any]) -> int | None:
    top = position.get("top") or []
    return int(top[0][0]) if top else None


def score_positions(
    ref_positions: Sequence[Mapping[str, Any]], cand_positions: Sequence[Mapping[str, Any]]
) -> list[PositionKL]:
    if len(ref_positions) != len(cand_positions):
        raise ValueError(f"{len(ref_positions)} reference vs {len(cand_positions)} positions")
    out = []
    for rp, cp in zip(ref_positions, cand_positions, strict=True):
        if rp.get("token") != cp.get("token"):
            raise ValueError("the two models were not scored on the same token sequence")
        kl, covered, shared = topk_kl(reported(rp), reported(cp))
        out.append(PositionKL(kl, covered, shared, top1(rp), top1(cp)))
    return out


def _fraction(hits: int, n: int) -> float | None:
    return hits / n if n else None


def reference_self_agreement(reference: Mapping[str, Any]) -> dict[str, Any]:
    """How often the reference's own scored top-1 is the token its greedy decode produced.

    Scoring (prefill) and decoding take different kernels; where they disagree on a near-tie this
    is below 1, and that is the noise floor for top-1 agreement between any two checkpoints.
    """
    n = hits = 0
    for prompt in reference.get("prompts", []):
        for pos in prompt.get("positions", []):
            n += 1
            hits += int(top1(pos) == pos.get("token"))
    return {"positions": n, "top1_is_greedy_token": _fraction(hits, n)}


def compare(reference: Mapping[str, Any], candidate: Mapping[str, Any]) -> dict[str, Any]:
    """Per-candidate KL, top-1 agreement and first greedy divergence against the reference.

    Both documents come from the probe's `logprobs` command; the candidate's was scored on the
    reference's token sequences (`--reference-file`). Prompts are matched by id.
    """
    by_id = {p["id"]: p for p in candidate.get("prompts", [])}
    scored: list[tuple[str, str, int, PositionKL]] = []
    divergence: list[dict[str, Any]] = []
    skipped: list[dict[str, Any]] = []
    for ref in reference.get("prompts", []):
        pid, cls = ref["id"], ref.get("class")
        cand = by_id.get(pid)
        if cand is None:
            skipped.append({"prompt": pid, "reason": "the candidate has no result for it"})
            continue
        if cand.get("error"):
            skipped.append({"prompt": pid, "reason": str(cand["error"])})
            continue
        if list(cand.get("scored_ids") or []) != list(ref.get("scored_ids") or []):
            skipped.append({"prompt": pid, "reason": "scored on a different token sequence"})
            continue
        try:
            positions = score_positions(ref.get("positions", []), cand.get("positions", []))
        except ValueError as exc:
            skipped.append({"prompt": pid, "reason": str(exc)})
            continue
        scored += [(pid, cls, i, p) for i, p in enumerate(positions)]
        divergence.append(
            {
                "prompt": pid,
                "class": cls,
                "position": first_divergence(ref.get("greedy_ids", []), cand.get("greedy_ids", [])),
                "compared": min(len(ref.get("greedy_ids", [])), len(cand.get("greedy_ids", []))),
                "tokenizer_match": cand.get("tokenizer_match"),
            }
        )
    kls = [p.kl for *_, p in scored]
    agree = sum(p.agree for *_, p in scored)
    covered = [p.covered for *_, p in scored]
    by_class: dict[str, dict[str, Any]] = {}
    for cls in sorted({c or "" for _, c, _, _ in scored}):
        sub = [p for _, c, _, p in scored if (c or "") == cls]
        summary = distribution_summary([p.kl for p in sub])
        by_class[cls or "unclassified"] = {
            "positions": len(sub),
            "kl_mean": summary["mean"],
            "kl_p90": summary["p90"],
            "kl_infinite": summary["infinite"],
            "top1_agreement": _fraction(sum(p.agree for p in sub), len(sub)),
        }
    worst = sorted(scored, key=lambda s: (-s[3].kl, s[0], s[2]))[:WORST_POSITIONS]
    diverged = [d["position"] for d in divergence if d["position"] is not None]
    return {
        "positions": len(scored),
        "prompts": len(divergence),
        "kl": distribution_summary(kls),
        "top1_agreement": _fraction(agree, len(scored)),
        "ref_mass_covered": {
            "mean": sum(covered) / len(covered) if covered else None,
            "min": min(covered) if covered else None,
        },
        "first_divergence": divergence,
        "diverged_prompts": len(diverged),
        "first_divergence_median": percentile(diverged, 50),
        "by_class": by_class,
        "worst": [
            {
                "prompt": pid,
                "position": i,
                "kl": p.kl if math.isfinite(p.kl) else None,
                "infinite": not math.isfinite(p.kl),
                "ref_top1": p.ref_top1,
                "cand_top1": p.cand_top1,
                "covered": p.covered,
            }
            for pid, _, i, p in worst
        ],
        "skipped_prompts": skipped,
    }
