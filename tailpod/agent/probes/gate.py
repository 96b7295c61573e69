"""The token-identity gate: the same prompts, greedy, on two servers; the first differing token.
"""

from __future__ import annotations

import http.client
import json
from typing import Any

from .basics import log
from .prompt_classes import gate_prompts, prompt_text
from .transport import Endpoint, discover_model, http_request

# --------------------------------------------------------------------------------------------
# Token-identity gate
# --------------------------------------------------------------------------------------------


class GateError(Exception):
    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status  # the HTTP status when the endpoint answered, else None


def _gate_request(
    ep: Endpoint, model: str, prompt: dict[str, Any], max_tokens: int, seed: int, method: str,
    timeout: float,
) -> dict[str, Any]:
    if method == "output_ids":
        body: dict[str, Any] = {
            "text": prompt_text(prompt["messages"]),
            "sampling_params": {"max_new_tokens": max_tokens, "temperature": 0,
                                "ignore_eos": True},
        }
        path = "/generate"
    elif method == "tokens":
        # llama-server's native endpoint returns the generated token ids with return_tokens,
        # for drafted-and-accepted tokens too (its chat logprobs need top_logprobs > 0, which
        # changes its sampling path).
        body = {"prompt": prompt_text(prompt["messages"]), "n_predict": max_tokens,
                "temperature": 0, "seed": seed, "ignore_eos": True, "return_tokens": True}
        path = "/completion"
    else:
        body = {
            "model": model,
            "messages": prompt["messages"],
            "max_tokens": max_tokens,
            "temperature": 0,
            "seed": seed,
            "ignore_eos": True,
        }
        if method == "return_token_ids":
            body["return_token_ids"] = True
        elif method == "logprobs":
            body["logprobs"] = True
            body["top_logprobs"] = 0
            body["return_tokens_as_token_ids"] = True
        path = "/v1/chat/completions"
    try:
        status, data = http_request(ep, "POST", path, body, timeout=timeout)
    except (OSError, http.client.HTTPException) as exc:
        raise GateError(f"{ep.url()}{path}: {exc}") from None
    if status != 200:
        raise GateError(
            f"{ep.url()}{path} answered HTTP {status}: "
            + data[:200].decode("utf-8", "replace"),
            status,
        )
    try:
        obj = json.loads(data)
    except ValueError:
        raise GateError(f"{ep.url()}{path} returned non-JSON") from None
    return obj if isinstance(obj, dict) else {}


def _extract(obj: dict[str, Any], method: str) -> list[Any] | str | None:
    """Token ids (or text) from a non-streamed response; None when the method is unsupported."""
    if method == "output_ids":
        ids = obj.get("output_ids")
        return list(ids) if isinstance(ids, list) else None
    if method == "tokens":
        # Non-empty: a server that ignored return_tokens answers "tokens": [], which must not
        # count as a token source (two empty lists would compare equal).
        ids = obj.get("tokens")
        return list(ids) if isinstance(ids, list) and ids else None
    try:
        choice = obj["choices"][0]
    except (KeyError, IndexError, TypeError):
        return None
    if method == "return_token_ids":
        ids = choice.get("token_ids")
        return list(ids) if isinstance(ids, list) else None
    if method == "logprobs":
        content = (choice.get("logprobs") or {}).get("content")
        if not isinstance(content, list) or not content:
            return None
        out = []
        for item in content:
            tok = str(item.get("token", "")) if isinstance(item, dict) else ""
            if not tok.startswith("token_id:"):
                return None
            try:
                out.append(int(tok[len("token_id:") :]))
            except ValueError:
                return None
        return out
    msg = choice.get("message") or {}
    text = msg.get("content")
    return text if isinstance(text, str) else None


GATE_METHODS = ("return_token_ids", "logprobs", "output_ids", "tokens", "text")
GATE_REFERENCE_SCHEMA = 1


def _text_of(obj: dict[str, Any]) -> str | None:
    if isinstance(obj.get("text"), str) and "choices" not in obj:
        return str(obj["text"])  # SGLang /generate
    if isinstance(obj.get("content"), str) and "tokens" in obj:
        return str(obj["content"])  # llama.cpp /completion
    text = _extract(obj, "text")
    return text if isinstance(text, str) else None


def _supports(
    ep: Endpoint, model: str, prompt: dict[str, Any], max_tokens: int, seed: int, method: str,
    timeout: float,
) -> bool:
    """Does this endpoint answer `method` (an HTTP 4xx means the option or path is absent)?"""
    if method == "text":
        return True
    try:
        obj = _gate_request(ep, model, prompt, max_tokens, seed, method, timeout)
    except GateError as exc:
        if exc.status is not None and 400 <= exc.status < 500:
            return False
        raise
    return _extract(obj, method) is not None


def collect_gate_outputs(
    ep: Endpoint, model: str, prompts: list[dict[str, Any]], max_tokens: int, seed: int,
    timeout: float, methods: tuple[str, ...],
) -> dict[str, Any]:
    """Greedy outputs of one endpoint for every gate prompt, by the first method it supports:
    token ids (or None where the method is "text") and the text beside them."""
    method = next(
        (m for m in methods if _supports(ep, model, prompts[0], max_tokens, seed, m, timeout)),
        None,
    )
    if method is None:
        raise GateError(f"{ep.url()} supports none of the gate methods {', '.join(methods)}")
    outputs: list[list[Any] | None] = []
    texts: list[str | None] = []
    for i, prompt in enumerate(prompts):
        obj = _gate_request(ep, model, prompt, max_tokens, seed, method, timeout)
        got = _extract(obj, method)
        if got is None:
            raise GateError(f"prompt {i}: {ep.url()} stopped returning {method}")
        outputs.append(None if method == "text" else list(got))
        texts.append(_text_of(obj))
    return {"token_source": method, "outputs": outputs, "texts": texts}


def _compare(
    ref: list[Any | None], cand: list[Any | None]
) -> dict[str, Any] | None:
    for i, (a, b) in enumerate(zip(ref, cand)):  # noqa: B905 - lengths checked by callers
        if a is None or b is None:
            raise GateError(f"prompt {i}: no output to compare")
        pos = _first_difference(a, b)
        if pos is not None:
            return {
                "prompt": i,
                "position": pos,
                "reference_token": a[pos] if pos < len(a) else None,
                "candidate_token": b[pos] if pos < len(b) else None,
            }
    return None


def _gate_result(
    first_mismatch: dict[str, Any] | None, source: str, prompts: int, max_tokens: int
) -> dict[str, Any]:
    return {
        "status": "fail" if first_mismatch else "pass",
        "method": "text" if source == "text" else "token_ids",
        "token_source": source,
        "prompts": prompts,
        "max_tokens": max_tokens,
        "first_mismatch": first_mismatch,
    }


def _prompts(prompts: list[dict[str, Any]] | None) -> list[dict[str, Any]]:
    """The gate's prompts: those given, else the stock gate_prompts(); GateError when none."""
    prompts = prompts if prompts is not None else gate_prompts()
    if not prompts:
        raise GateError("no gate prompts")
    return prompts


def _served_name(ep: Endpoint, model: str | None, methods: tuple[str, ...]) -> str:
    """The model name the gate's requests carry: `model`, else the endpoint's own (/v1/models);
    none where every method is SGLang /generate's output_ids, whose request names no model."""
    if model:
        return model
    return discover_model(ep) if any(m != "output_ids" for m in methods) else ""


def run_gate(
    reference: str,
    candidate: str,
    reference_model: str | None = None,
    candidate_model: str | None = None,
    prompts: list[dict[str, Any]] | None = None,
    max_tokens: int = 64,
    seed: int = 0,
    timeout: float = 300.0,
    methods: tuple[str, ...] = GATE_METHODS,
) -> dict[str, Any]:
    """Greedy outputs of two live endpoints compared token by token; the first mismatch wins.

    The method is the strongest both endpoints support: vLLM `return_token_ids`, then
    logprobs with `return_tokens_as_token_ids`, then SGLang /generate `output_ids`, and only
    as a last resort the text (method "text"). Raises GateError when an endpoint fails.
    """
    prompts = _prompts(prompts)
    ref_ep, cand_ep = Endpoint.parse(reference), Endpoint.parse(candidate)
    ref_model = _served_name(ref_ep, reference_model, methods)
    cand_model = _served_name(cand_ep, candidate_model, methods)
    common = next(
        m for m in (*methods, "text")
        if _supports(ref_ep, ref_model, prompts[0], max_tokens, seed, m, timeout)
        and _supports(cand_ep, cand_model, prompts[0], max_tokens, seed, m, timeout)
    )
    ref = collect_gate_outputs(ref_ep, ref_model, prompts, max_tokens, seed, timeout, (common,))
    cand = collect_gate_outputs(cand_ep, cand_model, prompts, max_tokens, seed, timeout, (common,))
    key = "texts" if common == "text" else "outputs"
    return _gate_result(_compare(ref[key], cand[key]), common, len(prompts), max_tokens)


def save_gate_reference(
    endpoint: str,
    path: str | None,
    model: str | None = None,
    prompts: list[dict[str, Any]] | None = None,
    max_tokens: int = 64,
    seed: int = 0,
    timeout: float = 300.0,
    methods: tuple[str, ...] = GATE_METHODS,
) -> dict[str, Any]:
    """Record one endpoint's greedy gate outputs, for arms that cannot run at the same time."""
    prompts = _prompts(prompts)
    ep = Endpoint.parse(endpoint)
    name = _served_name(ep, model, methods)
    got = collect_gate_outputs(ep, name, prompts, max_tokens, seed, timeout, methods)
    ref = {"schema_version": GATE_REFERENCE_SCHEMA, "kind": "gate_reference", "model": name,
           "max_tokens": max_tokens, "seed": seed, "prompts": prompts, **got}
    if path:  # the agent returns the reference in its envelope; a file is optional
        with open(path, "w", encoding="utf-8") as fh:
            json.dump(ref, fh)
    return ref


def run_gate_against_reference(
    reference: dict[str, Any],
    candidate: str,
    candidate_model: str | None = None,
    timeout: float = 300.0,
) -> dict[str, Any]:
    """Compare a live candidate with a saved reference, using the reference's prompts, length,
    seed and method; text only when the candidate cannot give the reference's token ids."""
    if reference.get("kind") != "gate_reference" or not reference.get("prompts"):
        raise GateError("not a gate reference file (make one with --save-reference)")
    prompts = reference["prompts"]
    max_tokens, seed = int(reference["max_tokens"]), int(reference.get("seed", 0))
    source = str(reference["token_source"])
    ep = Endpoint.parse(candidate)
    name = _served_name(ep, candidate_model, (source,))
    methods = (source,) if source == "text" else (source, "text")
    cand = collect_gate_outputs(ep, name, prompts, max_tokens, seed, timeout, methods)
    used = cand["token_source"]
    if used != source:
        log(f"candidate does not offer {source}: comparing text (method 'text')")
    key = "texts" if used == "text" else "outputs"
    if used == "text" and any(t is None for t in reference.get("texts") or [None]):
        raise GateError("the reference holds no text to fall back on")
    return _gate_result(_compare(reference[key], cand[key]), used, len(prompts), max_tokens)


def _first_difference(a: list[Any] | str, b: list[Any] | str) -> int | None:
    for i in range(min(len(a), len(b))):
        if a[i] != b[i]:
            return i
    if len(a) != len(b):
        return min(len(a), len(b))
    return None
