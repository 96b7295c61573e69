"""The KL math against direct computations on full distributions (numpy), with exact numbers."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import pytest

from tailpod.agent.probes import metrics
from tailpod.results import kl


def log_softmax(logits: np.ndarray) -> np.ndarray:
    shifted = logits - logits.max()
    return shifted - np.log(np.exp(shifted).sum())


def coarse_kl_numpy(p: np.ndarray, q: np.ndarray, shared: list[int]) -> float:
    """KL of the partition {each shared token} ∪ {everything else}, computed from full vectors."""
    mask = np.zeros(len(p), dtype=bool)
    mask[shared] = True
    pp = np.append(p[mask], p[~mask].sum())
    qq = np.append(q[mask], q[~mask].sum())
    keep = pp > 0
    return float(np.sum(pp[keep] * np.log(pp[keep] / qq[keep])))


def reported(lps: np.ndarray, k: int, forced: int) -> dict[int, float]:
    order = np.argsort(-lps, kind="stable")[:k]
    out = {int(t): float(lps[t]) for t in order}
    out.setdefault(forced, float(lps[forced]))
    return out


P = [0.5, 0.3, 0.2]
Q = [0.25, 0.5, 0.25]
LP, LQ = [math.log(x) for x in P], [math.log(x) for x in Q]


# The exact KL over two whole distributions: the reference the top-k estimator is held to (test
# code only; tailpod itself never sees a whole vocabulary).
def full_kl(p_logprobs: Sequence[float], q_logprobs: Sequence[float]) -> float:
    """Exact KL(P‖Q) over two full distributions given as logprobs over the same vocabulary."""
    if len(p_logprobs) != len(q_logprobs):
        raise ValueError("distributions over different vocabularies")
    total = 0.0
    for lp, lq in zip(p_logprobs, q_logprobs, strict=True):
        p = math.exp(lp)
        if p == 0.0:
            continue
        if math.exp(lq) == 0.0:
            return math.inf
        total += p * (lp - lq)
    return max(0.0, total)


def test_full_kl_exact_numbers() -> None:
    expected = 0.5 * math.log(2) + 0.3 * math.log(0.6) + 0.2 * math.log(0.8)
    assert full_kl(LP, LQ) == pytest.approx(expected, abs=1e-15)
    assert full_kl(LP, LQ) == pytest.approx(0.1486972, abs=1e-7)
    assert full_kl(LP, LP) == 0.0


def test_topk_with_the_whole_vocabulary_is_the_full_kl() -> None:
    ref = dict(enumerate(LP))
    cand = dict(enumerate(LQ))
    value, covered, shared = kl.topk_kl(ref, cand)
    assert value == pytest.approx(full_kl(LP, LQ), abs=1e-12)
    assert covered == pytest.approx(1.0) and shared == 3


def test_top1_sets_differ_and_the_forced_token_is_the_only_shared_bucket() -> None:
    # Reference top-1 is token 0, candidate top-1 token 1; both report the forced token 2.
    value, covered, shared = kl.topk_kl({0: LP[0], 2: LP[2]}, {1: LQ[1], 2: LQ[2]})
    expected = 0.2 * math.log(0.2 / 0.25) + 0.8 * math.log(0.8 / 0.75)
    assert value == pytest.approx(expected, abs=1e-12)
    assert value == pytest.approx(0.0070021, abs=1e-7)
    assert covered == pytest.approx(0.2) and shared == 1
    assert value < full_kl(LP, LQ)  # the lower bound, strictly here


def test_disjoint_reports_collapse_to_one_bucket_and_zero() -> None:
    value, covered, shared = kl.topk_kl({0: LP[0]}, {1: LQ[1]})
    assert (value, covered, shared) == (0.0, 0.0, 0)


def test_minus_infinity_in_the_candidate_for_a_token_the_reference_uses_is_infinite() -> None:
    value, _, _ = kl.topk_kl({0: math.log(0.6), 1: math.log(0.4)}, {0: 0.0, 1: -math.inf})
    assert value == math.inf
    assert full_kl([math.log(0.6), math.log(0.4)], [0.0, -math.inf]) == math.inf


def test_minus_infinity_in_the_reference_contributes_nothing() -> None:
    # p = 0 for token 1: 0·log(0/q) = 0; the other bucket is empty on the reference side.
    value, covered, _ = kl.topk_kl({0: 0.0, 1: -math.inf}, {0: math.log(0.5), 1: math.log(0.5)})
    assert value == pytest.approx(math.log(2), abs=1e-15)
    assert covered == 1.0


def test_zero_remaining_mass_on_the_candidate_side_is_floored() -> None:
    # The candidate puts all its mass on token 0, the reference half: the true coarse KL is
    # infinite, the floor makes it finite and smaller (still a lower bound).
    value, _, _ = kl.topk_kl({0: math.log(0.5)}, {0: 0.0})
    expected = 0.5 * math.log(0.5) + 0.5 * math.log(0.5 / kl.MASS_FLOOR)
    assert value == pytest.approx(expected, abs=1e-12)
    assert value == pytest.approx(6.2146080984, abs=1e-9)


def test_identical_reports_are_exactly_zero() -> None:
    ref = {3: -0.5, 7: -2.5, 9: -4.0}
    covered = sum(math.exp(v) for v in ref.values())
    assert kl.topk_kl(ref, dict(ref)) == (0.0, pytest.approx(covered), 3)


def test_float_noise_never_makes_kl_negative() -> None:
    # Reported masses that sum past 1 by rounding: the estimate is clamped at zero.
    value, _, _ = kl.topk_kl({0: -1e-9, 1: -25.0}, {0: 0.0, 1: -25.0})
    assert value >= 0.0


@pytest.mark.parametrize("bad", [float("nan"), 0.5])
def test_values_that_are_not_logprobs_are_refused(bad: float) -> None:
    with pytest.raises(ValueError, match="not a logprob"):
        kl.topk_kl({0: bad}, {0: -1.0})


@pytest.mark.parametrize("k", [1, 2, 5, 20, 64])
def test_estimator_equals_the_direct_coarse_kl_and_bounds_the_full_kl(k: int) -> None:
    rng = np.random.default_rng(k)
    for _ in range(25):
        lp = log_softmax(rng.normal(0, 2.0, 64))
        lq = log_softmax(np.log(np.exp(lp)) + rng.normal(0, 0.7, 64))
        forced = int(rng.integers(64))
        ref, cand = reported(lp, k, forced), reported(lq, k, forced)
        shared = sorted(set(ref) & set(cand))
        value, covered, n_shared = kl.topk_kl(ref, cand)
        p, q = np.exp(lp), np.exp(lq)
        assert value == pytest.approx(coarse_kl_numpy(p, q, shared), abs=1e-10)
        full = float(np.sum(p * (lp - lq)))
        assert value <= full + 1e-10
        assert covered == pytest.approx(float(p[shared].sum()), abs=1e-12)
        assert n_shared == len(shared)
        if k >= 64:
            assert value == pytest.approx(full, abs=1e-10)


def test_the_bound_tightens_as_k_grows() -> None:
    rng = np.random.default_rng(7)
    lp = log_softmax(rng.normal(0, 3.0, 200))
    lq = log_softmax(lp + rng.normal(0, 0.5, 200))
    values = [kl.topk_kl(reported(lp, k, 0), reported(lq, k, 0))[0] for k in (1, 5, 20, 80, 200)]
    full = full_kl(lp.tolist(), lq.tolist())
    assert values[-1] == pytest.approx(full, abs=1e-10)
    assert values[2] > 0.5 * full  # with a peaked reference, top-20 already sees most of it


@pytest.mark.parametrize("q", [0, 10, 50, 90, 99, 100])
def test_percentile_matches_numpy(q: float) -> None:
    values = list(np.random.default_rng(3).exponential(1.0, 37))
    assert metrics.percentile(values, q) == pytest.approx(float(np.percentile(values, q)), abs=1e-12)
    assert metrics.percentile([], q) is None
    assert metrics.percentile([2.0], q) == 2.0


def test_first_divergence() -> None:
    assert kl.first_divergence([1, 2, 3], [1, 2, 3]) is None
    assert kl.first_divergence([1, 2, 3], [1, 5, 3]) == 1
    assert kl.first_divergence([1, 2, 3], [1, 2]) == 2  # one stopped earlier
    assert kl.first_divergence([], []) is None


def test_distribution_summary_counts_infinite_positions_apart() -> None:
    s = kl.distribution_summary([0.1, 0.3, math.inf, 0.2])
    assert s["n"] == 4 and s["infinite"] == 1
    assert s["mean"] == pytest.approx(0.2) and s["max"] == 0.3
    assert s["p50"] == pytest.approx(float(np.percentile([0.1, 0.3, 0.2], 50)))


def _doc(lps_rows: list[list[np.ndarray]], greedy: list[list[int]], k: int,
         scored: list[list[int]] | None = None) -> dict:
    prompts = []
    for i, rows in enumerate(lps_rows):
        seq = (scored or greedy)[i]
        positions = []
        for lps, tok in zip(rows, seq, strict=True):
            order = np.argsort(-lps, kind="stable")[:k]
            positions.append({"token": tok, "logprob": float(lps[tok]),
                              "top": [[int(t), float(lps[t])] for t in order]})
        prompts.append({"id": f"p{i}", "class": "prose" if i == 0 else "code",
                        "prompt_ids": [1, 2], "greedy_ids": greedy[i], "scored_ids": seq,
                        "positions": positions})
    return {"prompts": prompts}


def test_compare_summarises_against_direct_numbers() -> None:
    rng = np.random.default_rng(11)
    k, n = 4, 6
    ref_rows = [[log_softmax(rng.normal(0, 2, 16)) for _ in range(n)] for _ in range(2)]
    cand_rows = [[log_softmax(r + rng.normal(0, 1.0, 16)) for r in rows] for rows in ref_rows]
    seqs = [[int(np.argmax(r)) for r in rows] for rows in ref_rows]  # greedy of the reference
    cand_greedy = [seqs[0], seqs[1][:3] + [(seqs[1][3] + 1) % 16] + seqs[1][4:]]
    ref = _doc(ref_rows, seqs, k)
    cand = _doc(cand_rows, cand_greedy, k, scored=seqs)
    result = kl.compare(ref, cand)

    direct, agree = [], 0
    for rrows, crows, seq in zip(ref_rows, cand_rows, seqs, strict=True):
        for lp, lq, tok in zip(rrows, crows, seq, strict=True):
            r, c = reported(lp, k, tok), reported(lq, k, tok)
            direct.append(coarse_kl_numpy(np.exp(lp), np.exp(lq), sorted(set(r) & set(c))))
            agree += int(np.argmax(lp) == np.argmax(lq))
    assert result["positions"] == 2 * n and result["prompts"] == 2
    assert result["kl"]["mean"] == pytest.approx(float(np.mean(direct)), abs=1e-10)
    assert result["kl"]["p90"] == pytest.approx(float(np.percentile(direct, 90)), abs=1e-10)
    assert result["kl"]["max"] == pytest.approx(max(direct), abs=1e-10)
    assert result["top1_agreement"] == pytest.approx(agree / (2 * n))
    assert [d["position"] for d in result["first_divergence"]] == [None, 3]
    assert result["diverged_prompts"] == 1 and result["first_divergence_median"] == 3
    assert set(result["by_class"]) == {"prose", "code"}
    assert result["by_class"]["prose"]["positions"] == n
    assert result["worst"][0]["kl"] == pytest.approx(max(direct), abs=1e-10)
    assert result["skipped_prompts"] == []


def test_compare_skips_prompts_scored_on_other_tokens() -> None:
    rng = np.random.default_rng(5)
    rows = [[log_softmax(rng.normal(0, 2, 8)) for _ in range(3)]]
    ref = _doc(rows, [[1, 2, 3]], 2)
    cand = _doc(rows, [[1, 2, 3]], 2, scored=[[1, 2, 4]])
    result = kl.compare(ref, cand)
    assert result["positions"] == 0 and result["kl"]["mean"] is None
    assert result["skipped_prompts"] == [
        {"prompt": "p0", "reason": "scored on a different token sequence"}
    ]


def test_reference_self_agreement() -> None:
    doc = {"prompts": [{"positions": [
        {"token": 3, "logprob": -0.1, "top": [[3, -0.1], [4, -2.0]]},
        {"token": 5, "logprob": -0.9, "top": [[6, -0.8], [5, -0.9]]},
    ]}]}  # fmt: skip
    assert kl.reference_self_agreement(doc) == {"positions": 2, "top1_is_greedy_token": 0.5}
