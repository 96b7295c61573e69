"""A tiny deterministic 'model' behind the documented vLLM and SGLang logprob shapes.

Its full next-token distribution is known exactly, so the top-k estimator can be checked against
a direct computation on full distributions through the real probe code path.
"""

from __future__ import annotations

import json
import math
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

VOCAB = 40


@dataclass
class FakeModel:
    noise: float = 0.0  # 0: the reference; larger: a more perturbed candidate
    vocab: int = VOCAB
    minus_inf: set[int] = field(default_factory=set)  # tokens this model rules out

    def logprobs(self, prefix: list[int]) -> list[float]:
        last, n = (prefix[-1] if prefix else 0), len(prefix)
        logits = [
            2.5 * math.sin(0.9 * (last + 1) * (v + 1) + 0.37 * n)
            + self.noise * math.cos(1.7 * (v + 3) * (last + 2) + 0.11 * n)
            for v in range(self.vocab)
        ]
        for v in self.minus_inf:
            logits[v] = -math.inf
        top = max(logits)
        norm = top + math.log(sum(math.exp(x - top) for x in logits))
        return [x - norm for x in logits]

    def greedy(self, prompt: list[int], n: int) -> list[int]:
        out: list[int] = []
        for _ in range(n):
            lps = self.logprobs(prompt + out)
            out.append(max(range(self.vocab), key=lambda v: (lps[v], -v)))
        return out


def tokenize(text: str) -> list[int]:
    return [ord(c) % VOCAB for c in text[:12]] or [1]


def _ranked(lps: list[float]) -> list[int]:
    return sorted(range(len(lps)), key=lambda v: (-lps[v], v))


def vllm_prompt_logprobs(model: FakeModel, ids: list[int], k: int) -> list[Any]:
    out: list[Any] = [None]
    for i in range(1, len(ids)):
        lps = model.logprobs(ids[:i])
        order = _ranked(lps)
        entry = {str(t): {"logprob": max(lps[t], -9999.0), "rank": r + 1, "decoded_token": "x"}
                 for r, t in enumerate(order[:k])}
        forced = ids[i]
        entry.setdefault(str(forced), {"logprob": max(lps[forced], -9999.0),
                                       "rank": order.index(forced) + 1, "decoded_token": "y"})
        out.append(entry)
    return out


class FakeEngine:
    def __init__(self, model: FakeModel, engine: str = "vllm", legacy: bool = False,
                 flat: bool = False) -> None:
        self.model, self.engine, self.legacy, self.flat = model, engine, legacy, flat
        self.requests: list[tuple[str, dict[str, Any]]] = []
        self.fail_with: tuple[int, str] | None = None

    def handle(self, method: str, path: str, body: dict[str, Any], auth: str) -> tuple[int, Any]:
        self.requests.append((path, body))
        if self.fail_with is not None:
            return self.fail_with[0], {"error": self.fail_with[1] + " " + auth}
        if path == "/metrics":
            return 200, f"{self.engine}:num_requests_running 0\n"
        if path == "/v1/models":
            return 200, {"data": [{"id": "fake"}]}
        if path == "/version" and self.engine == "vllm":
            return 200, {"version": "0.0.fake"}
        if path == "/tokenize" and self.engine == "vllm":
            text = "".join(m["content"] for m in body.get("messages", [])) or body.get("prompt", "")
            return 200, {"tokens": tokenize(text), "count": 0, "max_model_len": 512}
        if path == "/v1/completions" and self.engine == "vllm":
            return 200, self._completions(body)
        if path == "/generate" and self.engine == "sglang":
            return 200, self._generate(body)
        return 404, {"error": "not found"}

    def _completions(self, body: dict[str, Any]) -> dict[str, Any]:
        ids = [int(t) for t in body["prompt"]]
        if body.get("prompt_logprobs"):
            scored = {"index": 0, "text": "", "prompt_token_ids": ids,
                      "prompt_logprobs": vllm_prompt_logprobs(self.model, ids,
                                                              int(body["prompt_logprobs"]))}
            return {"choices": [scored]}
        out = self.model.greedy(ids, int(body["max_tokens"]))
        choice: dict[str, Any] = {"index": 0, "text": "", "finish_reason": "length"}
        if body.get("return_token_ids") and not self.legacy:
            choice["token_ids"] = out
        elif body.get("return_tokens_as_token_ids"):
            choice["logprobs"] = {"tokens": [f"token_id:{t}" for t in out]}
        return {"choices": [choice]}

    def _generate(self, body: dict[str, Any]) -> dict[str, Any]:
        ids = [int(t) for t in body["input_ids"]] if "input_ids" in body else tokenize(body["text"])
        params = body.get("sampling_params") or {}
        out = self.model.greedy(ids, int(params.get("max_new_tokens", 1)))
        start = int(body.get("logprob_start_len", -1))
        k = int(body.get("top_logprobs_num") or 0)
        meta: dict[str, Any] = {"id": "r", "finish_reason": {"type": "length"}}
        if body.get("return_logprob") and start >= 0:
            tokens: list[list[Any]] = []
            tops: list[list[list[Any]] | None] = []
            for i in range(start, len(ids)):
                if i == 0:
                    tokens.append([None, ids[0], None])
                    tops.append(None)
                    continue
                lps = self.model.logprobs(ids[:i])
                tokens.append([lps[ids[i]], ids[i], None])
                tops.append([[lps[t], t, None] for t in _ranked(lps)[:k]] if k else None)
            meta["input_token_logprobs"] = tokens
            if k and self.flat:
                prefix = sum(1 for t in tops if t is None)
                rows = [t for t in tops if t is not None]
                meta["input_top_logprobs_val_flat"] = [e[0] for r in rows for e in r]
                meta["input_top_logprobs_idx_flat"] = [e[1] for r in rows for e in r]
                meta["input_top_logprobs_shape"] = [len(rows), k]
                meta["input_top_logprobs_null_prefix"] = prefix
            else:
                meta["input_top_logprobs"] = tops
        return {"text": "", "output_ids": out, "meta_info": meta}


@contextmanager
def serve(engine: FakeEngine) -> Iterator[str]:
    class Handler(BaseHTTPRequestHandler):
        def _reply(self, method: str) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            body = json.loads(self.rfile.read(length)) if length else {}
            status, payload = engine.handle(method, self.path, body,
                                            self.headers.get("Authorization", ""))
            data = payload.encode() if isinstance(payload, str) else json.dumps(payload).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self) -> None:  # noqa: N802
            self._reply("GET")

        def do_POST(self) -> None:  # noqa: N802
            self._reply("POST")

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)
