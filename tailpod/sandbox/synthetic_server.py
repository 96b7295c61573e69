#!/usr/bin/env python3
"""A synthetic OpenAI-compatible streaming server with exactly known behaviour (stdlib only).

Used by the probe's tests and by benchmarks/probe_capacity.py (through the entry point
benchmarks/synthetic_server.py). Every stream emits a known
number of tokens on an absolute schedule: the first chunk (one token, "prefill") at
arrival + ttft, then the chunk ending with token j at t_first + j / rate, so a correct client
measures decode rate (n - 1) / (t_last - t_first) == rate exactly. It also offers:

- several tokens per chunk (`tokens_per_chunk`, cycled), as under speculative decoding;
- `return_token_ids` (per-chunk `token_ids`), logprobs `token_id:N`, SGLang `/generate`;
- a usage chunk with `"choices": []`, or none (`usage=False`, or `[[NOUSAGE]]` in a prompt);
- `/metrics` in vLLM or SGLang style whose spec-decode counters it advances per chunk: a chunk
  of m tokens after the first is one verify step with m - 1 accepted drafts of `spec_k`;
- failures triggered by markers in the prompt text: `[[FAIL500]]` (HTTP 500),
  `[[DROP:N]]` (connection dropped after N chunks), `[[NOUSAGE]]`;
- a planted greedy divergence (`diverge_position`, optionally only for prompts containing
  `diverge_marker`) for the token-identity gate;
- `/_stats` (JSON) with what it actually emitted and how late it ran behind its schedule;
- structured output: a request with `response_format: json_schema` or `tools` gets JSON that
  satisfies the schema (a tool call under `tools`), finish_reason `stop` / `tool_calls`; with
  speculation on (`spec_k` > 0) `structure_fault` plants what engines have shipped: `truncate`
  (the JSON cut short, finish_reason `stop`: SGLang #9187) or `stall` (`stall_s` before the
  closing `}`: vLLM #49002); `grammar_compile_s` delays the first chunk of a request whose schema
  text (response_format or tools) the server has not seen before, as a grammar compiler with a
  cache does (`stats.grammars_compiled` counts them);
- per-request speculative figures (`per_request_spec`): vLLM's `metrics.speculative_decoding`
  in the usage chunk, or SGLang's `sglext.spec_tokens_details` when the request asks
  `return_spec_tokens_details`; `per_request_skew` adds accepted drafts to them only (a
  disagreement with /metrics that the probe must flag);
- acceptance that collapses with position (`drift_position` P, with speculation on): a chat or
  completions stream's verify steps from context position P on (prompt words + tokens so far)
  accept no draft (one token per chunk), and so do every later request's, engine-wide until the
  server restarts, as vLLM #52873 reported past position 32,768; the latch is set when the
  request that crosses P starts;
- a reasoning model (`reasoning_tokens` N): a chat stream's first N tokens go out as reasoning
  deltas (`reasoning_key`), the rest as `content` (a chunk across the boundary carries both),
  and usage says `completion_tokens_details.reasoning_tokens`; `/_stats/raw` records when each
  stream's first answer delta was written (`ttfa_list`, beside `ttft_list`).

Run alone: `python -m tailpod.sandbox.synthetic_server --port 8000 --rate 200`.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import re
import sys
import threading
import time
import zlib
from dataclasses import dataclass, field
from typing import Any

_DROP_RE = re.compile(r"\[\[DROP:(\d+)\]\]")


@dataclass
class SyntheticConfig:
    model: str = "synthetic"
    rate: float = 1000.0  # tokens per second per stream
    ttft_s: float = 0.005
    tokens_per_chunk: tuple[int, ...] = (1,)  # cycled over chunks after the first
    fixed_tokens: int | None = None  # completion length; None = the request's max_tokens
    usage: bool = True
    token_ids: bool = True  # honour return_token_ids
    logprobs_token_ids: bool = True  # honour logprobs + return_tokens_as_token_ids
    generate_endpoint: bool = True  # serve SGLang's /generate (vLLM answers 404)
    metrics: str = "vllm"  # vllm | sglang | none
    spec_k: int = 0  # draft tokens per verify step; 0 = plain decode, no spec counters
    engines: int = 2  # vLLM-style counters are split over this many `engine` labels
    diverge_position: int | None = None
    diverge_marker: str | None = None
    record_bodies: bool = True
    vocab: int = 32000
    # Service-time mode (ground truth for open-loop load): `slots` requests are served at once,
    # the rest wait in one FIFO queue. A request holds its slot for ttft_s + (n - 1) / rate (its
    # last token), so with a fixed length the service time is deterministic: an M/D/c queue.
    # The queue runs on the server's own clock from each request's arrival (a virtual FIFO, so
    # timer jitter delays what is observed, never whom the queue serves next). None = no limit.
    slots: int | None = None
    structure_fault: str | None = None  # truncate | stall (only when spec_k > 0)
    stall_s: float = 0.6
    grammar_compile_s: float = 0.0  # first sight of a schema text: this long before its output
    per_request_spec: str = "none"  # none | vllm | sglang
    per_request_skew: int = 0
    drift_position: int | None = None  # acceptance collapses from this context position on
    reasoning_tokens: int = 0  # chat streams: this many tokens of reasoning before the answer
    reasoning_key: str = "reasoning"  # vLLM's delta key; SGLang and llama.cpp: reasoning_content
    # A prefix cache: a streamed completion's usage says `prompt_tokens_details.cached_tokens`,
    # the prompt words of the longest earlier prompt (same cache_salt) that its prompt starts with.
    prefix_cache: bool = False


@dataclass
class _StreamState:
    idx: int = 0
    max_lag: float = 0.0
    t_first_write: float | None = None
    t_answer_write: float | None = None  # the first write that carried answer content
    t_last_write: float = 0.0


@dataclass
class Counters:
    requests: int = 0
    generation_tokens: int = 0
    drafts: int = 0
    draft_tokens: int = 0
    accepted: int = 0
    per_pos: list[int] = field(default_factory=list)
    verify_calls: int = 0


@dataclass
class Stats:
    requests: int = 0
    streams_finished: int = 0
    tokens: int = 0
    chunks: int = 0
    first_arrival: float | None = None
    last_end: float | None = None
    max_lag_s: float = 0.0
    ttft_s: list[float] = field(default_factory=list)  # first write - arrival
    # first answer write - arrival, per stream in the order of ttft_s (None: no answer was sent)
    ttfa_s: list[float | None] = field(default_factory=list)
    decode_tok_s: list[float] = field(default_factory=list)  # (n-1)/(last write - first write)
    durations_s: list[float] = field(default_factory=list)  # last write - arrival
    # service-time mode: how long each request waited for a slot on the queue's own clock
    # (start - arrival, in arrival order; 0.0 when it found one free), timer jitter excluded
    queue_waits_s: list[float] = field(default_factory=list)
    salts: list[str | None] = field(default_factory=list)
    grammars_compiled: int = 0
    bodies: list[dict[str, Any]] = field(default_factory=list)


def _text(ids: list[int]) -> str:
    return "".join(f" w{t}" for t in ids)


def _median(values: list[float]) -> float | None:
    if not values:
        return None
    xs = sorted(values)
    mid = len(xs) // 2
    return xs[mid] if len(xs) % 2 else (xs[mid - 1] + xs[mid]) / 2


# Values for the string patterns of the shipped schemas (tailpod/agent/probes/prompts/).
_PATTERN_VALUES = {
    "^[A-Z]{3}$": "CPH", "^\\d{4}-\\d{2}-\\d{2}$": "2027-03-14",
    "^[^@\\s]+@[^@\\s]+$": "ana@example.com", "^CUS-[0-9]{6}$": "CUS-004217",
    "^[A-Z]{2}$": "CH",
}


def _instance(schema: Any, seed: int) -> Any:
    """A value that satisfies `schema` (the subset the shipped schemas use), varied by seed."""
    if not isinstance(schema, dict):
        return None
    if "enum" in schema:
        return schema["enum"][seed % len(schema["enum"])]
    kind = schema.get("type", "object")
    if isinstance(kind, list):
        kind = next((k for k in kind if k != "null"), "null")
    if kind == "object":
        props = schema.get("properties", {})
        return {k: _instance(v, seed + i) for i, (k, v) in enumerate(props.items())}
    if kind == "array":
        n = min(2, schema.get("maxItems", 2))
        return [_instance(schema.get("items", {}), seed + i) for i in range(n)]
    if kind == "string":
        return _PATTERN_VALUES.get(schema.get("pattern", ""), f"v{seed % 97}")
    if kind in ("integer", "number"):
        lo, hi = schema.get("minimum", 0), schema.get("maximum", 100)
        return int(lo + seed % (int(hi - lo) + 1))
    if kind == "boolean":
        return bool(seed % 2)
    return None


def _structure_request(body: dict[str, Any]) -> tuple[str, str | None, Any] | None:
    """("tool", function name, its parameters) for a request with tools, ("json", None, schema)
    for response_format json_schema; None for a plain request."""
    tools = body.get("tools")
    if isinstance(tools, list) and tools:
        fns = [t.get("function", {}) for t in tools if isinstance(t, dict)]
        choice = body.get("tool_choice")
        if isinstance(choice, dict):
            wanted = (choice.get("function") or {}).get("name")
            fns = [f for f in fns if f.get("name") == wanted] or fns
        fn = fns[zlib.crc32(_prompt_of(body).encode()) % len(fns)]
        return "tool", fn.get("name"), fn.get("parameters") or {}
    rf = body.get("response_format")
    if isinstance(rf, dict) and rf.get("type") == "json_schema":
        return "json", None, (rf.get("json_schema") or {}).get("schema") or {}
    return None


def _prompt_of(body: dict[str, Any]) -> str:
    if "messages" in body:
        return "\n".join(str(m.get("content", "")) for m in body.get("messages") or [])
    if "text" in body:
        return str(body.get("text"))
    return str(body.get("prompt", ""))


class SyntheticServer:
    def __init__(self, config: SyntheticConfig | None = None, host: str = "127.0.0.1",
                 port: int = 0) -> None:
        self.config = config or SyntheticConfig()
        self.host = host
        self.port = port
        self.stats = Stats()
        self._lock = threading.Lock()
        self._engine_counters = [Counters() for _ in range(max(1, self.config.engines))]
        self._created = time.time()
        self._model_b = self.config.model.encode()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._server: asyncio.AbstractServer | None = None
        self._thread: threading.Thread | None = None
        self._ready = threading.Event()
        self.control_port: int | None = None
        self._slot_free: list[float] = [0.0] * max(0, self.config.slots or 0)
        self._drifted = False  # drift_position crossed: no draft accepted until restart
        self._grammars: set[str] = set()  # schema texts compiled (the grammar cache)
        self._prompts_seen: dict[str | None, set[tuple[str, ...]]] = {}

    # ---- lifecycle -------------------------------------------------------------------------

    @property
    def base_url(self) -> str:
        return f"http://{self.host}:{self.port}"

    async def serve(self, reuse_port: bool = False, control: bool = False) -> None:
        """Serve until cancelled. With `reuse_port`, several processes share one port (the
        kernel spreads connections); `control` adds a private port for /_stats and /_reset
        so a benchmark can read every process's own record."""
        self._loop = asyncio.get_running_loop()
        self._server = await asyncio.start_server(
            self._handle, self.host, self.port, reuse_port=reuse_port or None
        )
        self.port = self._server.sockets[0].getsockname()[1]
        if control:
            ctl = await asyncio.start_server(self._handle, self.host, 0)
            self.control_port = ctl.sockets[0].getsockname()[1]
        self._ready.set()
        async with self._server:
            await self._server.serve_forever()

    def start(self) -> SyntheticServer:
        """Serve from a background thread (tests); returns once the port is bound."""

        def runner() -> None:
            with contextlib.suppress(asyncio.CancelledError):
                asyncio.run(self.serve())

        self._thread = threading.Thread(target=runner, name="synthetic-server", daemon=True)
        self._thread.start()
        if not self._ready.wait(10):
            raise RuntimeError("synthetic server did not start")
        return self

    def stop(self) -> None:
        loop = self._loop
        if loop is not None and self._server is not None:
            server = self._server

            def shutdown() -> None:
                server.close()
                for task in asyncio.all_tasks():
                    task.cancel()

            with contextlib.suppress(RuntimeError):  # the loop may already have ended
                loop.call_soon_threadsafe(shutdown)
        if self._thread is not None:
            self._thread.join(10)

    def __enter__(self) -> SyntheticServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def reset_stats(self) -> None:
        with self._lock:
            self.stats = Stats()
            self._slot_free = [0.0] * len(self._slot_free)

    def counters(self) -> Counters:
        """Counters summed over the engine labels (what a correct scraper should see)."""
        total = Counters(per_pos=[0] * self.config.spec_k)
        for c in self._engine_counters:
            total.requests += c.requests
            total.generation_tokens += c.generation_tokens
            total.drafts += c.drafts
            total.draft_tokens += c.draft_tokens
            total.accepted += c.accepted
            total.verify_calls += c.verify_calls
            for i, v in enumerate(c.per_pos):
                total.per_pos[i] += v
        return total

    # ---- HTTP ------------------------------------------------------------------------------

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                try:
                    head = await reader.readuntil(b"\r\n\r\n")
                except (asyncio.IncompleteReadError, asyncio.LimitOverrunError):
                    return
                lines = head.decode("latin-1").split("\r\n")
                method, path = lines[0].split(" ")[:2]
                headers = {}
                for line in lines[1:]:
                    k, _, v = line.partition(":")
                    headers[k.strip().lower()] = v.strip()
                length = int(headers.get("content-length") or 0)
                raw = await reader.readexactly(length) if length else b""
                keep = await self._dispatch(method, path.split("?")[0], raw, writer)
                if not keep or headers.get("connection", "").lower() == "close":
                    return
        except (ConnectionError, asyncio.IncompleteReadError):
            return
        finally:
            writer.close()

    @staticmethod
    def _respond(writer: asyncio.StreamWriter, status: int, body: bytes,
                 ctype: str = "application/json") -> None:
        reason = {200: "OK", 404: "Not Found", 400: "Bad Request", 500: "Internal Server Error"}
        writer.write(
            b"HTTP/1.1 %d %s\r\ncontent-type: %s\r\ncontent-length: %d\r\n\r\n"
            % (status, reason.get(status, "X").encode(), ctype.encode(), len(body))
            + body
        )

    async def _dispatch(self, method: str, path: str, raw: bytes,
                        writer: asyncio.StreamWriter) -> bool:
        if method == "GET" and path == "/health":
            self._respond(writer, 200, b"")
        elif method == "GET" and path == "/v1/models":
            data = {"object": "list", "data": [{"id": self.config.model, "object": "model"}]}
            self._respond(writer, 200, json.dumps(data).encode())
        elif method == "GET" and path == "/metrics":
            if self.config.metrics == "none":
                self._respond(writer, 404, b'{"detail":"Not Found"}')
            else:
                self._respond(writer, 200, self.metrics_text().encode(), "text/plain")
        elif method == "GET" and path in ("/_stats", "/_stats/raw"):
            data = self.stats_json(raw=path.endswith("/raw"))
            self._respond(writer, 200, json.dumps(data).encode())
        elif method == "POST" and path == "/_reset":
            self.reset_stats()
            self._respond(writer, 200, b"{}")
        elif method == "POST" and path == "/generate" and not self.config.generate_endpoint:
            self._respond(writer, 404, b'{"detail":"Not Found"}')
        elif method == "POST" and path in ("/v1/chat/completions", "/v1/completions", "/generate"):
            try:
                body = json.loads(raw or b"{}")
            except ValueError:
                self._respond(writer, 400, b'{"error":"bad json"}')
                return True
            return await self._generate(path, body, writer)
        else:
            self._respond(writer, 404, b'{"detail":"Not Found"}')
        return True

    # ---- generation ------------------------------------------------------------------------

    def token_sequence(self, prompt: str, n: int) -> list[int]:
        seed = zlib.crc32(prompt.encode())
        ids = [(seed + 7919 * i) % self.config.vocab for i in range(n)]
        pos = self.config.diverge_position
        marker = self.config.diverge_marker
        if pos is not None and (marker is None or marker in prompt):
            ids = ids[:pos] + [(t + 1) % self.config.vocab for t in ids[pos:]]
        return ids

    def _chunk_bounds(self, n: int) -> list[tuple[int, int]]:
        bounds = [(0, min(1, n))] if n > 0 else []
        pattern = self.config.tokens_per_chunk or (1,)
        a, j = 1, 0
        while a < n:
            b = min(n, a + max(1, pattern[j % len(pattern)]))
            bounds.append((a, b))
            a, j = b, j + 1
        return bounds

    def _drifted_bounds(self, n: int, position: int) -> list[tuple[int, int]]:
        """_chunk_bounds, with every chunk from context position `drift_position` on (the
        prompt's `position` tokens + the chunk's start), or after any request crossed it, split
        into one-token chunks: verify steps that accept no draft."""
        bounds = self._chunk_bounds(n)
        drift = self.config.drift_position
        if drift is None or self.config.spec_k <= 0:
            return bounds
        out: list[tuple[int, int]] = []
        with self._lock:
            for a, b in bounds:
                if a > 0 and (self._drifted or position + a >= drift):
                    self._drifted = True
                    out.extend((j, j + 1) for j in range(a, b))
                else:
                    out.append((a, b))
        return out

    def _record_arrival(self, body: dict[str, Any], now: float) -> int:
        with self._lock:
            st = self.stats
            ordinal = st.requests
            st.requests += 1
            if st.first_arrival is None:
                st.first_arrival = now
            st.salts.append(body.get("cache_salt") or body.get("extra_key"))
            if self.config.record_bodies:
                st.bodies.append(body)
        return ordinal

    def _count_chunk(self, engine: int, chunk_index: int, size: int) -> None:
        c = self._engine_counters[engine]
        c.generation_tokens += size
        k = self.config.spec_k
        if k > 0 and chunk_index > 0:
            acc = min(size - 1, k)
            c.drafts += 1
            c.draft_tokens += k
            c.accepted += acc
            if len(c.per_pos) < k:
                c.per_pos.extend([0] * (k - len(c.per_pos)))
            for p in range(acc):
                c.per_pos[p] += 1
            c.verify_calls += 1

    async def _generate(self, path: str, body: dict[str, Any],
                        writer: asyncio.StreamWriter) -> bool:
        loop = asyncio.get_running_loop()
        arrival = loop.time()
        ordinal = self._record_arrival(body, arrival)
        engine = ordinal % len(self._engine_counters)
        prompt = _prompt_of(body)
        if "[[FAIL500]]" in prompt:
            self._respond(writer, 500, b'{"object":"error","message":"synthetic failure"}')
            return True
        api = "generate" if path == "/generate" else ("chat" if "chat" in path else "completions")
        sampling = body.get("sampling_params") or {}
        n = self.config.fixed_tokens
        if n is None:
            n = int(body.get("max_tokens") or body.get("max_completion_tokens")
                    or sampling.get("max_new_tokens") or 16)
        ids = self.token_sequence(prompt, n)
        cached = self._prefix_hit(body, prompt) if self.config.prefix_cache else None
        usage = self.config.usage and "[[NOUSAGE]]" not in prompt
        drop = _DROP_RE.search(prompt)
        if body.get("stream") and api == "chat" and _structure_request(body) is not None:
            return await self._stream_structured(body, prompt, engine, writer)
        if not body.get("stream"):
            full = self._full_response(api, body, prompt, ids)
            self._respond(writer, 200, json.dumps(full).encode())
            self._finish_counts(engine, ids, loop.time())
            return True
        return await self._stream(api, body, prompt, ids, usage,
                                  int(drop.group(1)) if drop else None, engine, arrival, writer,
                                  cached)

    def _prefix_hit(self, body: dict[str, Any], prompt: str) -> int:
        """Prompt words already cached: the longest earlier prompt of the same salt that this
        prompt starts with (whole prompts only, no block rounding: a known count for tests)."""
        words = tuple(prompt.split())
        with self._lock:
            seen = self._prompts_seen.setdefault(body.get("cache_salt"), set())
            hit = max((len(w) for w in seen if words[:len(w)] == w), default=0)
            seen.add(words)
        return hit

    def _finish_counts(self, engine: int, ids: list[int], now: float) -> None:
        bounds = self._chunk_bounds(len(ids))
        with self._lock:
            for j, (a, b) in enumerate(bounds):
                self._count_chunk(engine, j, b - a)
            c = self._engine_counters[engine]
            c.requests += 1
            self.stats.tokens += len(ids)
            self.stats.streams_finished += 1
            self.stats.last_end = now

    def _full_response(self, api: str, body: dict[str, Any], prompt: str,
                       ids: list[int]) -> dict[str, Any]:
        text = _text(ids)
        usage = {"prompt_tokens": len(prompt.split()), "completion_tokens": len(ids),
                 "total_tokens": len(prompt.split()) + len(ids)}
        if api == "generate":
            return {"text": text, "output_ids": ids,
                    "meta_info": {"id": "gen",
                                  "finish_reason": {"type": "length", "length": len(ids)},
                                  "prompt_tokens": usage["prompt_tokens"],
                                  "completion_tokens": len(ids)}}
        choice: dict[str, Any] = {"index": 0, "finish_reason": "length"}
        if api == "chat":
            choice["message"] = {"role": "assistant", "content": text}
        else:
            choice["text"] = text
        if body.get("return_token_ids") and self.config.token_ids:
            choice["token_ids"] = ids
        if body.get("logprobs") and body.get("return_tokens_as_token_ids") \
                and self.config.logprobs_token_ids:
            choice["logprobs"] = {"content": [{"token": f"token_id:{t}", "logprob": 0.0}
                                              for t in ids]}
        return {"id": "cmpl-synthetic", "object": "chat.completion", "model": self.config.model,
                "choices": [choice], "usage": usage}

    def _event(self, api: str, body: dict[str, Any], prompt: str, ids: list[int],
               a: int, b: int, last: bool) -> bytes:
        piece = ids[a:b]
        text = _text(piece)
        if api == "generate":
            meta: dict[str, Any] = {"id": "gen", "finish_reason": None,
                                    "prompt_tokens": len(prompt.split()),
                                    "completion_tokens": b}
            if last:
                meta["finish_reason"] = {"type": "length", "length": b}
                verifies = len(self._chunk_bounds(len(ids))) - 1
                if self.config.spec_k > 0 and verifies > 0:
                    meta["spec_verify_ct"] = verifies
            obj = {"text": _text(ids[:b]), "output_ids": ids[:b],
                   "meta_info": meta}
            return b"data: " + json.dumps(obj).encode() + b"\n\n"
        # Hand-formatted (the text needs no escaping): json.dumps per chunk would make the
        # server, not the client, the bottleneck of the capacity benchmark.
        key = b'"delta":{"content":"' if api == "chat" else b'"text":"'
        close = b'"}' if api == "chat" else b'"'
        think = self.config.reasoning_tokens if api == "chat" else 0
        if a < think:  # reasoning first: a chunk across the boundary carries both
            key = (b'"delta":{"' + self.config.reasoning_key.encode() + b'":"'
                   + _text(ids[a:min(b, think)]).encode())
            text = _text(ids[think:b]) if b > think else ""
            key += b'","content":"' if b > think else b'","content":null'
            close = b'"}' if b > think else b"}"
        ids_part = b""
        if body.get("return_token_ids") and self.config.token_ids:
            ids_part = b',"token_ids":[' + ",".join(map(str, piece)).encode() + b"]"
        return b"".join((
            b'data: {"id":"chatcmpl-synthetic","object":"chat.completion.chunk","created":0,'
            b'"model":"', self._model_b, b'","choices":[{"index":0,', key, text.encode(), close,
            b',"logprobs":null,"finish_reason":', b'"length"' if last else b"null", ids_part,
            b"}]}\n\n",
        ))

    def _admit(self, arrival: float, n: int) -> float:
        """When the request's service starts: at arrival, or (service-time mode) when the
        earliest-free slot frees up, FIFO by arrival. Called in arrival order on the loop."""
        if not self._slot_free:
            return arrival
        i = min(range(len(self._slot_free)), key=self._slot_free.__getitem__)
        start = max(arrival, self._slot_free[i])
        self._slot_free[i] = start + self.config.ttft_s + max(0, n - 1) / self.config.rate
        return start

    async def _stream(self, api: str, body: dict[str, Any], prompt: str, ids: list[int],
                      usage: bool, drop_after: int | None, engine: int, arrival: float,
                      writer: asyncio.StreamWriter, cached: int | None = None) -> bool:
        """Emit on the absolute schedule from timer callbacks (cheaper than a sleeping
        coroutine per chunk); every chunk already due when a callback runs goes in one write."""
        loop = asyncio.get_running_loop()
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
                     b"transfer-encoding: chunked\r\n\r\n")
        bounds = (self._chunk_bounds(len(ids)) if api == "generate"
                  else self._drifted_bounds(len(ids), len(prompt.split())))
        rate = self.config.rate
        start = self._admit(arrival, len(ids))
        if self._slot_free:
            with self._lock:
                self.stats.queue_waits_s.append(start - arrival)
        t_first = start + self.config.ttft_s
        sched = [t_first + (b - 1) / rate for (_, b) in bounds]
        transport = writer.transport
        finished: asyncio.Future[bool] = loop.create_future()
        state = _StreamState(t_last_write=arrival)

        def emit() -> None:
            if finished.done():
                return
            if transport.is_closing():
                finished.set_result(False)
                return
            now = loop.time()
            idx = state.idx
            parts = []
            answer = False  # this write carries answer content
            if idx == 0 and api == "chat":
                parts.append(b'data: {"id":"chatcmpl-synthetic","object":"chat.completion.chunk",'
                             b'"created":0,"model":"' + self._model_b + b'","choices":[{"index":0,'
                             b'"delta":{"role":"assistant","content":""},"logprobs":null,'
                             b'"finish_reason":null}]}\n\n')
            while idx < len(bounds) and sched[idx] <= now:
                a, b = bounds[idx]
                state.max_lag = max(state.max_lag, now - sched[idx])
                parts.append(self._event(api, body, prompt, ids, a, b, idx == len(bounds) - 1))
                answer = answer or api != "chat" or b > self.config.reasoning_tokens
                self._count_chunk(engine, idx, b - a)
                idx += 1
                if drop_after is not None and idx >= drop_after:
                    break
            state.idx = idx
            if parts:
                data = b"".join(parts)
                # stamped before the write: a reader cannot see the bytes before this time, while a
                # stamp after it can fall milliseconds late when the loop's thread is descheduled
                state.t_last_write = loop.time()
                transport.write(b"%x\r\n%s\r\n" % (len(data), data))
                if state.t_first_write is None:
                    state.t_first_write = state.t_last_write
                if state.t_answer_write is None and answer:
                    state.t_answer_write = state.t_last_write
            if drop_after is not None and idx >= drop_after:
                finished.set_result(False)
            elif idx >= len(bounds):
                finished.set_result(True)
            else:
                loop.call_at(sched[idx], emit)

        if bounds:
            loop.call_at(sched[0], emit)
        else:
            finished.set_result(True)
        try:
            complete = await finished
        except asyncio.CancelledError:
            transport.abort()
            raise
        if not complete:
            # a planted drop: let what was sent reach the client, then cut mid-stream
            await writer.drain()
            await asyncio.sleep(0.02)
            transport.abort()
            return False
        tail = b""
        if usage and api != "generate":
            p = len(prompt.split())
            counts: dict[str, Any] = {"prompt_tokens": p, "completion_tokens": len(ids),
                                      "total_tokens": p + len(ids)}
            if cached is not None:
                counts["prompt_tokens_details"] = {"cached_tokens": cached}
            if self.config.reasoning_tokens and api == "chat":
                counts["completion_tokens_details"] = {
                    "reasoning_tokens": min(self.config.reasoning_tokens, len(ids))}
            obj = {"id": "chatcmpl-synthetic", "object": "chat.completion.chunk", "created": 0,
                   "model": self.config.model, "choices": [], "usage": counts}
            obj.update(self._spec_payload(body, [b - a for a, b in bounds], len(ids)))
            tail = b"data: " + json.dumps(obj).encode() + b"\n\n"
        tail += b"data: [DONE]\n\n"
        transport.write(b"%x\r\n%s\r\n0\r\n\r\n" % (len(tail), tail))
        end = loop.time()
        t_first_write = state.t_first_write
        t_last_write = state.t_last_write
        with self._lock:
            self._engine_counters[engine].requests += 1
            st = self.stats
            st.tokens += len(ids)
            st.chunks += len(bounds)
            st.streams_finished += 1
            st.last_end = end
            st.max_lag_s = max(st.max_lag_s, state.max_lag)
            st.durations_s.append(t_last_write - arrival)
            if t_first_write is not None:
                st.ttft_s.append(t_first_write - arrival)
                st.ttfa_s.append(None if state.t_answer_write is None
                                 else state.t_answer_write - arrival)
                if len(ids) > 1 and t_last_write > t_first_write:
                    st.decode_tok_s.append((len(ids) - 1) / (t_last_write - t_first_write))
        await writer.drain()
        return True

    # ---- structured output -----------------------------------------------------------------

    def _spec_payload(self, body: dict[str, Any], sizes: list[int],
                      n_tokens: int) -> dict[str, Any]:
        """The request's own speculative figures, from the chunk sizes it was sent in (the first
        chunk is prefill; each later chunk of m tokens one verify step accepting m - 1)."""
        k = self.config.spec_k
        if k <= 0 or self.config.per_request_spec == "none":
            return {}
        steps = max(0, len(sizes) - 1)
        accepted = sum(min(m - 1, k) for m in sizes[1:]) + self.config.per_request_skew
        if self.config.per_request_spec == "vllm":
            hist = [0] * (k + 1)
            for m in sizes[1:]:
                hist[min(m - 1, k)] += 1
            return {"metrics": {"speculative_decoding": {
                "mean_acceptance_length": 1.0 + accepted / steps if steps else 1.0,
                "draft_acceptance_rate": accepted / (k * steps) if steps else 0.0,
                "acceptance_histogram": hist, "num_spec_steps": steps,
                "num_accepted_draft_tokens": accepted, "num_draft_tokens": k * steps,
                "num_spec_tokens": k}}}
        if not body.get("return_spec_tokens_details"):
            return {}
        # SGLang: spec_accept_length = completion_tokens / verify count (the prefill token too)
        return {"sglext": {"spec_tokens_details": {
            "spec_accept_rate": accepted / (k * steps) if steps else 0.0,
            "spec_accept_length": n_tokens / steps if steps else 0.0,
            "spec_cap_length": 0.0, "spec_block_accept_length": 0.0,
            "spec_num_correct_drafts": 0, "spec_num_proposed_drafts": 0,
            "spec_verify_ct": steps, "spec_correct_drafts_histogram": [],
            "spec_cap_lens_histogram": []}}}

    async def _stream_structured(self, body: dict[str, Any], prompt: str, engine: int,
                                 writer: asyncio.StreamWriter) -> bool:
        """A chat stream of JSON that satisfies the request's schema: content under
        response_format, one tool call's arguments under tools. Pieces of 3 characters are its
        tokens, grouped as `tokens_per_chunk` says; sleep-paced (tests, not capacity)."""
        kind, name, schema = _structure_request(body) or ("json", None, {})
        text = json.dumps(_instance(schema, zlib.crc32(prompt.encode())))
        fault = self.config.structure_fault if self.config.spec_k > 0 else None
        if fault == "truncate":
            text = text[: max(1, (len(text) * 3) // 5)]
        tokens = [text[i:i + 3] for i in range(0, len(text), 3)]
        cap = int(body.get("max_tokens") or body.get("max_completion_tokens") or len(tokens))
        finish = "tool_calls" if kind == "tool" else "stop"
        if cap < len(tokens):  # an engine stops at max_tokens, grammar or not
            tokens, finish = tokens[:cap], "length"
        bounds = self._chunk_bounds(len(tokens))
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
                     b"transfer-encoding: chunked\r\n\r\n")

        def send(obj: dict[str, Any]) -> None:
            data = b"data: " + json.dumps(obj).encode() + b"\n\n"
            writer.write(b"%x\r\n%s\r\n" % (len(data), data))

        def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
            return {"id": "chatcmpl-synthetic", "object": "chat.completion.chunk", "created": 0,
                    "model": self.config.model,
                    "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}

        grammar = json.dumps([body.get("response_format"), body.get("tools")], sort_keys=True)
        with self._lock:
            new = grammar not in self._grammars
            self._grammars.add(grammar)
            self.stats.grammars_compiled += new
        await asyncio.sleep(self.config.ttft_s + (self.config.grammar_compile_s if new else 0.0))
        for j, (a, b) in enumerate(bounds):
            piece = "".join(tokens[a:b])
            if fault == "stall" and "}" in piece and b == len(tokens):
                await writer.drain()
                await asyncio.sleep(self.config.stall_s)
            if kind == "tool":
                call: dict[str, Any] = {"index": 0, "function": {"arguments": piece}}
                if j == 0:
                    call.update(id="call_0", type="function")
                    call["function"]["name"] = name
                send(chunk({"tool_calls": [call]}))
            else:
                send(chunk({"content": piece}))
            with self._lock:
                self._count_chunk(engine, j, b - a)
            await writer.drain()
            if j + 1 < len(bounds):
                await asyncio.sleep((b - a) / self.config.rate)
        send(chunk({}, finish))
        p = len(prompt.split())
        usage = {"id": "chatcmpl-synthetic", "object": "chat.completion.chunk", "created": 0,
                 "model": self.config.model, "choices": [],
                 "usage": {"prompt_tokens": p, "completion_tokens": len(tokens),
                           "total_tokens": p + len(tokens)}}
        usage.update(self._spec_payload(body, [b - a for a, b in bounds], len(tokens)))
        send(usage)
        tail = b"data: [DONE]\n\n"
        writer.write(b"%x\r\n%s\r\n0\r\n\r\n" % (len(tail), tail))
        with self._lock:
            self._engine_counters[engine].requests += 1
            self.stats.tokens += len(tokens)
            self.stats.chunks += len(bounds)
            self.stats.streams_finished += 1
        await writer.drain()
        return True

    # ---- observability ---------------------------------------------------------------------

    def stats_json(self, raw: bool = False) -> dict[str, Any]:
        with self._lock:
            st = self.stats
            extra = {"ttft_list": list(st.ttft_s), "ttfa_list": list(st.ttfa_s),
                     "decode_list": list(st.decode_tok_s),
                     "duration_list": list(st.durations_s)}
            return {
                **(extra if raw else {}),
                "requests": st.requests,
                "streams_finished": st.streams_finished,
                "tokens": st.tokens,
                "chunks": st.chunks,
                "first_arrival": st.first_arrival,
                "last_end": st.last_end,
                "max_lag_s": st.max_lag_s,
                "ttft_p50_s": _median(st.ttft_s),
                "decode_tok_s_p50": _median(st.decode_tok_s),
                "clock": "time.monotonic",
            }

    def metrics_text(self) -> str:
        style = self.config.metrics
        model = self.config.model
        out = []
        if style == "vllm":
            def counter(name: str, attr: str, help_text: str) -> None:
                out.append(f"# HELP vllm:{name} {help_text}")
                out.append(f"# TYPE vllm:{name} counter")
                for e, c in enumerate(self._engine_counters):
                    lbl = f'engine="{e}",model_name="{model}"'
                    out.append(f"vllm:{name}_total{{{lbl}}} {float(getattr(c, attr))}")
                    out.append(f"vllm:{name}_created{{{lbl}}} {self._created}")

            counter("generation_tokens", "generation_tokens", "Number of generation tokens.")
            counter("request_success", "requests", "Count of successfully processed requests.")
            if self.config.spec_k > 0:
                counter("spec_decode_num_drafts", "drafts", "Number of spec decoding drafts.")
                counter("spec_decode_num_draft_tokens", "draft_tokens", "Number of draft tokens.")
                counter("spec_decode_num_accepted_tokens", "accepted",
                        "Number of accepted tokens.")
                out.append("# TYPE vllm:spec_decode_num_accepted_tokens_per_pos counter")
                for e, c in enumerate(self._engine_counters):
                    for p in range(self.config.spec_k):
                        v = c.per_pos[p] if p < len(c.per_pos) else 0
                        out.append('vllm:spec_decode_num_accepted_tokens_per_pos_total{'
                                   f'engine="{e}",model_name="{model}",position="{p}"}} '
                                   f"{float(v)}")
            out.append("# TYPE vllm:kv_cache_usage_perc gauge")
            out.append(f'vllm:kv_cache_usage_perc{{engine="0",model_name="{model}"}} NaN')
            # a label value with escaped quotes and a backslash, as real exporters can emit
            out.append('vllm:cache_config_info{block_size="16",'
                       'note="a \\"quoted\\" \\\\ value"} 1.0')
        elif style == "sglang":
            tot = self.counters()
            lbl = f'model_name="{model}",engine_type="unified",tp_rank="0"'
            out.append("# TYPE sglang:generation_tokens_total counter")
            out.append(f"sglang:generation_tokens_total{{{lbl}}} {float(tot.generation_tokens)}")
            out.append(f"sglang:num_requests_total{{{lbl}}} {float(tot.requests)}")
            if self.config.spec_k > 0:
                out.append(f"sglang:spec_verify_calls_total{{{lbl}}} {float(tot.verify_calls)}")
                out.append(f"sglang:spec_num_draft_tokens{{{lbl}}} {float(self.config.spec_k + 1)}")
                out.append(f"sglang:spec_accept_length{{{lbl}}} +Inf")
        return "\n".join(out) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0] if __doc__ else None)
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=8000)
    ap.add_argument("--rate", type=float, default=1000.0, help="tokens/s per stream")
    ap.add_argument("--ttft", type=float, default=0.005)
    ap.add_argument("--tokens-per-chunk", default="1", help="comma list, cycled")
    ap.add_argument("--fixed-tokens", type=int, default=None)
    ap.add_argument("--metrics", choices=["vllm", "sglang", "none"], default="vllm")
    ap.add_argument("--spec-k", type=int, default=0)
    ap.add_argument("--slots", type=int, default=None,
                    help="service-time mode: this many requests served at once, FIFO queue")
    ap.add_argument("--no-usage", action="store_true")
    ap.add_argument("--model", default="synthetic")
    ap.add_argument("--diverge-position", type=int, default=None,
                    help="greedy tokens from this position on differ (a gate that must fail)")
    ap.add_argument("--reuse-port", action="store_true",
                    help="share the port with other server processes (SO_REUSEPORT)")
    ap.add_argument("--control", action="store_true",
                    help="also serve /_stats and /_reset on a private port (printed)")
    args = ap.parse_args(argv)
    cfg = SyntheticConfig(
        model=args.model, rate=args.rate, ttft_s=args.ttft,
        tokens_per_chunk=tuple(int(x) for x in args.tokens_per_chunk.split(",")),
        fixed_tokens=args.fixed_tokens, usage=not args.no_usage, metrics=args.metrics,
        spec_k=args.spec_k, record_bodies=False, slots=args.slots,
        diverge_position=args.diverge_position,
    )
    server = SyntheticServer(cfg, args.host, args.port)

    async def announce() -> None:
        task = asyncio.ensure_future(server.serve(args.reuse_port, args.control))
        while not server._ready.is_set():
            if task.done():
                task.result()
            await asyncio.sleep(0.01)
        line = f"PORT {server.port}"
        if server.control_port is not None:
            line += f" CONTROL {server.control_port}"
        sys.stdout.write(line + "\n")
        sys.stdout.flush()
        await task

    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(announce())
    return 0


if __name__ == "__main__":
    sys.exit(main())
