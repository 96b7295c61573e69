"""Greedy continuations and teacher-forced top-k logprobs, for the KL evaluation (docs/kl-eval.md).
"""

from __future__ import annotations

import http.client
import json
import time
from typing import Any

from .basics import PROBE_ENGINES, PROBE_VERSION, ProbeError, log
from .prompt_classes import prompt_text
from .transport import (
    Endpoint,
    _scrub,
    detect_engine,
    discover_model,
    http_request,
    measured_from,
    scrape_metrics,
)

# --------------------------------------------------------------------------------------------
# Logprobs for the KL evaluation (docs/kl-eval.md)
# --------------------------------------------------------------------------------------------

LOGPROBS_SCHEMA = 1


def _lp_post(ep: Endpoint, path: str, body: dict[str, Any], timeout: float) -> dict[str, Any]:
    try:
        status, data = http_request(ep, "POST", path, body, timeout=timeout)
    except (OSError, http.client.HTTPException) as exc:
        raise ProbeError(f"{ep.url()}{path}: {exc}") from None
    if status != 200:
        raise ProbeError(
            f"{ep.url()}{path} answered HTTP {status}: " + data[:300].decode("utf-8", "replace")
        )
    try:
        obj = json.loads(data)
    except ValueError:
        raise ProbeError(f"{ep.url()}{path} returned non-JSON") from None
    if not isinstance(obj, dict):
        raise ProbeError(f"{ep.url()}{path} returned {type(obj).__name__}, not an object")
    return obj


def _server_version(ep: Endpoint, timeout: float) -> str | None:
    """The engine's own version string: vLLM GET /version, SGLang GET /server_info."""
    for path in ("/version", "/server_info", "/get_server_info"):
        try:
            status, data = http_request(ep, "GET", path, timeout=timeout)
            if status == 200:
                version = json.loads(data).get("version")
                if version:
                    return str(version)
        except (OSError, http.client.HTTPException, ValueError, AttributeError):
            continue
    return None


def _logprob_value(value: Any) -> float:
    """vLLM writes {"logprob": x, "rank": r, ...}; tolerate a bare number too."""
    if isinstance(value, dict):
        value = value.get("logprob")
    if value is None:
        return float("-inf")
    return float(value)


def _position(token: int, logprob: float, top: list[list[Any]], k: int) -> dict[str, Any]:
    """One scored position: the forced token's logprob and the top-k, best first."""
    top = sorted(top, key=lambda e: (-e[1], e[0]))[:k]
    return {"token": int(token), "logprob": float(logprob), "top": top}


def vllm_positions(
    prompt_logprobs: list[Any], ids: list[int], start: int, k: int
) -> list[dict[str, Any]]:
    """Positions start..len(ids)-1 from vLLM `prompt_logprobs` (one dict per prompt token, the
    first None; each dict holds the top-k and the prompt's own token, keyed by token id)."""
    if len(prompt_logprobs) != len(ids):
        raise ProbeError(
            f"prompt_logprobs has {len(prompt_logprobs)} entries for {len(ids)} prompt tokens"
        )
    out = []
    for i in range(start, len(ids)):
        entry = prompt_logprobs[i]
        if not isinstance(entry, dict):
            raise ProbeError(f"no prompt logprobs at position {i}")
        ranked = []
        for key, value in entry.items():
            rank = value.get("rank") if isinstance(value, dict) else None
            ranked.append((int(key), _logprob_value(value), rank))
        forced = [lp for tid, lp, _ in ranked if tid == ids[i]]
        if not forced:
            raise ProbeError(f"prompt logprobs at position {i} lack the prompt's own token")
        if any(r is not None for _, _, r in ranked):
            top = [[tid, lp] for tid, lp, r in ranked if r is not None and int(r) <= k]
        else:
            top = [[tid, lp] for tid, lp, _ in ranked]
        out.append(_position(ids[i], forced[0], top, k))
    return out


def _sglang_rows(meta: dict[str, Any]) -> list[Any]:
    """`input_top_logprobs` per input position (None where absent): the nested documented shape
    [[logprob, token_id, text], ...], or the flat one (val/idx arrays + shape + null prefix)."""
    rows = meta.get("input_top_logprobs")
    if isinstance(rows, list):
        return rows
    vals, idxs = meta.get("input_top_logprobs_val_flat"), meta.get("input_top_logprobs_idx_flat")
    shape = meta.get("input_top_logprobs_shape")
    if not isinstance(vals, list) or not isinstance(idxs, list) or not shape:
        raise ProbeError("SGLang answered without input_top_logprobs")
    n, k = int(shape[0]), int(shape[1])
    prefix = int(meta.get("input_top_logprobs_null_prefix") or 0)
    out: list[Any] = [None] * prefix
    for r in range(n):
        out.append([[vals[r * k + j], idxs[r * k + j], None] for j in range(k)])
    return out


def sglang_positions(
    meta: dict[str, Any], ids: list[int], logprob_start: int, start: int, k: int
) -> list[dict[str, Any]]:
    """Positions start..len(ids)-1 from SGLang /generate `meta_info` with return_logprob:
    `input_token_logprobs[i]` = [logprob, token_id, text] of input token logprob_start + i
    (logprob None for the first token), `input_top_logprobs[i]` the top-k there."""
    tokens = meta.get("input_token_logprobs")
    if not isinstance(tokens, list):
        raise ProbeError("SGLang answered without input_token_logprobs")
    rows = _sglang_rows(meta)
    if [int(t[1]) for t in tokens] != ids[logprob_start:] or len(rows) < len(tokens):
        raise ProbeError("SGLang input logprobs do not line up with the input ids")
    out = []
    for i in range(start, len(ids)):
        j = i - logprob_start
        lp = tokens[j][0]
        top = [[int(e[1]), _logprob_value(e[0])] for e in (rows[j] or [])]
        out.append(_position(ids[i], _logprob_value(lp), top, k))
    return out


def _tokens_from_logprobs(choice: dict[str, Any]) -> list[int] | None:
    tokens = (choice.get("logprobs") or {}).get("tokens")
    if not isinstance(tokens, list):
        return None
    out = []
    for tok in tokens:
        if not str(tok).startswith("token_id:"):
            return None
        out.append(int(str(tok)[len("token_id:"):]))
    return out


class LogprobClient:
    """Tokenize, greedy-decode and teacher-force-score one prompt on one engine."""

    def __init__(self, ep: Endpoint, model: str, engine: str, timeout: float,
                 ignore_eos: bool = False) -> None:
        self.ep, self.model, self.engine = ep, model, engine
        self.timeout, self.ignore_eos = timeout, ignore_eos

    def greedy(self, prompt: dict[str, Any], max_tokens: int) -> tuple[list[int], list[int]]:
        """(prompt token ids, greedy continuation ids)."""
        if self.engine == "sglang":
            return self._sglang_greedy(prompt, max_tokens)
        ids = self._vllm_tokenize(prompt)
        body: dict[str, Any] = {
            "model": self.model, "prompt": ids, "max_tokens": max_tokens, "temperature": 0,
            "seed": 0, "ignore_eos": self.ignore_eos, "return_token_ids": True,
        }
        choice = self._vllm_choice(body)
        out = choice.get("token_ids")
        if not isinstance(out, list):  # vLLM before `return_token_ids`: ids through logprobs
            body.pop("return_token_ids")
            body.update(logprobs=1, return_tokens_as_token_ids=True)
            out = _tokens_from_logprobs(self._vllm_choice(body))
            if out is None:
                raise ProbeError(f"{self.ep.url()} returns no completion token ids")
        return ids, [int(t) for t in out]

    def score(self, prompt_ids: list[int], continuation: list[int], k: int) -> list[dict[str, Any]]:
        """The engine's top-k logprobs at every continuation position, teacher-forced."""
        ids = list(prompt_ids) + list(continuation)
        if not continuation:
            return []
        if self.engine == "sglang":
            # From position 0, so the answer can be checked against every input id.
            obj = _lp_post(self.ep, "/generate", {
                "input_ids": ids,
                "sampling_params": {"max_new_tokens": 1, "temperature": 0},
                "return_logprob": True, "logprob_start_len": 0, "top_logprobs_num": k,
                "return_text_in_logprobs": False,
            }, self.timeout)
            return sglang_positions(obj.get("meta_info") or {}, ids, 0, len(prompt_ids), k)
        choice = self._vllm_choice({
            "model": self.model, "prompt": ids, "max_tokens": 1, "temperature": 0,
            "prompt_logprobs": k, "logprobs": k,
        })
        echoed = choice.get("prompt_token_ids")
        if isinstance(echoed, list) and [int(t) for t in echoed] != ids:
            raise ProbeError("the engine scored other token ids than the ones sent")
        entries = choice.get("prompt_logprobs")
        if not isinstance(entries, list):
            raise ProbeError(f"{self.ep.url()} returned no prompt_logprobs")
        return vllm_positions(entries, ids, len(prompt_ids), k)

    def _vllm_tokenize(self, prompt: dict[str, Any]) -> list[int]:
        if prompt.get("messages"):
            body: dict[str, Any] = {"model": self.model, "messages": prompt["messages"],
                                    "add_generation_prompt": True}
        else:
            body = {"model": self.model, "prompt": str(prompt.get("prompt", ""))}
        tokens = _lp_post(self.ep, "/tokenize", body, self.timeout).get("tokens")
        if not isinstance(tokens, list) or not tokens:
            raise ProbeError(f"{self.ep.url()}/tokenize returned no tokens")
        return [int(t) for t in tokens]

    def _vllm_choice(self, body: dict[str, Any]) -> dict[str, Any]:
        obj = _lp_post(self.ep, "/v1/completions", body, self.timeout)
        try:
            choice = obj["choices"][0]
        except (KeyError, IndexError, TypeError):
            raise ProbeError(f"{self.ep.url()}/v1/completions returned no choice") from None
        return choice if isinstance(choice, dict) else {}

    def _sglang_greedy(self, prompt: dict[str, Any], max_tokens: int) -> tuple[list[int], list[int]]:
        text = prompt_text(prompt["messages"]) if prompt.get("messages") else prompt.get("prompt")
        obj = _lp_post(self.ep, "/generate", {
            "text": str(text or ""),
            "sampling_params": {"max_new_tokens": max_tokens, "temperature": 0,
                                "ignore_eos": self.ignore_eos},
            "return_logprob": True, "logprob_start_len": 0, "top_logprobs_num": 0,
            "return_text_in_logprobs": False,
        }, self.timeout)
        meta = obj.get("meta_info") or {}
        inputs = meta.get("input_token_logprobs")
        if not isinstance(inputs, list) or not inputs:
            raise ProbeError("SGLang answered without input_token_logprobs")
        out = obj.get("output_ids")
        if not isinstance(out, list):
            out = [e[1] for e in meta.get("output_token_logprobs") or []]
        return [int(e[1]) for e in inputs], [int(t) for t in out]


def load_logprob_prompts(path: str) -> list[dict[str, Any]]:
    """A prompt set: {"prompts": [{"id", "class", "messages"|"prompt"}, ...]} or a bare list."""
    with open(path, encoding="utf-8") as fh:
        data = json.load(fh)
    return logprob_prompts(data, path)


def logprob_prompts(data: Any, source: str = "stdin") -> list[dict[str, Any]]:
    """The prompts of a prompt set (see load_logprob_prompts), each with an id."""
    prompts = data.get("prompts") if isinstance(data, dict) else data
    if not isinstance(prompts, list) or not prompts:
        raise ProbeError(f"{source} holds no prompts")
    out = []
    for i, p in enumerate(prompts):
        if not isinstance(p, dict) or not (p.get("messages") or p.get("prompt")):
            raise ProbeError(f"{source}: prompt {i} has neither messages nor prompt")
        out.append(dict(p, id=str(p.get("id") or f"p{i:02d}")))
    return out


def collect_logprobs(
    base_url: str,
    prompts: list[dict[str, Any]],
    top_k: int,
    max_tokens: int,
    model: str | None = None,
    engine: str = "auto",
    reference: dict[str, Any] | None = None,
    timeout: float = 600.0,
    ignore_eos: bool = False,
) -> dict[str, Any]:
    """Greedy continuation and teacher-forced top-k logprobs for every prompt.

    Without `reference` the sequence scored is this engine's own greedy continuation (the
    reference arm). With it, the reference's prompt ids + continuation are scored instead, so
    both sides come from the same code path on the same tokens; the engine's own greedy
    continuation is still recorded, for the first greedy divergence.
    """
    if top_k < 1:
        raise ProbeError("--top-k must be at least 1")
    ep = Endpoint.parse(base_url)
    if engine == "auto":
        engine = detect_engine(scrape_metrics(ep))
        engine = engine if engine in PROBE_ENGINES else "vllm"
    name = model or ("" if engine == "sglang" else discover_model(ep))
    client = LogprobClient(ep, name, engine, timeout, ignore_eos)
    ref_by_id = {p["id"]: p for p in (reference or {}).get("prompts", [])}
    t0 = time.time()
    results = []
    for prompt in prompts:
        row: dict[str, Any] = {"id": prompt["id"], "class": prompt.get("class")}
        prompt_ids, greedy = client.greedy(prompt, max_tokens)
        row.update(prompt_ids=prompt_ids, greedy_ids=greedy)
        if reference is None:
            scored_prompt, scored = prompt_ids, greedy
        else:
            ref = ref_by_id.get(prompt["id"])
            if ref is None:
                row["error"] = "not in the reference"
                results.append(row)
                continue
            scored_prompt, scored = list(ref["prompt_ids"]), list(ref["scored_ids"])
            row["tokenizer_match"] = scored_prompt == prompt_ids
        row["scored_ids"] = scored
        try:
            row["positions"] = client.score(scored_prompt, scored, top_k)
        except ProbeError as exc:
            if reference is None:
                raise
            row["error"] = _scrub(str(exc))  # e.g. an id the candidate's vocabulary lacks
        results.append(row)
        log(f"logprobs {prompt['id']}: {len(scored)} positions")
    return {
        "schema_version": LOGPROBS_SCHEMA,
        "kind": "logprobs",
        "probe_version": PROBE_VERSION,
        "engine": engine,
        "server_version": _server_version(ep, 10.0),
        "model": name or None,
        "measured_from": measured_from(base_url),
        "method": "sglang:input_top_logprobs" if engine == "sglang" else "vllm:prompt_logprobs",
        "top_k": top_k,
        "max_tokens": max_tokens,
        "ignore_eos": ignore_eos,
        "scored_on": "reference" if reference is not None else "own greedy",
        "elapsed_s": round(time.time() - t0, 3),
        "prompts": results,
    }
