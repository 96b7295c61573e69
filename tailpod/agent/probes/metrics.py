"""Statistics, the Prometheus text parser and the speculative-decoding acceptance maths.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

# --------------------------------------------------------------------------------------------
# Statistics
# --------------------------------------------------------------------------------------------


def percentile(values: Sequence[float | None], q: float) -> float | None:
    """Linear-interpolation percentile (numpy's default 'linear' method); None when empty.

    Position (n - 1) * q / 100 in the sorted values, interpolated between its neighbours, so
    p50 of [1, 2, 3, 4] is 2.5 and p99 of 1..100 is 99.01.
    """
    xs = sorted(v for v in values if v is not None and not math.isnan(v))
    if not xs:
        return None
    if len(xs) == 1:
        return xs[0]
    pos = (len(xs) - 1) * (q / 100.0)
    lo = int(math.floor(pos))
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)


def censored_percentile(values: Sequence[float], missing: int, q: float) -> float | None:
    """`percentile` of `values` plus `missing` observations known only to lie above all of them
    (a request that never answered). None where the interpolation would reach a missing one:
    the figure is then unknown, not the percentile of the requests that did answer."""
    xs = sorted(v for v in values if not math.isnan(v))
    n = len(xs) + missing
    if not xs:
        return None
    pos = (n - 1) * (q / 100.0)
    lo = int(math.floor(pos))
    frac = pos - lo
    if lo >= len(xs) or (frac > 0 and lo + 1 >= len(xs)):
        return None
    return xs[lo] if frac == 0 else xs[lo] + (xs[lo + 1] - xs[lo]) * frac


def _finite_or_none(value: float | None) -> float | None:
    if value is None or math.isnan(value) or math.isinf(value):
        return None
    return value


# --------------------------------------------------------------------------------------------
# Prometheus text exposition
# --------------------------------------------------------------------------------------------


@dataclass
class Sample:
    name: str
    labels: dict[str, str]
    value: float


def _parse_prom_float(token: str) -> float | None:
    try:
        return float(token)  # accepts NaN, +Inf, -Inf, Inf, exponents
    except ValueError:
        return None


def _is_name_char(ch: str, first: bool) -> bool:
    if ch == "_" or ch == ":" or ("a" <= ch <= "z") or ("A" <= ch <= "Z"):
        return True
    return (not first) and ("0" <= ch <= "9")


def _parse_labels(line: str, i: int) -> tuple[dict[str, str], int] | None:
    """Parse `{a="x",b="y\\"z"}` starting just after the `{`; returns labels and next index."""
    labels: dict[str, str] = {}
    n = len(line)
    while True:
        while i < n and line[i] in " \t":
            i += 1
        if i < n and line[i] == "}":
            return labels, i + 1
        start = i
        while i < n and _is_name_char(line[i], i == start) and line[i] != ":":
            i += 1
        name = line[start:i]
        if not name:
            return None
        while i < n and line[i] in " \t":
            i += 1
        if i >= n or line[i] != "=":
            return None
        i += 1
        while i < n and line[i] in " \t":
            i += 1
        if i >= n or line[i] != '"':
            return None
        i += 1
        out: list[str] = []
        while True:
            if i >= n:
                return None
            ch = line[i]
            if ch == "\\" and i + 1 < n:
                nxt = line[i + 1]
                out.append({"n": "\n", "\\": "\\", '"': '"'}.get(nxt, "\\" + nxt))
                i += 2
                continue
            if ch == '"':
                i += 1
                break
            out.append(ch)
            i += 1
        labels[name] = "".join(out)
        while i < n and line[i] in " \t":
            i += 1
        if i < n and line[i] == ",":
            i += 1
            continue
        if i < n and line[i] == "}":
            return labels, i + 1
        return None


def _parse_sample_line(line: str) -> Sample | None:
    n = len(line)
    i = 0
    while i < n and _is_name_char(line[i], i == 0):
        i += 1
    name = line[:i]
    if not name:
        return None
    labels: dict[str, str] = {}
    if i < n and line[i] == "{":
        parsed = _parse_labels(line, i + 1)
        if parsed is None:
            return None
        labels, i = parsed
    rest = line[i:].split()
    if not rest:
        return None
    value = _parse_prom_float(rest[0])
    if value is None:
        return None
    return Sample(name, labels, value)


def parse_prometheus(text: str) -> list[Sample]:
    """Samples from Prometheus/OpenMetrics text. Never raises: malformed lines are skipped."""
    samples: list[Sample] = []
    for raw in text.split("\n"):  # only LF ends a line: other separators may sit in labels
        line = raw.strip(" \t\r")
        if not line or line.startswith("#"):
            continue
        sample = _parse_sample_line(line)
        if sample is not None:
            samples.append(sample)
    return samples


def sum_metric(samples: list[Sample], name: str, **match: str) -> float | None:
    """Sum of every series named exactly `name` (across engine/model labels); None if absent.

    Exact names matter: `..._total` counters sit beside `..._created` timestamps.
    """
    found = False
    total = 0.0
    for s in samples:
        if s.name != name:
            continue
        if any(s.labels.get(k) != v for k, v in match.items()):
            continue
        if math.isnan(s.value):
            continue
        found = True
        total += s.value
    return total if found else None


def sum_by_label(samples: list[Sample], name: str, label: str) -> dict[str, float]:
    out: dict[str, float] = {}
    for s in samples:
        if s.name == name and label in s.labels and not math.isnan(s.value):
            key = s.labels[label]
            out[key] = out.get(key, 0.0) + s.value
    return out


# --------------------------------------------------------------------------------------------
# Acceptance (speculative decoding), run-scoped and normalised
# --------------------------------------------------------------------------------------------

VLLM_DRAFTS = "vllm:spec_decode_num_drafts_total"
VLLM_DRAFT_TOKENS = "vllm:spec_decode_num_draft_tokens_total"
VLLM_ACCEPTED = "vllm:spec_decode_num_accepted_tokens_total"
VLLM_ACCEPTED_PER_POS = "vllm:spec_decode_num_accepted_tokens_per_pos_total"
VLLM_GENERATION = "vllm:generation_tokens_total"
SGLANG_VERIFY = "sglang:spec_verify_calls_total"
SGLANG_GENERATION = "sglang:generation_tokens_total"
SGLANG_REQUESTS = "sglang:num_requests_total"
SGLANG_NUM_DRAFT_TOKENS = "sglang:spec_num_draft_tokens"


def spec_snapshot(samples: list[Sample], engine: str) -> dict[str, Any]:
    """The counters acceptance needs, summed across engine/DP labels, from one scrape."""
    if engine == "vllm":
        per_pos = sum_by_label(samples, VLLM_ACCEPTED_PER_POS, "position")
        return {
            "drafts": sum_metric(samples, VLLM_DRAFTS),
            "draft_tokens": sum_metric(samples, VLLM_DRAFT_TOKENS),
            "accepted": sum_metric(samples, VLLM_ACCEPTED),
            "per_pos": per_pos,
            "generation_tokens": sum_metric(samples, VLLM_GENERATION),
        }
    if engine == "sglang":
        return {
            "verify_calls": sum_metric(samples, SGLANG_VERIFY),
            "generation_tokens": sum_metric(samples, SGLANG_GENERATION),
            "requests": sum_metric(samples, SGLANG_REQUESTS),
            # A gauge: the active num_draft_tokens (steps + 1 for topk 1), not a counter.
            "num_draft_tokens": sum_metric(samples, SGLANG_NUM_DRAFT_TOKENS),
        }
    return {}


def _delta(before: dict[str, Any], after: dict[str, Any], key: str) -> float | None:
    a, b = before.get(key), after.get(key)
    if a is None or b is None:
        return None
    return float(b) - float(a)


def normalise_acceptance(
    drafts: float,
    draft_tokens: float | None,
    accepted: float,
    per_position_accepted: list[float],
    source: str,
    native: dict[str, Any],
) -> dict[str, Any]:
    """One convention for every engine: tokens per verify step including the bonus token.

    acceptance_length = 1 + accepted / drafts (floor 1); acceptance_rate = accepted /
    draft_tokens (floor 0); per-position rate = accepted at position i / drafts. With no
    drafts in the window the figures are None, not 1.0: nothing was measured.
    """
    length = rate = None
    per_position: list[float] = []
    if drafts > 0:
        length = max(1.0, 1.0 + accepted / drafts)
        per_position = [max(0.0, a / drafts) for a in per_position_accepted]
    if draft_tokens:
        rate = max(0.0, accepted / draft_tokens)
    return {
        "drafts": int(round(drafts)),
        "draft_tokens": None if draft_tokens is None else int(round(draft_tokens)),
        "accepted": int(round(accepted)),
        "acceptance_length": length,
        "acceptance_rate": rate,
        "per_position": per_position,
        "source": source,
        "native": native,
    }


def acceptance_from_vllm(
    before: dict[str, Any], after: dict[str, Any]
) -> tuple[dict[str, Any] | None, list[str]]:
    """vLLM counter deltas over the cell; accepted excludes the bonus token (vLLM's convention)."""
    drafts = _delta(before, after, "drafts")
    accepted = _delta(before, after, "accepted")
    if drafts is None or accepted is None:
        return None, []
    draft_tokens = _delta(before, after, "draft_tokens")
    if drafts < 0 or accepted < 0 or (draft_tokens is not None and draft_tokens < 0):
        return None, ["counter_reset"]
    pb, pa = before.get("per_pos") or {}, after.get("per_pos") or {}
    positions = sorted((int(p) for p in pa if p.lstrip("-").isdigit()), key=int)
    per_pos = [float(pa.get(str(p), 0.0)) - float(pb.get(str(p), 0.0)) for p in positions]
    native = {
        "convention": "vLLM counters: accepted excludes the bonus token; "
        "mean acceptance length = 1 + accepted/drafts",
        "num_drafts": drafts,
        "num_draft_tokens": draft_tokens,
        "num_accepted_tokens": accepted,
        "num_accepted_tokens_per_pos": per_pos,
    }
    flags = [] if drafts > 0 else ["no_drafts"]
    acc = normalise_acceptance(drafts, draft_tokens, accepted, per_pos, "vllm_metrics", native)
    return acc, flags


def acceptance_from_sglang_metrics(
    before: dict[str, Any], after: dict[str, Any], finished_requests: int
) -> tuple[dict[str, Any] | None, list[str]]:
    """SGLang `spec_verify_calls_total` + `generation_tokens_total` deltas (2026-05+ builds).

    Each request's first token comes from prefill, not a verify, so the tokens the verifies
    produced are Δgeneration - requests; each verify yields its accepted drafts + 1.
    """
    verify = _delta(before, after, "verify_calls")
    gen = _delta(before, after, "generation_tokens")
    if verify is None or gen is None:
        return None, []
    if verify < 0 or gen < 0:
        return None, ["counter_reset"]
    reqs = _delta(before, after, "requests")
    n_req = reqs if reqs is not None and reqs >= 0 else float(finished_requests)
    accepted = max(0.0, gen - n_req - verify)
    k_plus_1 = after.get("num_draft_tokens")
    draft_tokens = verify * (k_plus_1 - 1) if k_plus_1 and k_plus_1 > 1 else None
    native = {
        "convention": "SGLang accept length = generated tokens / verify calls (includes the "
        "bonus token and the prefill token, so it reads slightly high)",
        "spec_verify_calls": verify,
        "generation_tokens": gen,
        "accept_length": (gen / verify) if verify > 0 else None,
    }
    flags = [] if verify > 0 else ["no_drafts"]
    return (
        normalise_acceptance(verify, draft_tokens, accepted, [], "sglang_metrics", native),
        flags,
    )


def acceptance_from_sglang_meta(metas: list[dict[str, Any]]) -> dict[str, Any] | None:
    """Per-request `meta_info` from SGLang /generate, token-weighted over the cell."""
    verify = 0.0
    tokens = 0.0
    proposed = 0.0
    correct = 0.0
    have_proposed = have_correct = True
    counted = 0
    for meta in metas:
        v = meta.get("spec_verify_ct")
        n = meta.get("completion_tokens")
        if not isinstance(v, (int, float)) or not isinstance(n, (int, float)) or v <= 0:
            continue
        counted += 1
        verify += v
        tokens += n
        p = meta.get("spec_num_proposed_drafts", meta.get("spec_proposed_drafts"))
        c = meta.get("spec_num_correct_drafts", meta.get("spec_accepted_drafts"))
        if isinstance(p, (int, float)):
            proposed += p
        else:
            have_proposed = False
        if isinstance(c, (int, float)):
            correct += c
        else:
            have_correct = False
    if counted == 0:
        return None
    accepted = correct if have_correct else max(0.0, tokens - counted - verify)
    native = {
        "convention": "SGLang meta_info spec_accept_length = completion_tokens / spec_verify_ct "
        "(includes the bonus token and the prefill token)",
        "spec_verify_ct": verify,
        "completion_tokens": tokens,
        "accept_length": tokens / verify,
        "requests": counted,
    }
    return normalise_acceptance(
        verify, proposed if have_proposed else None, accepted, [], "sglang_meta", native
    )


def _json_number(value: float) -> Any:
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    return value


def metrics_summary(
    samples: list[Sample], source: str, engine: str, prefix: str = "", with_samples: bool = False
) -> dict[str, Any]:
    """`probe metrics`: the sums of every metric under `prefix` (and each sample on request)."""
    chosen = [s for s in samples if s.name.startswith(prefix)]
    sums: dict[str, float] = {}
    for s in chosen:
        if not math.isnan(s.value):
            sums[s.name] = sums.get(s.name, 0.0) + s.value
    out: dict[str, Any] = {
        "source": source,
        "engine": engine,
        "sums": {k: _json_number(v) for k, v in sorted(sums.items())},
    }
    if with_samples:
        out["samples"] = [
            {"name": s.name, "labels": s.labels, "value": _json_number(s.value)} for s in chosen
        ]
    return out


# --------------------------------------------------------------------------------------------
# Acceptance per request (the engine's own figures in the response), on the same convention
# --------------------------------------------------------------------------------------------


def _count(value: Any) -> int | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return None
    return int(value)


def request_acceptance(engine: str, fields: dict[str, Any],
                       completion_tokens: int | None) -> dict[str, Any] | None:
    """One request's acceptance on the one convention of normalise_acceptance: `steps` verify
    steps, `accepted` draft tokens accepted in them (bonus tokens not counted), and
    acceptance_length = 1 + accepted / steps (floor 1; None with no step).

    - vLLM (`metrics.speculative_decoding`, vllm-project/vllm PR #48915, vllm/v1/metrics/stats.py
      `RequestSpecDecodeMetrics.to_dict` in vLLM 0.32.0): `num_spec_steps`,
      `num_accepted_draft_tokens`, `num_draft_tokens` (after the scheduler drops the draft slots a
      grammar rejects), `num_spec_tokens` = K. Its `mean_acceptance_length` is already 1 +
      accepted/steps. `drafts_trimmed` = K × steps − num_draft_tokens: the draft slots that were
      never verified (a grammar rejected them, or the request's end cut them).
    - SGLang (`sglext.spec_tokens_details` on the OpenAI routes, `return_spec_tokens_details`,
      sgl-project/sglang PR #33518; `meta_info` on /generate; the same keys, built by
      python/sglang/srt/entrypoints/openai/utils.py `spec_tokens_details_from_meta_info`):
      `spec_verify_ct` steps. Its `spec_accept_length` is completion_tokens / spec_verify_ct,
      which counts the request's first token, made by prefill and not by a verify step. So
      accepted = completion_tokens − 1 − steps (each step makes its accepted drafts + 1), unless
      the build counts `spec_num_correct_drafts` itself (then `spec_num_proposed_drafts` > 0).
    """
    accepted: int | None
    if engine == "vllm":
        steps = _count(fields.get("num_spec_steps"))
        accepted = _count(fields.get("num_accepted_draft_tokens"))
        draft_tokens = _count(fields.get("num_draft_tokens"))
        k = _count(fields.get("num_spec_tokens"))
        if steps is None or accepted is None:
            return None
        out: dict[str, Any] = {
            "source": "vllm_response", "steps": steps, "accepted": accepted,
            "draft_tokens": draft_tokens,
            "native_length": fields.get("mean_acceptance_length"),
        }
        if k is not None and draft_tokens is not None:
            out["drafts_trimmed"] = max(0, k * steps - draft_tokens)
        if isinstance(fields.get("per_step_drafted"), list) and k is not None:
            out["steps_short"] = sum(1 for d in fields["per_step_drafted"]
                                     if isinstance(d, int) and d < k)
    elif engine == "sglang":
        steps = _count(fields.get("spec_verify_ct"))
        if steps is None:
            return None
        proposed = _count(fields.get("spec_num_proposed_drafts"))
        correct = _count(fields.get("spec_num_correct_drafts"))
        if proposed and correct is not None:
            accepted = correct
        elif completion_tokens is not None and steps > 0:
            accepted = max(0, completion_tokens - 1 - steps)
        else:
            accepted = None if steps > 0 else 0
        if accepted is None:
            return None
        out = {"source": "sglang_response", "steps": steps, "accepted": accepted,
               "draft_tokens": proposed or None,
               "native_length": fields.get("spec_accept_length")}
    else:
        return None
    out["acceptance_length"] = 1.0 + out["accepted"] / steps if steps > 0 else None
    return out


# A per-request total disagrees with the cell's /metrics delta when their acceptance lengths
# differ by more than one accepted token over the cell's drafts: the counters' resolution.
PER_REQUEST_MISMATCH_FLAG = "per_request_acceptance_mismatch"


def per_request_summary(items: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The cell's per-request acceptance: p10/p50/p90 and the mean of the requests' lengths
    (each request weighs the same), beside the token-weighted length 1 + Σaccepted / Σsteps
    (each verify step weighs the same: the figure the /metrics delta gives)."""
    lengths = [i["acceptance_length"] for i in items if i.get("acceptance_length") is not None]
    steps = sum(int(i["steps"]) for i in items)
    accepted = sum(int(i["accepted"]) for i in items)
    if not items:
        return None
    out: dict[str, Any] = {
        "requests": len(items),
        "source": items[0]["source"],
        "steps": steps,
        "accepted": accepted,
        "p10": percentile(lengths, 10),
        "p50": percentile(lengths, 50),
        "p90": percentile(lengths, 90),
        "request_mean": sum(lengths) / len(lengths) if lengths else None,
        "token_weighted": 1.0 + accepted / steps if steps > 0 else None,
    }
    trimmed = [i["drafts_trimmed"] for i in items if "drafts_trimmed" in i]
    if trimmed:
        out["drafts_trimmed"] = sum(trimmed)
    return out


def per_request_disagrees(summary: dict[str, Any] | None,
                          counters: dict[str, Any] | None) -> bool:
    """Whether the per-request token-weighted length and the /metrics delta's length differ by
    more than one accepted token in the cell's drafts (1 / drafts)."""
    if not summary or not counters:
        return False
    mine, theirs = summary.get("token_weighted"), counters.get("acceptance_length")
    drafts = counters.get("drafts") or 0
    if mine is None or theirs is None or drafts <= 0:
        return False
    return bool(abs(mine - theirs) > 1.0 / drafts + 1e-9)
