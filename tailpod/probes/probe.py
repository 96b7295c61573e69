#!/usr/bin/env python3
"""tailpod probe: measure an OpenAI-compatible LLM server from the pod it runs on.

One self-contained file that uses only the Python standard library (3.8+), so it can be copied
alone to a pod whose Python has nothing else installed:

    python3 probe.py run     --base-url http://127.0.0.1:8000 --arm plain --out rows.jsonl ...
    python3 probe.py gate    --reference URL --candidate URL
    python3 probe.py metrics --base-url URL [--prefix vllm:spec_decode]
    python3 probe.py logprobs --base-url URL --prompts-file F --out F [--reference-file F]

Rows follow the tailpod results format v1 (docs/probe.md). Token counts come from the server's
`usage` only; a chunk may carry several tokens under speculative decoding, so chunks are never
counted as tokens. Progress goes to stderr, results to --out.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import http.client
import ipaddress
import json
import math
import os
import re
import socket
import ssl
import sys
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

SCHEMA_VERSION = 1
PROBE_VERSION = "1.0"
DEFAULT_BASE_URL = "http://127.0.0.1:8000"
# A cell is client-bound when the probe's own CPU time over the cell wall time reaches this
# fraction of one core: past it, timestamps are taken late and throughput is the client's.
CLIENT_BOUND_CPU_FRACTION = 0.8
# Scheduling lag above this (seconds) distorts TTFT and chunk gaps enough to be worth a flag.
LOOP_LAG_FLAG_S = 0.05
OFF_POD_FLAG = "DO NOT QUOTE AGGREGATE"
API_KEY_ENV = "TAILPOD_PROBE_API_KEY"
USER_AGENT = "tailpod-probe/" + PROBE_VERSION


def log(message: str) -> None:
    sys.stderr.write("[probe] " + message + "\n")
    sys.stderr.flush()


class ProbeError(Exception):
    """A setup problem that stops the probe (unreachable server, bad config)."""


# --------------------------------------------------------------------------------------------
# Statistics
# --------------------------------------------------------------------------------------------


def percentile(values: list[float | None], q: float) -> float | None:
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


# --------------------------------------------------------------------------------------------
# Server-sent events and HTTP/1.1 framing (hand-written: the probe may not import anything)
# --------------------------------------------------------------------------------------------


class SSEParser:
    """Incremental text/event-stream parser: bytes in, the `data` of each complete event out.

    Handles LF, CRLF and CR line ends split across reads, multi-line data, comments and
    other fields. An event still open at end of stream is dropped, as the SSE spec says.
    Payloads stay bytes (UTF-8): json.loads reads bytes directly.
    """

    __slots__ = ("_buf", "_data")

    def __init__(self) -> None:
        self._buf = b""
        self._data: list[bytes] = []

    def feed(self, chunk: bytes) -> list[bytes]:
        if (
            not self._buf
            and not self._data
            and chunk[:6] == b"data: "
            and chunk.find(b"\n") == len(chunk) - 2
            and chunk[-1:] == b"\n"
            and b"\r" not in chunk
        ):
            return [chunk[6:-2]]  # the common case: exactly one `data:` event in this read
        buf = self._buf + chunk if self._buf else chunk
        hold = b""
        if buf.endswith(b"\r"):
            hold, buf = b"\r", buf[:-1]  # may be the first half of a CRLF
        if b"\r" in buf:
            buf = buf.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
        lines = buf.split(b"\n")
        self._buf = lines.pop() + hold
        events: list[bytes] = []
        for line in lines:
            if not line:
                if self._data:
                    events.append(b"\n".join(self._data))
                    self._data = []
                continue
            if line[:5] == b"data:":
                value = line[5:]
                if value[:1] == b" ":
                    value = value[1:]
                self._data.append(value)
            elif line == b"data":
                self._data.append(b"")
            # comments (":...") and event/id/retry fields carry nothing the probe needs
        return events


class ProtocolError(Exception):
    pass


class ChunkedDecoder:
    """Transfer-Encoding: chunked, decoded incrementally."""

    __slots__ = ("_buf", "_remaining", "_state", "done")

    _SIZE, _DATA, _CRLF, _TRAILER = 0, 1, 2, 3

    def __init__(self) -> None:
        self._buf = b""
        self._remaining = 0
        self._state = self._SIZE
        self.done = False

    def feed(self, raw: bytes) -> bytes:
        if not self._buf and self._state == self._SIZE:
            # the common case: this read holds exactly one whole chunk
            idx = raw.find(b"\r\n", 0, 18)
            if idx > 0:
                try:
                    size = int(raw[:idx], 16)
                except ValueError:
                    size = -1
                end = idx + 2 + size
                if size > 0 and len(raw) == end + 2 and raw[end:] == b"\r\n":
                    return raw[idx + 2 : end]
        buf = self._buf + raw if self._buf else raw
        pos = 0
        out: list[bytes] = []
        n = len(buf)
        while not self.done:
            state = self._state
            if state == self._DATA:
                take = min(self._remaining, n - pos)
                if take <= 0:
                    break
                out.append(buf[pos : pos + take])
                pos += take
                self._remaining -= take
                if self._remaining == 0:
                    self._state = self._CRLF
                continue
            idx = buf.find(b"\n", pos)
            if idx < 0:
                if n - pos > 4096:
                    raise ProtocolError("chunk framing line too long")
                break
            line = buf[pos:idx].strip(b"\r \t")
            pos = idx + 1
            if state == self._SIZE:
                try:
                    size = int(line.split(b";", 1)[0], 16)
                except ValueError:
                    raise ProtocolError(f"bad chunk size line {line[:40]!r}") from None
                if size < 0:
                    raise ProtocolError("negative chunk size")
                if size == 0:
                    self._state = self._TRAILER
                    continue
                end = pos + size
                if buf[end : end + 2] == b"\r\n":  # whole chunk present: skip the states
                    out.append(buf[pos:end])
                    pos = end + 2
                    continue
                self._remaining = size
                self._state = self._DATA
            elif state == self._CRLF:
                if line:
                    raise ProtocolError("missing CRLF after chunk data")
                self._state = self._SIZE
            else:  # trailer section ends with an empty line
                if not line:
                    self.done = True
        self._buf = buf[pos:]
        return b"".join(out)


class HTTPResponseParser:
    """An HTTP/1.1 response, fed raw bytes; the body goes to `on_body(data, now)` when 2xx."""

    __slots__ = (
        "_head",
        "_mode",
        "_chunked",
        "_remaining",
        "_on_body",
        "status",
        "reason",
        "headers",
        "complete",
        "keep_alive",
        "bytes_received",
        "error_body",
    )

    def __init__(self, on_body: Callable[[bytes, float], None]) -> None:
        self._head = b""
        self._mode = ""  # "", "chunked", "length", "close"
        self._chunked: ChunkedDecoder | None = None
        self._remaining = 0
        self._on_body = on_body
        self.status = 0
        self.reason = ""
        self.headers: dict[str, str] = {}
        self.complete = False
        self.keep_alive = True
        self.bytes_received = 0
        self.error_body = b""

    def _deliver(self, data: bytes, now: float) -> None:
        if not data:
            return
        if 200 <= self.status < 300:
            self._on_body(data, now)
        elif len(self.error_body) < 65536:
            self.error_body += data[: 65536 - len(self.error_body)]

    def _parse_head(self, head: bytes) -> None:
        lines = head.decode("latin-1").split("\r\n") if b"\r\n" in head else head.decode(
            "latin-1"
        ).split("\n")
        parts = lines[0].split(None, 2)
        if len(parts) < 2 or not parts[0].startswith("HTTP/"):
            raise ProtocolError(f"bad status line {lines[0][:80]!r}")
        try:
            self.status = int(parts[1])
        except ValueError:
            raise ProtocolError(f"bad status code {parts[1][:20]!r}") from None
        self.reason = parts[2] if len(parts) > 2 else ""
        headers: dict[str, str] = {}
        for line in lines[1:]:
            if not line:
                continue
            key, _, value = line.partition(":")
            headers[key.strip().lower()] = value.strip()
        self.headers = headers
        conn = headers.get("connection", "").lower()
        if parts[0] == "HTTP/1.0":
            self.keep_alive = "keep-alive" in conn
        else:
            self.keep_alive = "close" not in conn
        if self.status in (204, 304) or 100 <= self.status < 200:
            self._mode = "none"
        elif "chunked" in headers.get("transfer-encoding", "").lower():
            self._mode = "chunked"
            self._chunked = ChunkedDecoder()
        elif "content-length" in headers:
            try:
                self._remaining = int(headers["content-length"])
            except ValueError:
                raise ProtocolError("bad content-length") from None
            self._mode = "length"
        else:
            self._mode = "close"
            self.keep_alive = False

    def feed(self, data: bytes, now: float) -> None:
        self.bytes_received += len(data)
        if not self._mode:
            self._head += data
            end = self._head.find(b"\r\n\r\n")
            sep = 4
            if end < 0:
                end = self._head.find(b"\n\n")
                sep = 2
            if end < 0:
                if len(self._head) > 65536:
                    raise ProtocolError("response head too large")
                return
            head, data = self._head[:end], self._head[end + sep :]
            self._head = b""
            self._parse_head(head)
            if self._mode == "none":
                if 100 <= self.status < 200:  # interim response: the real one follows
                    self._mode = ""
                    self.feed(data, now)
                    return
                self.complete = True
                return
        chunked = self._chunked
        if chunked is not None:
            body = chunked.feed(data)
            if body:
                if self.status == 200:
                    self._on_body(body, now)
                else:
                    self._deliver(body, now)
            if chunked.done:
                self.complete = True
        elif self._mode == "length":
            take = data[: self._remaining]
            self._remaining -= len(take)
            self._deliver(take, now)
            if self._remaining <= 0:
                self.complete = True
        elif self._mode == "close":
            self._deliver(data, now)

    def eof(self) -> None:
        """The peer closed; a read-until-close body is then complete, anything else is cut."""
        if self._mode == "close":
            self.complete = True


# --------------------------------------------------------------------------------------------
# One request: what it sends and what it measured
# --------------------------------------------------------------------------------------------


@dataclass
class RequestSpec:
    index: int
    path: str
    body: bytes
    cache: str  # "cold" | "warm"
    api: str  # "chat" | "completions" | "generate"


# Does a streamed chunk carry content? A JSON key cannot occur inside a JSON string (its quotes
# would be escaped), so these match only a real key whose value is a non-empty string or a
# non-empty list: the same answer as parsing the chunk and testing the fields, at a third of
# the cost. Chunks with "usage" or "error" are always parsed in full.
_CHAT_CONTENT = re.compile(
    rb'"(?:content|reasoning_content|reasoning|token_ids)"\s*:\s*(?:"(?:[^"\\]|\\.)|\[\s*[^\]\s])'
)
_TEXT_CONTENT = re.compile(rb'"(?:text|token_ids)"\s*:\s*(?:"(?:[^"\\]|\\.)|\[\s*[^\]\s])')


class StreamRecorder:
    """Timestamps and server-reported counts of one streamed response.

    TTFT is the first event that carries content (text, reasoning text or token ids);
    completion tokens come only from the server's usage (or SGLang meta_info), never from
    counting chunks, because one chunk can carry several tokens.
    """

    __slots__ = (
        "api",
        "keep_ids",
        "keep_text",
        "sse",
        "t_send",
        "t_send_wall",
        "t_first",
        "t_last",
        "t_end",
        "chunks",
        "gaps",
        "usage",
        "meta",
        "done",
        "error",
        "bad_events",
        "token_ids",
        "text",
        "timings",
        "_gen_seen",
        "_fast",
    )

    def __init__(self, api: str, keep_ids: bool = False, keep_text: bool = False) -> None:
        self.api = api
        self.keep_ids = keep_ids
        self.keep_text = keep_text
        self.sse = SSEParser()
        self.t_send = 0.0
        self.t_send_wall = 0.0
        self.t_first: float | None = None
        self.t_last: float | None = None
        self.t_end: float | None = None
        self.chunks = 0
        self.gaps: list[float] = []
        self.usage: dict[str, Any] | None = None
        self.meta: dict[str, Any] | None = None
        self.done = False
        self.error: str | None = None
        self.bad_events = 0
        self.token_ids: list[int] = []
        self.text: list[str] = []
        self.timings: dict[str, Any] | None = None  # llama.cpp: the server's own, final chunk
        self._gen_seen = 0
        self._fast: re.Pattern[bytes] | None = None
        if not keep_ids and not keep_text:
            self._fast = {"chat": _CHAT_CONTENT, "completions": _TEXT_CONTENT}.get(api)

    def start(self) -> None:
        self.t_send_wall = time.time()
        self.t_send = time.perf_counter()

    def feed(self, data: bytes, now: float) -> None:
        fast = self._fast
        for payload in self.sse.feed(data):
            if payload == b"[DONE]":
                self.done = True
                continue
            if fast is not None and b'"usage"' not in payload and b'"error"' not in payload:
                # A plain delta chunk: only "does it carry content" matters, and the pattern
                # answers that exactly (see _CHAT_CONTENT); the full parse costs ~3x more.
                if fast.search(payload) is not None:
                    self._content(now)
                continue
            try:
                obj = json.loads(payload)
            except ValueError:
                self.bad_events += 1
                continue
            if isinstance(obj, dict):
                self._event(obj, now)

    def _content(self, now: float) -> None:
        if self.t_first is None:
            self.t_first = now
        else:
            self.gaps.append(now - (self.t_last or now))
        self.t_last = now
        self.chunks += 1

    def _event(self, obj: dict[str, Any], now: float) -> None:
        if self.api == "generate":
            self._generate_event(obj, now)
            return
        err = obj.get("error")
        if err and not obj.get("choices"):
            msg = err.get("message") if isinstance(err, dict) else err
            self.error = f"server error event: {str(msg)[:300]}"
            return
        usage = obj.get("usage")
        if isinstance(usage, dict):
            self.usage = usage
        timings = obj.get("timings")
        if isinstance(timings, dict):
            self.timings = timings
        choices = obj.get("choices")
        if not choices or not isinstance(choices, list):
            return
        choice = choices[0] if isinstance(choices[0], dict) else {}
        if self.api == "chat":
            delta = choice.get("delta") or {}
            content = (
                delta.get("content") or delta.get("reasoning_content") or delta.get("reasoning")
            )
        else:
            content = choice.get("text")
        ids = choice.get("token_ids")
        if content or ids:
            self._content(now)
            if self.keep_ids and isinstance(ids, list):
                self.token_ids.extend(ids)
            if self.keep_text and isinstance(content, str):
                self.text.append(content)

    def _generate_event(self, obj: dict[str, Any], now: float) -> None:
        if "error" in obj and "meta_info" not in obj:
            self.error = "server error event: {}".format(str(obj.get("error"))[:300])
            return
        meta = obj.get("meta_info")
        if not isinstance(meta, dict):
            return
        gen = meta.get("completion_tokens")
        if isinstance(gen, int) and gen > self._gen_seen:
            self._gen_seen = gen
            self._content(now)
        if meta.get("finish_reason") is not None:
            self.meta = meta
            if isinstance(gen, int):
                self.usage = {
                    "completion_tokens": gen,
                    "prompt_tokens": meta.get("prompt_tokens"),
                }
            if self.keep_ids and isinstance(obj.get("output_ids"), list):
                self.token_ids = list(obj["output_ids"])

    def fail(self, message: str) -> None:
        if self.error is None:
            self.error = message

    def finish(self, now: float) -> None:
        self.t_end = now
        if self.error is None and not self.done:
            self.error = "stream ended before data: [DONE]"


@dataclass
class RequestResult:
    index: int
    cache: str
    ok: bool
    error: str | None
    prompt_tokens: int | None
    completion_tokens: int | None
    ttft_s: float | None
    e2e_s: float | None
    decode_tok_s: float | None
    tpot_s: float | None
    chunks: int
    chunk_gap_p50_s: float | None
    chunk_gap_max_s: float | None
    t_start: float
    flags: list[str] = field(default_factory=list)
    meta: dict[str, Any] | None = None
    server_timings: dict[str, float] | None = None
    t_send_perf: float = 0.0  # perf_counter at send and at stream end: the cell's wall clock
    t_end_perf: float = 0.0


def _int_or_none(value: Any) -> int | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return int(value)


# llama-server's per-request `timings` (tools/server/server-common.cpp `server_slot_stats::to_json`
# in ggml-org/llama.cpp @ 0c1e57098): prompt_ms runs from the slot taking the request to the
# first token; predicted_per_second is (predicted_n - 1) / (last token - first token), the
# same definition as this probe's decode_tok_s.
SERVER_TIMING_KEYS = ("prompt_n", "prompt_ms", "cache_n", "predicted_n", "predicted_ms",
                      "predicted_per_second", "draft_n", "draft_n_accepted")  # fmt: skip


def server_timings(timings: dict[str, Any] | None) -> dict[str, float] | None:
    """The numeric fields of a server's `timings` that the probe keeps; None when it sent none."""
    if not isinstance(timings, dict):
        return None
    kept = {k: timings[k] for k in SERVER_TIMING_KEYS
            if isinstance(timings.get(k), (int, float)) and not isinstance(timings[k], bool)}  # fmt: skip
    return {k: v for k, v in kept.items() if math.isfinite(v)} or None


def result_from_recorder(spec: RequestSpec, rec: StreamRecorder) -> RequestResult:
    ok = rec.error is None
    flags: list[str] = []
    usage = rec.usage or {}
    completion = _int_or_none(usage.get("completion_tokens")) if rec.usage else None
    prompt = _int_or_none(usage.get("prompt_tokens")) if rec.usage else None
    if ok and completion is None:
        flags.append("no_usage")  # never estimated from chunks
    ttft = e2e = decode = tpot = None
    if rec.t_first is not None:
        ttft = rec.t_first - rec.t_send
        e2e = (rec.t_last or rec.t_first) - rec.t_send
    if ok and completion is not None and completion > 1 and rec.t_first is not None:
        span = (rec.t_last or rec.t_first) - rec.t_first
        if span > 0:
            decode = (completion - 1) / span
        if e2e is not None and ttft is not None:
            tpot = (e2e - ttft) / (completion - 1)
    return RequestResult(
        index=spec.index,
        cache=spec.cache,
        ok=ok,
        error=rec.error,
        prompt_tokens=prompt,
        completion_tokens=completion,
        ttft_s=ttft,
        e2e_s=e2e,
        decode_tok_s=decode,
        tpot_s=tpot,
        chunks=rec.chunks,
        chunk_gap_p50_s=percentile(list(rec.gaps), 50),
        chunk_gap_max_s=max(rec.gaps) if rec.gaps else None,
        t_start=rec.t_send_wall,
        flags=flags,
        meta=rec.meta,
        server_timings=server_timings(rec.timings),
        t_send_perf=rec.t_send,
        t_end_perf=rec.t_end if rec.t_end is not None else rec.t_send,
    )


# --------------------------------------------------------------------------------------------
# Endpoints
# --------------------------------------------------------------------------------------------


@dataclass
class Endpoint:
    scheme: str
    host: str
    port: int
    base_path: str

    @classmethod
    def parse(cls, url: str) -> Endpoint:
        parts = urlsplit(url if "://" in url else "http://" + url)
        if parts.scheme not in ("http", "https"):
            raise ProbeError(f"base URL must be http:// or https://, got {url!r}")
        if not parts.hostname:
            raise ProbeError(f"base URL has no host: {url!r}")
        port = parts.port or (443 if parts.scheme == "https" else 80)
        return cls(parts.scheme, parts.hostname, port, parts.path.rstrip("/"))

    def path(self, suffix: str) -> str:
        return self.base_path + suffix

    def ssl_context(self) -> ssl.SSLContext | None:
        return ssl.create_default_context() if self.scheme == "https" else None

    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{self.scheme}://{host}:{self.port}{self.base_path}"


def is_loopback_host(host: str) -> bool:
    """True when every address the host names is loopback (127.0.0.0/8, ::1, localhost)."""
    h = host.strip("[]").lower()
    if h == "localhost" or h.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(h).is_loopback
    except ValueError:
        pass
    try:
        infos = socket.getaddrinfo(h, None)
    except OSError:
        return False
    addrs = {str(info[4][0]) for info in infos}
    try:
        return bool(addrs) and all(ipaddress.ip_address(a.split("%")[0]).is_loopback for a in addrs)
    except ValueError:
        return False


def measured_from(base_url: str) -> str:
    return "pod" if is_loopback_host(Endpoint.parse(base_url).host) else "off-pod"


def _auth_headers() -> dict[str, str]:
    key = os.environ.get(API_KEY_ENV)
    return {"Authorization": "Bearer " + key} if key else {}


def _scrub(text: str) -> str:
    key = os.environ.get(API_KEY_ENV)
    return text.replace(key, "***") if key else text


def http_request(
    ep: Endpoint,
    method: str,
    path: str,
    body: Any = None,
    timeout: float = 30.0,
) -> tuple[int, bytes]:
    """A small synchronous request (metrics, model list, gate); returns (status, body)."""
    conn = _new_connection(ep, timeout)
    headers = {"User-Agent": USER_AGENT, "Accept": "*/*"}
    headers.update(_auth_headers())
    payload = None
    if body is not None:
        payload = json.dumps(body).encode()
        headers["Content-Type"] = "application/json"
    try:
        conn.request(method, ep.path(path), body=payload, headers=headers)
        resp = conn.getresponse()
        return resp.status, resp.read()
    finally:
        conn.close()


def scrape_metrics(ep: Endpoint, timeout: float = 10.0) -> list[Sample] | None:
    """Parsed /metrics, or None when the server has none (404) or cannot be read."""
    try:
        status, data = http_request(ep, "GET", "/metrics", timeout=timeout)
    except (OSError, http.client.HTTPException):
        return None
    if status != 200:
        return None
    return parse_prometheus(data.decode("utf-8", "replace"))


def detect_engine(samples: list[Sample] | None) -> str:
    if not samples:
        return "none"
    names = {s.name.split(":", 1)[0] for s in samples if ":" in s.name}
    if "vllm" in names:
        return "vllm"
    if "sglang" in names:
        return "sglang"
    return "none"


def discover_model(ep: Endpoint, timeout: float = 30.0) -> str:
    try:
        status, data = http_request(ep, "GET", "/v1/models", timeout=timeout)
    except (OSError, http.client.HTTPException) as exc:
        raise ProbeError(f"cannot reach {ep.url()}/v1/models: {exc}") from None
    if status != 200:
        raise ProbeError(f"{ep.url()}/v1/models answered HTTP {status}; pass --model")
    try:
        return str(json.loads(data)["data"][0]["id"])
    except (ValueError, KeyError, IndexError, TypeError):
        raise ProbeError(f"{ep.url()}/v1/models lists no model; pass --model") from None


# --------------------------------------------------------------------------------------------
# Transport A: asyncio protocol over raw TCP, hand-rolled HTTP/1.1 (the default)
# --------------------------------------------------------------------------------------------


class _ConnProtocol(asyncio.Protocol):
    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.transport: asyncio.Transport | None = None
        self.parser: HTTPResponseParser | None = None
        self.waiter: asyncio.Future[None] | None = None
        self.closed = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        parser = self.parser
        if parser is None:
            return
        try:
            parser.feed(data, time.perf_counter())
        except Exception as exc:  # noqa: BLE001 - any parse fault fails this request only
            self._finish(exc if isinstance(exc, ProtocolError) else ProtocolError(repr(exc)))
            if self.transport is not None:
                self.transport.close()
            return
        if parser.complete:
            self._finish(None)

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        parser = self.parser
        if parser is not None and not parser.complete:
            parser.eof()
            if parser.complete:
                self._finish(None)
            elif parser.bytes_received == 0:
                self._finish(ConnectionResetError("connection closed before any response"))
            else:
                self._finish(ConnectionResetError("connection closed mid-response"))

    def _finish(self, exc: Exception | None) -> None:
        waiter = self.waiter
        if waiter is not None and not waiter.done():
            if exc is None:
                waiter.set_result(None)
            else:
                waiter.set_exception(exc)


class AsyncConnection:
    """One keep-alive connection, reused by one worker for consecutive requests."""

    def __init__(self, ep: Endpoint, extra_headers: dict[str, str]) -> None:
        self.ep = ep
        self.proto: _ConnProtocol | None = None
        hdrs = {
            "Host": f"{ep.host}:{ep.port}",
            "User-Agent": USER_AGENT,
            "Accept": "text/event-stream",
            "Content-Type": "application/json",
        }
        hdrs.update(extra_headers)
        self._header_block = "".join("{}: {}\r\n".format(*kv) for kv in hdrs.items())

    async def _connect(self) -> _ConnProtocol:
        loop = asyncio.get_running_loop()
        _, proto = await loop.create_connection(
            lambda: _ConnProtocol(loop), self.ep.host, self.ep.port, ssl=self.ep.ssl_context()
        )
        return proto

    async def open(self, timeout: float) -> None:
        """Connect ahead of the first request (a failure here resurfaces on that request)."""
        with contextlib.suppress(OSError, asyncio.TimeoutError, ssl.SSLError):
            self.proto = await asyncio.wait_for(self._connect(), timeout)

    def close(self) -> None:
        if self.proto is not None and self.proto.transport is not None:
            self.proto.transport.close()
        self.proto = None

    async def exchange(self, spec: RequestSpec, rec: StreamRecorder, timeout: float) -> None:
        head = (
            f"POST {spec.path} HTTP/1.1\r\n{self._header_block}"
            f"Content-Length: {len(spec.body)}\r\n\r\n"
        )
        payload = head.encode("latin-1") + spec.body
        for attempt in (0, 1):
            reused = self.proto is not None and not self.proto.closed
            if not reused:
                self.close()
                self.proto = await asyncio.wait_for(self._connect(), timeout)
            proto = self.proto
            assert proto is not None and proto.transport is not None
            parser = HTTPResponseParser(rec.feed)
            fut: asyncio.Future[None] = proto.loop.create_future()
            proto.parser, proto.waiter = parser, fut
            if attempt == 1:
                rec.start()  # the first try never reached the server: time the retry
            proto.transport.write(payload)
            try:
                await asyncio.wait_for(fut, timeout)
            except ConnectionResetError:
                proto.parser = proto.waiter = None
                self.close()
                # a stale keep-alive connection: retry once, only if nothing came back
                if reused and parser.bytes_received == 0 and attempt == 0:
                    continue
                raise
            except BaseException:
                proto.parser = proto.waiter = None
                self.close()
                raise
            proto.parser = proto.waiter = None
            if not parser.keep_alive:
                self.close()
            if not (200 <= parser.status < 300):
                snippet = parser.error_body[:300].decode("utf-8", "replace")
                rec.fail(f"HTTP {parser.status}: {snippet.strip()}")
            return


class LagMonitor:
    """How late a 10 ms timer fires: the probe's own scheduling lag (event loop or GIL)."""

    INTERVAL = 0.01

    def __init__(self) -> None:
        self.max_lag = 0.0
        self._stop = threading.Event()

    async def run_async(self) -> None:
        while not self._stop.is_set():
            t = time.perf_counter()
            await asyncio.sleep(self.INTERVAL)
            self.max_lag = max(self.max_lag, time.perf_counter() - t - self.INTERVAL)

    def run_thread(self) -> None:
        while not self._stop.is_set():
            t = time.perf_counter()
            time.sleep(self.INTERVAL)
            self.max_lag = max(self.max_lag, time.perf_counter() - t - self.INTERVAL)

    def stop(self) -> None:
        self._stop.set()


@dataclass
class LoopOutcome:
    results: list[RequestResult]
    wall_s: float
    cpu_s: float
    loop_lag_max_s: float | None


def _outcome(
    results: list[RequestResult | None], t0: float, t1: float, cpu_s: float, lag: float
) -> LoopOutcome:
    """The cell's wall time runs from its first request sent to its last stream ended (not
    from before the connections were opened), so it compares with what the server saw."""
    done = [r for r in results if r is not None]
    if done:
        t0 = min(r.t_send_perf for r in done)
        t1 = max(r.t_end_perf for r in done)
    return LoopOutcome(done, max(0.0, t1 - t0), cpu_s, lag)


async def _run_async(
    ep: Endpoint, specs: list[RequestSpec], concurrency: int, timeout: float, api: str
) -> LoopOutcome:
    results: list[RequestResult | None] = [None] * len(specs)
    cursor = [0]
    headers = _auth_headers()
    n_workers = max(1, min(concurrency, len(specs)))
    connected = [0]
    all_connected = asyncio.Event()

    async def worker() -> None:
        conn = AsyncConnection(ep, headers)
        try:
            # Every worker connects first and they start together: the cell measures
            # requests, not a storm of connection set-ups ahead of the first wave.
            await conn.open(timeout)
            connected[0] += 1
            if connected[0] == n_workers:
                all_connected.set()
            await all_connected.wait()
            while cursor[0] < len(specs):
                spec = specs[cursor[0]]
                cursor[0] += 1
                rec = StreamRecorder(api)
                rec.start()
                try:
                    await conn.exchange(spec, rec, timeout)
                except asyncio.TimeoutError:
                    rec.fail(f"timeout after {timeout:.0f} s")
                except (OSError, ProtocolError, ssl.SSLError) as exc:
                    rec.fail(_scrub(f"{type(exc).__name__}: {exc}"))
                rec.finish(time.perf_counter())
                results[spec.index] = result_from_recorder(spec, rec)
        finally:
            conn.close()

    monitor = LagMonitor()
    mon_task = asyncio.ensure_future(monitor.run_async())
    cpu0, t0 = time.process_time(), time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(n_workers)))
    t1, cpu1 = time.perf_counter(), time.process_time()
    monitor.stop()
    mon_task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await mon_task
    return _outcome(results, t0, t1, cpu1 - cpu0, monitor.max_lag)


def run_loop_asyncio(
    ep: Endpoint, specs: list[RequestSpec], concurrency: int, timeout: float, api: str
) -> LoopOutcome:
    return asyncio.run(_run_async(ep, specs, concurrency, timeout, api))


# --------------------------------------------------------------------------------------------
# Transport B: http.client in threads (kept for comparison; see docs/probe.md)
# --------------------------------------------------------------------------------------------


def _new_connection(ep: Endpoint, timeout: float) -> http.client.HTTPConnection:
    if ep.scheme == "https":
        return http.client.HTTPSConnection(
            ep.host, ep.port, timeout=timeout, context=ep.ssl_context()
        )
    return http.client.HTTPConnection(ep.host, ep.port, timeout=timeout)


def _thread_exchange(
    conn_box: list[http.client.HTTPConnection | None],
    ep: Endpoint,
    spec: RequestSpec,
    rec: StreamRecorder,
    headers: dict[str, str],
    timeout: float,
) -> None:
    deadline = rec.t_send + timeout
    for attempt in (0, 1):
        reused = conn_box[0] is not None
        conn = conn_box[0] or _new_connection(ep, timeout)
        conn_box[0] = conn
        try:
            if attempt == 1:
                rec.start()
            conn.request("POST", spec.path, body=spec.body, headers=headers)
            resp = conn.getresponse()
        except (http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError):
            conn.close()
            conn_box[0] = None
            if reused and attempt == 0:
                continue
            raise
        break
    else:  # pragma: no cover - the second attempt either breaks or raises
        raise AssertionError("unreachable")
    if resp.status < 200 or resp.status >= 300:
        body = resp.read(65536)
        snippet = body[:300].decode("utf-8", "replace").strip()
        rec.fail(f"HTTP {resp.status}: {snippet}")
        conn.close()
        conn_box[0] = None
        return
    while True:
        data = resp.read1(65536)
        if not data:
            break
        rec.feed(data, time.perf_counter())
        if time.perf_counter() > deadline:
            raise TimeoutError(f"timeout after {timeout:.0f} s")
    if resp.will_close:
        conn.close()
        conn_box[0] = None


def run_loop_threads(
    ep: Endpoint, specs: list[RequestSpec], concurrency: int, timeout: float, api: str
) -> LoopOutcome:
    results: list[RequestResult | None] = [None] * len(specs)
    lock = threading.Lock()
    cursor = [0]
    headers = {"User-Agent": USER_AGENT, "Accept": "text/event-stream",
               "Content-Type": "application/json"}
    headers.update(_auth_headers())

    n = max(1, min(concurrency, len(specs)))
    barrier = threading.Barrier(n)

    def worker() -> None:
        first = _new_connection(ep, timeout)
        box: list[http.client.HTTPConnection | None] = [first]
        try:
            try:  # connect ahead, then start together (as the asyncio transport does)
                first.connect()
            except OSError:
                box[0] = None  # the first request reconnects and records any failure
            with contextlib.suppress(threading.BrokenBarrierError):
                barrier.wait(timeout)
            while True:
                with lock:
                    if cursor[0] >= len(specs):
                        return
                    spec = specs[cursor[0]]
                    cursor[0] += 1
                rec = StreamRecorder(api)
                rec.start()
                try:
                    _thread_exchange(box, ep, spec, rec, headers, timeout)
                except (OSError, http.client.HTTPException, ProtocolError) as exc:
                    rec.fail(_scrub(f"{type(exc).__name__}: {exc}"))
                    if box[0] is not None:
                        box[0].close()
                        box[0] = None
                rec.finish(time.perf_counter())
                results[spec.index] = result_from_recorder(spec, rec)
        finally:
            if box[0] is not None:
                box[0].close()

    monitor = LagMonitor()
    mon = threading.Thread(target=monitor.run_thread, daemon=True)
    mon.start()
    threads = [threading.Thread(target=worker, daemon=True) for _ in range(n)]
    cpu0, t0 = time.process_time(), time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    t1, cpu1 = time.perf_counter(), time.process_time()
    monitor.stop()
    mon.join()
    return _outcome(results, t0, t1, cpu1 - cpu0, monitor.max_lag)


TRANSPORTS: dict[str, Callable[..., LoopOutcome]] = {
    "asyncio": run_loop_asyncio,
    "threads": run_loop_threads,
}
DEFAULT_TRANSPORT = "asyncio"


# --------------------------------------------------------------------------------------------
# Prompt classes
# --------------------------------------------------------------------------------------------

# Identical to the JSON files in prompts/ beside this file (a test keeps them equal), so a
# probe copied alone to a pod measures the same prompts under the same class names.
BUILTIN_PROMPT_CLASSES: dict[str, dict[str, Any]] = {
    "prose": {
        "schema_version": 1,
        "name": "prose",
        "description": "Open-ended English prose: explanations and short essays.",
        "ignore_eos": None,
        "response_format": None,
        "prompts": [
            {"id": "prose-01", "messages": [{"role": "user", "content": "Explain to a new hire why a lighthouse keeper's logbook mattered, and what kinds of entries it held. Write several paragraphs."}]},  # noqa: E501
            {"id": "prose-02", "messages": [{"role": "user", "content": "Describe a walk through a market town on a rainy morning, paying attention to sounds and smells. Keep going for several paragraphs."}]},  # noqa: E501
            {"id": "prose-03", "messages": [{"role": "user", "content": "Write a short essay on why bridges are inspected on a schedule rather than only after something goes wrong."}]},  # noqa: E501
            {"id": "prose-04", "messages": [{"role": "user", "content": "Tell the story of a small bakery that changes hands three times over fifty years, one paragraph per owner."}]},  # noqa: E501
        ],
    },
    "code": {
        "schema_version": 1,
        "name": "code",
        "description": "Program text: write or extend Python functions.",
        "ignore_eos": None,
        "response_format": None,
        "prompts": [
            {"id": "code-01", "messages": [{"role": "user", "content": "Write a Python module with a class RingBuffer(capacity) supporting append, extend, __len__, __iter__ and a method latest(n). Include docstrings and a few doctest examples."}]},  # noqa: E501
            {"id": "code-02", "messages": [{"role": "user", "content": "Write a Python function that parses an INI-style configuration string into a dict of sections, handling comments, blank lines and continuation lines. Then write unit tests for it."}]},  # noqa: E501
            {"id": "code-03", "messages": [{"role": "user", "content": "Implement Dijkstra's shortest path in Python over an adjacency-list graph, returning both distances and the path to a target node. Explain each step in comments."}]},  # noqa: E501
            {"id": "code-04", "messages": [{"role": "user", "content": "Write a command-line tool in Python using argparse that counts words, lines and characters in files given as arguments, like wc, with a --json output option."}]},  # noqa: E501
        ],
    },
    "structured": {
        "schema_version": 1,
        "name": "structured",
        "description": "JSON constrained by response_format json_schema (a product catalogue).",
        "ignore_eos": False,
        "response_format": {
            "type": "json_schema",
            "json_schema": {
                "name": "catalogue",
                "strict": True,
                "schema": {
                    "type": "object",
                    "properties": {
                        "items": {
                            "type": "array",
                            "items": {
                                "type": "object",
                                "properties": {
                                    "sku": {"type": "string"},
                                    "name": {"type": "string"},
                                    "price": {"type": "number"},
                                    "tags": {"type": "array", "items": {"type": "string"}},
                                    "in_stock": {"type": "boolean"},
                                },
                                "required": ["sku", "name", "price", "tags", "in_stock"],
                                "additionalProperties": False,
                            },
                        }
                    },
                    "required": ["items"],
                    "additionalProperties": False,
                },
            },
        },
        "prompts": [
            {"id": "structured-01", "messages": [{"role": "user", "content": "List twelve items a hardware shop might sell, as a JSON catalogue with sku, name, price, tags and in_stock for each."}]},  # noqa: E501
            {"id": "structured-02", "messages": [{"role": "user", "content": "Produce a JSON catalogue of ten kitchen utensils with realistic prices and two or three tags each."}]},  # noqa: E501
            {"id": "structured-03", "messages": [{"role": "user", "content": "Return a JSON catalogue of fifteen books for a second-hand bookshop; use the tags for genre and condition."}]},  # noqa: E501
            {"id": "structured-04", "messages": [{"role": "user", "content": "Give a JSON catalogue of eight bicycles and parts, marking some as out of stock."}]},  # noqa: E501
        ],
    },
}

# Fixed prompts for the token-identity gate: short, varied, and deterministic under greedy.
GATE_PROMPTS: list[dict[str, Any]] = [
    {"messages": [{"role": "user", "content": "Count from one to thirty in words, separated by commas."}]},  # noqa: E501
    {"messages": [{"role": "user", "content": "Write a Python function that returns the n-th Fibonacci number iteratively."}]},  # noqa: E501
    {"messages": [{"role": "user", "content": "Describe the water cycle in four sentences."}]},
    {"messages": [{"role": "user", "content": "Translate 'the cat sleeps on the warm stone' into French, German and Spanish."}]},  # noqa: E501
    {"messages": [{"role": "user", "content": "Give a JSON object with keys city, country and population for three capital cities."}]},  # noqa: E501
    {"messages": [{"role": "user", "content": "List the steps to replace a bicycle inner tube."}]},
]


def load_prompt_classes(
    prompts_dir: str | None, names: list[str] | None
) -> dict[str, dict[str, Any]]:
    """Prompt classes from `prompts_dir` (one JSON per class), else the built-in copies."""
    classes: dict[str, dict[str, Any]] = {}
    if prompts_dir and os.path.isdir(prompts_dir):
        for fname in sorted(os.listdir(prompts_dir)):
            if not fname.endswith(".json"):
                continue
            with open(os.path.join(prompts_dir, fname), encoding="utf-8") as fh:
                data = json.load(fh)
            if not isinstance(data, dict) or not data.get("prompts"):
                raise ProbeError(f"prompt file {fname} has no prompts")
            classes[str(data.get("name") or fname[:-5])] = data
    elif prompts_dir:
        raise ProbeError(f"prompts directory {prompts_dir} does not exist")
    else:
        classes = json.loads(json.dumps(BUILTIN_PROMPT_CLASSES))
    if names:
        missing = [n for n in names if n not in classes]
        if missing:
            raise ProbeError(
                "unknown prompt class {} (have: {})".format(", ".join(missing), ", ".join(classes))
            )
        classes = {n: classes[n] for n in names}
    return classes


def default_prompts_dir() -> str | None:
    here = os.path.join(os.path.dirname(os.path.abspath(__file__)), "prompts")
    return here if os.path.isdir(here) else None


def prompt_text(messages: list[dict[str, Any]]) -> str:
    return "\n".join(str(m.get("content", "")) for m in messages)


# --------------------------------------------------------------------------------------------
# The sweep
# --------------------------------------------------------------------------------------------


@dataclass
class RunOptions:
    base_url: str = DEFAULT_BASE_URL
    model: str | None = None
    arm: str = "default"
    run_id: str | None = None
    concurrency: list[int] = field(default_factory=lambda: [1])
    reps: int = 1
    requests_per_cell: int = 16
    max_tokens: int = 256
    ignore_eos: bool = True
    temperature: float = 0.0
    prompt_classes: list[str] | None = None
    prompts_dir: str | None = None
    warmup: int = 1
    cache: str = "cold"  # cold | warm | both
    engine: str = "auto"  # auto | vllm | sglang | none
    api: str = "chat"  # chat | completions | generate (SGLang native)
    out: str = "-"
    transport: str = DEFAULT_TRANSPORT
    request_timeout: float = 600.0
    client_bound_threshold: float = CLIENT_BOUND_CPU_FRACTION


def new_salt(run_id: str) -> str:
    return f"tailpod-{run_id}-{uuid.uuid4().hex}"


def build_body(
    opts: RunOptions,
    model: str,
    pclass: dict[str, Any],
    prompt: dict[str, Any],
    salt: str | None,
    max_tokens: int | None = None,
) -> tuple[str, bytes]:
    """Path and JSON body of one streamed request."""
    mt = max_tokens if max_tokens is not None else opts.max_tokens
    ignore_eos = opts.ignore_eos if pclass.get("ignore_eos") is None else bool(pclass["ignore_eos"])
    messages = prompt["messages"]
    body: dict[str, Any]
    if opts.api == "generate":
        sampling: dict[str, Any] = {
            "max_new_tokens": mt,
            "temperature": opts.temperature,
            "ignore_eos": ignore_eos,
        }
        if pclass.get("response_format"):
            schema = pclass["response_format"].get("json_schema", {}).get("schema")
            if schema is not None:
                sampling["json_schema"] = json.dumps(schema)
        body = {"text": prompt_text(messages), "sampling_params": sampling, "stream": True}
        if salt:
            body["extra_key"] = salt
        return "/generate", json.dumps(body).encode()
    body = {
        "model": model,
        "max_tokens": mt,
        "temperature": opts.temperature,
        "stream": True,
        "stream_options": {"include_usage": True},
        "ignore_eos": ignore_eos,
    }
    if opts.api == "chat":
        body["messages"] = messages
        path = "/v1/chat/completions"
    else:
        body["prompt"] = prompt_text(messages)
        path = "/v1/completions"
    if pclass.get("response_format"):
        body["response_format"] = pclass["response_format"]
    if salt:
        body["cache_salt"] = salt
    return path, json.dumps(body).encode()


@dataclass
class CellPlan:
    arm: str
    concurrency: int
    rep: int
    prompt_class: str
    cache: str

    @property
    def cell(self) -> str:
        base = f"{self.arm}|c{self.concurrency}|r{self.rep}|{self.prompt_class}"
        return base + ("|warm" if self.cache == "warm" else "")


class RowWriter:
    def __init__(self, path: str) -> None:
        self.path = path
        self._fh = sys.stdout if path == "-" else open(path, "a", encoding="utf-8")  # noqa: SIM115

    def write(self, row: dict[str, Any]) -> None:
        self._fh.write(json.dumps(row, allow_nan=False, sort_keys=False) + "\n")
        self._fh.flush()

    def close(self) -> None:
        if self._fh is not sys.stdout:
            self._fh.close()


def request_row(run_id: str, plan: CellPlan, r: RequestResult, where: str) -> dict[str, Any]:
    return {
        "kind": "request",
        "schema_version": SCHEMA_VERSION,
        "run_id": run_id,
        "arm": plan.arm,
        "concurrency": plan.concurrency,
        "rep": plan.rep,
        "prompt_class": plan.prompt_class,
        "cell": plan.cell,
        "index": r.index,
        "ok": r.ok,
        "error": r.error,
        "cache": r.cache,
        "prompt_tokens": r.prompt_tokens,
        "completion_tokens": r.completion_tokens,
        "ttft_s": _finite_or_none(r.ttft_s),
        "e2e_s": _finite_or_none(r.e2e_s),
        "decode_tok_s": _finite_or_none(r.decode_tok_s),
        "tpot_s": _finite_or_none(r.tpot_s),
        "chunks": r.chunks,
        "chunk_gap_p50_s": _finite_or_none(r.chunk_gap_p50_s),
        "chunk_gap_max_s": _finite_or_none(r.chunk_gap_max_s),
        "t_start": r.t_start,
        "measured_from": where,
        "flags": list(r.flags),
        **({"server_timings": r.server_timings} if r.server_timings else {}),
    }


def cell_row(
    run_id: str,
    plan: CellPlan,
    outcome: LoopOutcome,
    acceptance: dict[str, Any] | None,
    extra_flags: list[str],
    where: str,
    threshold: float,
) -> dict[str, Any]:
    """Aggregate one cell. Failed requests are counted, flagged, and left out of latency stats."""
    results = outcome.results
    ok = [r for r in results if r.ok]
    failed = len(results) - len(ok)
    tokens = sum(r.completion_tokens or 0 for r in ok)
    wall = outcome.wall_s
    flags: list[str] = []
    if failed:
        flags.append("failures")
    if any("no_usage" in r.flags for r in ok):
        flags.append("no_usage")  # output_tokens is then a lower bound
    cpu_frac = outcome.cpu_s / wall if wall > 0 else 0.0
    client_bound = cpu_frac >= threshold
    if client_bound:
        flags.append("client_bound")
    if outcome.loop_lag_max_s is not None and outcome.loop_lag_max_s > LOOP_LAG_FLAG_S:
        flags.append("loop_lag")
    for f in extra_flags:
        if f not in flags:
            flags.append(f)
    if where != "pod":
        flags.append(OFF_POD_FLAG)

    def col(name: str) -> list[float | None]:
        return [getattr(r, name) for r in ok]

    def p(name: str, q: float) -> float | None:
        return _finite_or_none(percentile(col(name), q))

    return {
        "kind": "cell",
        "schema_version": SCHEMA_VERSION,
        "run_id": run_id,
        "arm": plan.arm,
        "concurrency": plan.concurrency,
        "rep": plan.rep,
        "prompt_class": plan.prompt_class,
        "cell": plan.cell,
        "cache": plan.cache,
        "requests": len(results),
        "failed": failed,
        "wall_s": wall,
        "output_tokens": tokens,
        "output_tok_s": tokens / wall if wall > 0 else 0.0,
        "ttft_p50_s": p("ttft_s", 50),
        "ttft_p90_s": p("ttft_s", 90),
        "ttft_p99_s": p("ttft_s", 99),
        "e2e_p50_s": p("e2e_s", 50),
        "e2e_p90_s": p("e2e_s", 90),
        "e2e_p99_s": p("e2e_s", 99),
        "decode_tok_s_p50": p("decode_tok_s", 50),
        "tpot_p50_s": p("tpot_s", 50),
        "client_cpu_s": outcome.cpu_s,
        "loop_lag_max_s": outcome.loop_lag_max_s,
        "client_bound": client_bound,
        "acceptance": acceptance,
        "flags": flags,
        "void": False,
        "measured_from": where,
    }


def _quiet_snapshot(ep: Endpoint, engine: str) -> dict[str, Any]:
    """Scrape before a cell, once the counters stop moving (up to ~1 s): the warm-up's last
    tokens may reach the engine's stat logger after its response did."""
    snap = spec_snapshot(scrape_metrics(ep) or [], engine)
    for _ in range(10):
        time.sleep(0.1)
        again = spec_snapshot(scrape_metrics(ep) or [], engine)
        if again == snap:
            break
        snap = again
    return snap


def _settled_after(
    ep: Endpoint, engine: str, before: dict[str, Any], expected_tokens: int | None
) -> dict[str, Any]:
    """Scrape after a cell; if the generation counter still trails the tokens the server
    reported in usage, give its stat logger up to ~1 s to catch up."""
    after: dict[str, Any] = {}
    for _ in range(6):
        samples = scrape_metrics(ep)
        after = spec_snapshot(samples or [], engine)
        gen = _delta(before, after, "generation_tokens")
        if expected_tokens is None or gen is None or gen >= expected_tokens:
            break
        time.sleep(0.2)
    return after


def run_cell(
    opts: RunOptions,
    ep: Endpoint,
    model: str,
    engine: str,
    run_id: str,
    plan: CellPlan,
    pclass: dict[str, Any],
    where: str,
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    loop_fn = TRANSPORTS[opts.transport]
    prompts = pclass["prompts"]
    # Warm-up (never counted): cold cells warm the engine with salted requests; warm cells
    # prime each prompt once without salt so the measured repeats hit the prefix cache.
    warm_specs: list[RequestSpec] = []
    if plan.cache == "warm":
        for i, pr in enumerate(prompts[: opts.requests_per_cell]):
            path, body = build_body(opts, model, pclass, pr, None)
            warm_specs.append(RequestSpec(i, path, body, "warm", opts.api))
    else:
        for i in range(opts.warmup):
            prompt = prompts[i % len(prompts)]
            path, body = build_body(opts, model, pclass, prompt, new_salt(run_id))
            warm_specs.append(RequestSpec(i, path, body, "cold", opts.api))
    if warm_specs:
        warm = loop_fn(ep, warm_specs, 1, opts.request_timeout, opts.api)
        bad = [r for r in warm.results if not r.ok]
        if bad:
            log(f"warning: {len(bad)} warm-up request(s) failed in {plan.cell}: {bad[0].error}")

    specs: list[RequestSpec] = []
    for i in range(opts.requests_per_cell):
        pr = prompts[i % len(prompts)]
        salt = new_salt(run_id) if plan.cache == "cold" else None
        path, body = build_body(opts, model, pclass, pr, salt)
        specs.append(RequestSpec(i, path, body, plan.cache, opts.api))

    before: dict[str, Any] = {}
    if engine in ("vllm", "sglang"):
        before = _quiet_snapshot(ep, engine)
    outcome = loop_fn(ep, specs, plan.concurrency, opts.request_timeout, opts.api)

    ok = [r for r in outcome.results if r.ok]
    clean = len(ok) == len(outcome.results) and all(r.completion_tokens is not None for r in ok)
    usage_tokens = sum(r.completion_tokens or 0 for r in ok)
    acceptance: dict[str, Any] | None = None
    flags: list[str] = []
    if opts.api == "generate":
        acceptance = acceptance_from_sglang_meta([r.meta for r in ok if r.meta])
    elif engine in ("vllm", "sglang"):
        after = _settled_after(ep, engine, before, usage_tokens if clean else None)
        if engine == "vllm":
            acceptance, flags = acceptance_from_vllm(before, after)
        else:
            acceptance, flags = acceptance_from_sglang_metrics(before, after, len(ok))
        gen = _delta(before, after, "generation_tokens")
        if acceptance is not None and clean and gen is not None and int(gen) != usage_tokens:
            # other traffic (or a lagging counter) shares the window: acceptance is suspect
            flags.append("acceptance_window_mismatch")
    rows = [request_row(run_id, plan, r, where) for r in outcome.results]
    return rows, cell_row(
        run_id, plan, outcome, acceptance, flags, where, opts.client_bound_threshold
    )


def default_run_id() -> str:
    return time.strftime("%Y%m%dT%H%M%SZ", time.gmtime()) + "-" + uuid.uuid4().hex[:6]


def run_sweep(opts: RunOptions) -> int:
    if opts.transport not in TRANSPORTS:
        raise ProbeError(f"unknown transport {opts.transport!r}")
    if opts.cache not in ("cold", "warm", "both"):
        raise ProbeError("--cache must be cold, warm or both")
    if opts.api not in ("chat", "completions", "generate"):
        raise ProbeError("--api must be chat, completions or generate")
    ep = Endpoint.parse(opts.base_url)
    where = measured_from(opts.base_url)
    run_id = opts.run_id or default_run_id()
    classes = load_prompt_classes(opts.prompts_dir or default_prompts_dir(), opts.prompt_classes)
    if opts.prompts_dir is None and default_prompts_dir() is None:
        log("prompts/ not found beside probe.py: using the built-in prompt classes")
    model = opts.model or ("default" if opts.api == "generate" else discover_model(ep))
    engine = opts.engine
    if engine == "auto":
        engine = detect_engine(scrape_metrics(ep))
    if where != "pod":
        log(f"base URL is not loopback: rows are stamped off-pod / '{OFF_POD_FLAG}'")
    caches = ["cold", "warm"] if opts.cache == "both" else [opts.cache]
    log(
        f"run {run_id} arm={opts.arm} model={model} engine={engine} "
        f"transport={opts.transport} classes={','.join(classes)} "
        f"c={','.join(map(str, opts.concurrency))} reps={opts.reps} n={opts.requests_per_cell}"
    )
    writer = RowWriter(opts.out)
    try:
        for rep in range(opts.reps):
            for c in opts.concurrency:
                if opts.requests_per_cell < c:
                    log(f"note: {opts.requests_per_cell} requests per cell < concurrency {c}")
                for name, pclass in classes.items():
                    for cache in caches:
                        plan = CellPlan(opts.arm, c, rep, name, cache)
                        rows, cell = run_cell(opts, ep, model, engine, run_id, plan, pclass, where)
                        for row in rows:
                            writer.write(row)
                        writer.write(cell)
                        log(_progress_line(cell))
    finally:
        writer.close()
    return 0


def _fmt(value: float | None, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def _progress_line(cell: dict[str, Any]) -> str:
    acc = cell.get("acceptance") or {}
    wall = cell["wall_s"]
    flags = (" [" + ", ".join(cell["flags"]) + "]") if cell["flags"] else ""
    return (
        f"{cell['cell']}: {cell['requests']} req, {cell['failed']} failed, "
        f"{_fmt(cell['output_tok_s'], '.1f')} tok/s, ttft p50 {_fmt(cell['ttft_p50_s'], '.4f')}s, "
        f"e2e p50 {_fmt(cell['e2e_p50_s'], '.3f')}s, "
        f"cpu {100.0 * cell['client_cpu_s'] / wall if wall else 0.0:.0f}%, "
        f"accept len {_fmt(acc.get('acceptance_length'), '.3f')}{flags}"
    )


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
    prompts = prompts if prompts is not None else GATE_PROMPTS
    if not prompts:
        raise GateError("no gate prompts")
    ref_ep, cand_ep = Endpoint.parse(reference), Endpoint.parse(candidate)
    need_model = any(m != "output_ids" for m in methods)
    ref_model = reference_model or (discover_model(ref_ep) if need_model else "")
    cand_model = candidate_model or (discover_model(cand_ep) if need_model else "")
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
    path: str,
    model: str | None = None,
    prompts: list[dict[str, Any]] | None = None,
    max_tokens: int = 64,
    seed: int = 0,
    timeout: float = 300.0,
    methods: tuple[str, ...] = GATE_METHODS,
) -> dict[str, Any]:
    """Record one endpoint's greedy gate outputs, for arms that cannot run at the same time."""
    prompts = prompts if prompts is not None else GATE_PROMPTS
    if not prompts:
        raise GateError("no gate prompts")
    ep = Endpoint.parse(endpoint)
    name = model or (discover_model(ep) if any(m != "output_ids" for m in methods) else "")
    got = collect_gate_outputs(ep, name, prompts, max_tokens, seed, timeout, methods)
    ref = {"schema_version": GATE_REFERENCE_SCHEMA, "kind": "gate_reference", "model": name,
           "max_tokens": max_tokens, "seed": seed, "prompts": prompts, **got}
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
    name = candidate_model or (discover_model(ep) if source != "output_ids" else "")
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
    prompts = data.get("prompts") if isinstance(data, dict) else data
    if not isinstance(prompts, list) or not prompts:
        raise ProbeError(f"{path} holds no prompts")
    out = []
    for i, p in enumerate(prompts):
        if not isinstance(p, dict) or not (p.get("messages") or p.get("prompt")):
            raise ProbeError(f"{path}: prompt {i} has neither messages nor prompt")
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
        engine = engine if engine in ("vllm", "sglang") else "vllm"
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


# --------------------------------------------------------------------------------------------
# Command line
# --------------------------------------------------------------------------------------------


def _int_list(value: Any) -> list[int]:
    if isinstance(value, int):
        return [value]
    if isinstance(value, (list, tuple)):
        return [int(v) for v in value]
    return [int(v) for v in str(value).replace(" ", "").split(",") if v]


def _str_list(value: Any) -> list[str] | None:
    if value is None:
        return None
    if isinstance(value, (list, tuple)):
        return [str(v) for v in value]
    return [v for v in str(value).replace(" ", "").split(",") if v]


def _run_options(ns: argparse.Namespace) -> RunOptions:
    """Defaults < --config JSON < flags given on the command line."""
    merged: dict[str, Any] = {}
    if ns.config:
        with open(ns.config, encoding="utf-8") as fh:
            cfg = json.load(fh)
        if not isinstance(cfg, dict):
            raise ProbeError("--config must hold a JSON object")
        merged.update({str(k).replace("-", "_"): v for k, v in cfg.items()})
    for key, value in vars(ns).items():
        if key in ("config", "cmd", "func") or value is None:
            continue
        merged[key] = value
    known = set(RunOptions.__dataclass_fields__)
    unknown = sorted(set(merged) - known)
    if unknown:
        raise ProbeError("unknown option(s): {}".format(", ".join(unknown)))
    opts = RunOptions()
    for key, value in merged.items():
        setattr(opts, key, value)
    opts.concurrency = _int_list(opts.concurrency)
    opts.prompt_classes = _str_list(opts.prompt_classes)
    opts.reps, opts.requests_per_cell = int(opts.reps), int(opts.requests_per_cell)
    opts.max_tokens, opts.warmup = int(opts.max_tokens), int(opts.warmup)
    opts.request_timeout = float(opts.request_timeout)
    if not opts.concurrency or min(opts.concurrency) < 1 or opts.requests_per_cell < 1:
        raise ProbeError("concurrency and requests per cell must be >= 1")
    return opts


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="probe.py",
        description="tailpod on-pod probe (stdlib only). Rows: docs/probe.md.",
    )
    sub = parser.add_subparsers(dest="cmd")

    run = sub.add_parser("run", help="measure cells (arm x concurrency x rep x prompt class)")
    S = argparse.SUPPRESS  # noqa: N806 - unset flags must not override --config
    run.add_argument("--config", default=None, help="JSON file of options (keys = flag names)")
    run.add_argument("--base-url", default=S, help=f"server base URL [{DEFAULT_BASE_URL}]")
    run.add_argument("--model", default=S, help="served model name [first of /v1/models]")
    run.add_argument("--arm", default=S, help="arm label written into every row")
    run.add_argument("--run-id", default=S)
    run.add_argument("--concurrency", default=S, help="comma list, e.g. 1,4,16 [1]")
    run.add_argument("--reps", type=int, default=S, help="repetitions of every cell [1]")
    run.add_argument("--requests-per-cell", type=int, default=S, help="measured requests [16]")
    run.add_argument("--max-tokens", type=int, default=S, help="[256]")
    run.add_argument("--ignore-eos", dest="ignore_eos", action="store_true", default=S)
    run.add_argument("--no-ignore-eos", dest="ignore_eos", action="store_false", default=S)
    run.add_argument("--temperature", type=float, default=S, help="[0]")
    run.add_argument("--prompt-classes", default=S, help="comma list [all in prompts dir]")
    run.add_argument("--prompts-dir", default=S, help="[prompts/ beside probe.py, else built-in]")
    run.add_argument("--warmup", type=int, default=S, help="warm-up requests per cell [1]")
    run.add_argument("--cache", choices=["cold", "warm", "both"], default=S, help="[cold]")
    run.add_argument("--engine", choices=["auto", "vllm", "sglang", "none"], default=S)
    run.add_argument("--api", choices=["chat", "completions", "generate"], default=S,
                     help="chat [default] | completions | generate (SGLang native, "
                     "per-request acceptance)")
    run.add_argument("--out", default=S, help="JSON Lines file, appended ('-' = stdout)")
    run.add_argument("--transport", choices=sorted(TRANSPORTS), default=S,
                     help=f"[{DEFAULT_TRANSPORT}]")
    run.add_argument("--request-timeout", type=float, default=S, help="seconds [600]")
    run.add_argument("--client-bound-threshold", type=float, default=S,
                     help="CPU/wall fraction that flags a cell client_bound [0.8]")

    gate = sub.add_parser("gate", help="token-identity gate between two endpoints")
    gate.add_argument("--candidate", required=True, help="base URL of the candidate server")
    ref = gate.add_mutually_exclusive_group(required=True)
    ref.add_argument("--reference", help="base URL of a live reference server")
    ref.add_argument("--reference-file", help="a reference saved with --save-reference")
    ref.add_argument("--save-reference", metavar="FILE",
                     help="record the candidate's outputs as a reference and exit")
    gate.add_argument("--model", default=None, help="model name for both [discovered]")
    gate.add_argument("--reference-model", default=None)
    gate.add_argument("--candidate-model", default=None)
    gate.add_argument("--max-tokens", type=int, default=64)
    gate.add_argument("--seed", type=int, default=0)
    gate.add_argument("--prompts-file", default=None,
                      help="JSON list of {messages: [...]} [built-in gate prompts]")
    gate.add_argument("--method", choices=GATE_METHODS, default=None,
                      help="force one method instead of the strongest available")
    gate.add_argument("--timeout", type=float, default=300.0)
    gate.add_argument("--out", default=None, help="also write the result JSON here")

    lp = sub.add_parser("logprobs", help="greedy continuations and teacher-forced top-k "
                        "logprobs, for the KL evaluation")
    lp.add_argument("--base-url", default=DEFAULT_BASE_URL)
    lp.add_argument("--model", default=None, help="served model name [first of /v1/models]")
    lp.add_argument("--prompts-file", required=True,
                    help='JSON {"prompts": [{"id", "class", "messages"}]} or a bare list')
    lp.add_argument("--reference-file", default=None,
                    help="score this earlier logprobs output's sequences instead of our own")
    lp.add_argument("--top-k", type=int, default=20)
    lp.add_argument("--max-tokens", type=int, default=64)
    lp.add_argument("--engine", choices=["auto", "vllm", "sglang"], default="auto")
    lp.add_argument("--ignore-eos", action="store_true")
    lp.add_argument("--timeout", type=float, default=600.0)
    lp.add_argument("--out", required=True, help="JSON file for the result")

    met = sub.add_parser("metrics", help="dump parsed Prometheus samples as JSON")
    met.add_argument("--base-url", default=DEFAULT_BASE_URL)
    met.add_argument("--file", default=None, help="parse this file instead of GET /metrics")
    met.add_argument("--prefix", default="", help="only names starting with this")
    met.add_argument("--samples", action="store_true", help="list every sample, not just sums")
    return parser


def _json_number(value: float) -> Any:
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    return value


def cmd_metrics(ns: argparse.Namespace) -> int:
    if ns.file:
        with open(ns.file, encoding="utf-8", errors="replace") as fh:
            samples = parse_prometheus(fh.read())
        source = ns.file
    else:
        ep = Endpoint.parse(ns.base_url)
        got = scrape_metrics(ep)
        if got is None:
            log(f"no /metrics at {ep.url()}")
            return 2
        samples, source = got, ep.url() + "/metrics"
    chosen = [s for s in samples if s.name.startswith(ns.prefix)]
    sums: dict[str, float] = {}
    for s in chosen:
        if not math.isnan(s.value):
            sums[s.name] = sums.get(s.name, 0.0) + s.value
    out: dict[str, Any] = {
        "source": source,
        "engine": detect_engine(samples),
        "sums": {k: _json_number(v) for k, v in sorted(sums.items())},
    }
    if ns.samples:
        out["samples"] = [
            {"name": s.name, "labels": s.labels, "value": _json_number(s.value)} for s in chosen
        ]
    sys.stdout.write(json.dumps(out, indent=2) + "\n")
    return 0


def cmd_gate(ns: argparse.Namespace) -> int:
    prompts = None
    if ns.prompts_file:
        with open(ns.prompts_file, encoding="utf-8") as fh:
            prompts = json.load(fh)
    methods = (ns.method,) if ns.method else GATE_METHODS
    code = 0
    try:
        if ns.save_reference:
            ref = save_gate_reference(ns.candidate, ns.save_reference, ns.candidate_model or
                                      ns.model, prompts, ns.max_tokens, ns.seed, ns.timeout,
                                      methods)
            result: dict[str, Any] = {
                "status": "saved", "path": ns.save_reference, "prompts": len(ref["prompts"]),
                "token_source": ref["token_source"], "max_tokens": ref["max_tokens"],
            }
        elif ns.reference_file:
            with open(ns.reference_file, encoding="utf-8") as fh:
                reference = json.load(fh)
            if ns.max_tokens != reference.get("max_tokens"):
                log(f"using the reference's max_tokens {reference.get('max_tokens')}")
            result = run_gate_against_reference(
                reference, ns.candidate, ns.candidate_model or ns.model, ns.timeout
            )
        else:
            result = run_gate(ns.reference, ns.candidate, ns.reference_model or ns.model,
                              ns.candidate_model or ns.model, prompts, ns.max_tokens, ns.seed,
                              ns.timeout, methods)
        if result["status"] == "fail":
            code = 1
    except (GateError, ProbeError, OSError, ValueError, KeyError) as exc:
        result = {"status": "error", "error": _scrub(str(exc)), "method": None,
                  "prompts": len(prompts or GATE_PROMPTS), "first_mismatch": None}
        code = 2
    text = json.dumps(result, indent=2)
    sys.stdout.write(text + "\n")
    if ns.out:
        with open(ns.out, "w", encoding="utf-8") as fh:
            fh.write(text + "\n")
    return code


def cmd_logprobs(ns: argparse.Namespace) -> int:
    # Every failure exits 2 with one line: callers read exit 1 as "ran, with a finding".
    try:
        reference = None
        if ns.reference_file:
            with open(ns.reference_file, encoding="utf-8") as fh:
                reference = json.load(fh)
        result = collect_logprobs(
            ns.base_url, load_logprob_prompts(ns.prompts_file), ns.top_k, ns.max_tokens,
            ns.model, ns.engine, reference, ns.timeout, ns.ignore_eos,
        )
        with open(ns.out, "w", encoding="utf-8") as fh:
            json.dump(result, fh)
    except (OSError, ValueError, KeyError, TypeError, IndexError) as exc:
        raise ProbeError(f"logprobs: {type(exc).__name__}: {exc}") from None
    positions = sum(len(p.get("positions") or []) for p in result["prompts"])
    errors = [p["id"] for p in result["prompts"] if p.get("error")]
    sys.stdout.write(json.dumps({"status": "ok", "prompts": len(result["prompts"]),
                                 "positions": positions, "errors": errors}) + "\n")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    ns = parser.parse_args(argv)
    if not ns.cmd:
        parser.print_help(sys.stderr)
        return 2
    try:
        if ns.cmd == "run":
            return run_sweep(_run_options(ns))
        if ns.cmd == "gate":
            return cmd_gate(ns)
        if ns.cmd == "logprobs":
            return cmd_logprobs(ns)
        return cmd_metrics(ns)
    except ProbeError as exc:
        log("error: " + _scrub(str(exc)))
        return 2
    except KeyboardInterrupt:
        log("interrupted")
        return 130


if __name__ == "__main__":
    sys.exit(main())
