"""Stream parsing: SSE and chunked decoders, the HTTP/1.1 response parser, and the stream
recorder that turns one streamed response into one request result (the request and result records).
"""

from __future__ import annotations

import json
import math
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from .metrics import percentile

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
        last = ""
        for line in lines[1:]:
            if not line:
                continue
            if last and line[0] in " \t":
                # obs-fold: RFC 9112 §5.2 says a user agent replaces it with SP before reading
                # the value, so a folded Transfer-Encoding still says chunked
                headers[last] = (headers[last] + " " + line.strip()).strip()
                continue
            key, _, value = line.partition(":")
            last = key.strip().lower()
            headers[last] = value.strip()
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
            # The head ends at its first empty line, CRLF or bare LF (RFC 9112 §2.2): an LF-only
            # head must not run on to a CRLF CRLF inside the body (a chunked body has them).
            end = self._head.find(b"\r\n\r\n")
            sep = 4
            lf_end = self._head.find(b"\n\n")
            if lf_end >= 0 and (end < 0 or lf_end < end):
                end, sep = lf_end, 2
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
    # Keep the content and tool calls (a structured or tools class: they are checked).
    structured: bool = False


# Does a streamed chunk carry content? A JSON key cannot occur inside a JSON string (its quotes
# would be escaped), so these match only a real key whose value is a non-empty string or a
# non-empty list: the same answer as parsing the chunk and testing the fields, at a third of
# the cost. Chunks with "usage" or "error" are always parsed in full.
_CHAT_CONTENT = re.compile(
    rb'"(?:content|reasoning_content|reasoning|token_ids)"\s*:\s*(?:"(?:[^"\\]|\\.)|\[\s*[^\]\s])'
)
_TEXT_CONTENT = re.compile(rb'"(?:text|token_ids)"\s*:\s*(?:"(?:[^"\\]|\\.)|\[\s*[^\]\s])')
# The answer (`content`, a non-empty string) and the reasoning text (vLLM's `reasoning`, the older
# `reasoning_content` that SGLang and llama.cpp send), told apart the same way: searched only
# until the answer starts, so a stream without reasoning pays for one search.
_CHAT_ANSWER = re.compile(rb'"content"\s*:\s*"(?:[^"\\]|\\.)')
_CHAT_REASONING = re.compile(rb'"(?:reasoning_content|reasoning)"\s*:\s*"(?:[^"\\]|\\.)')


class StreamRecorder:
    """Timestamps and server-reported counts of one streamed response.

    TTFT is the first event that carries content (text, reasoning text or token ids); on the
    chat API the first answer (non-empty `content` or a tool call) is timed too, and whether
    reasoning text came before it (time to first answer, docs/probe.md);
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
        "t_answer",
        "reasoned",
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
        "finish_reason",
        "spec",
        "structured",
        "content",
        "tool_calls",
        "_gen_seen",
        "_fast",
    )

    def __init__(self, api: str, keep_ids: bool = False, keep_text: bool = False,
                 structured: bool = False) -> None:
        self.api = api
        self.keep_ids = keep_ids
        self.keep_text = keep_text
        self.sse = SSEParser()
        self.t_send = 0.0
        self.t_send_wall = 0.0
        self.t_first: float | None = None
        # The first answer event (chat API), and whether reasoning text came before it (or in it)
        self.t_answer: float | None = None
        self.reasoned = False
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
        self.finish_reason: str | None = None
        # The engine's per-request speculative figures, as sent: vLLM's
        # `metrics.speculative_decoding` (final usage chunk), SGLang's
        # `sglext.spec_tokens_details` or /generate `meta_info` (metrics.request_acceptance).
        self.spec: tuple[str, dict[str, Any]] | None = None
        self.structured = structured
        self.content: list[str] = []  # the answer text only (no reasoning), structured classes
        self.tool_calls: dict[int, dict[str, str]] = {}
        self._gen_seen = 0
        self._fast: re.Pattern[bytes] | None = None
        if not keep_ids and not keep_text and not structured:
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
            if fast is not None and b'"usage"' not in payload and b'"error"' not in payload \
                    and b'_reason":"' not in payload and b'_reason": "' not in payload \
                    and b'"sglext"' not in payload:
                # A plain delta chunk: only "does it carry content" matters, and the pattern
                # answers that exactly (see _CHAT_CONTENT); the full parse costs ~3x more.
                if self.t_answer is None and fast is _CHAT_CONTENT:
                    if not self.reasoned and _CHAT_REASONING.search(payload) is not None:
                        self.reasoned = True
                    if _CHAT_ANSWER.search(payload) is not None:
                        self.t_answer = now
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
        self._spec_fields(obj)
        choices = obj.get("choices")
        if not choices or not isinstance(choices, list):
            return
        choice = choices[0] if isinstance(choices[0], dict) else {}
        if isinstance(choice.get("finish_reason"), str):
            self.finish_reason = choice["finish_reason"]
        calls = None
        if self.api == "chat":
            delta = choice.get("delta") or {}
            answer = delta.get("content")
            thought = delta.get("reasoning_content") or delta.get("reasoning")
            content = answer or thought
            calls = delta.get("tool_calls")
            if self.t_answer is None:
                self.reasoned = self.reasoned or bool(thought)
                if (isinstance(answer, str) and answer) or (isinstance(calls, list) and calls):
                    self.t_answer = now
        else:
            content = answer = choice.get("text")
        ids = choice.get("token_ids")
        if content or ids or calls:
            self._content(now)
            if self.keep_ids and isinstance(ids, list):
                self.token_ids.extend(ids)
            if self.keep_text and isinstance(content, str):
                self.text.append(content)
        if self.structured:
            if isinstance(answer, str):
                self.content.append(answer)
            if isinstance(calls, list):
                self._tool_call_deltas(calls)

    def _spec_fields(self, obj: dict[str, Any]) -> None:
        metrics = obj.get("metrics")
        if isinstance(metrics, dict) and isinstance(metrics.get("speculative_decoding"), dict):
            self.spec = ("vllm", metrics["speculative_decoding"])
        ext = obj.get("sglext")
        if isinstance(ext, dict) and isinstance(ext.get("spec_tokens_details"), dict):
            self.spec = ("sglang", ext["spec_tokens_details"])

    def _tool_call_deltas(self, calls: list[Any]) -> None:
        """OpenAI streamed tool calls: the first delta of call `index` names the function, the
        following ones append pieces of its `arguments` string."""
        for call in calls:
            if not isinstance(call, dict):
                continue
            idx = call.get("index", 0)
            slot = self.tool_calls.setdefault(idx if isinstance(idx, int) else 0,
                                              {"name": "", "arguments": ""})
            fn = call.get("function")
            if isinstance(fn, dict):
                if isinstance(fn.get("name"), str):
                    slot["name"] += fn["name"]
                if isinstance(fn.get("arguments"), str):
                    slot["arguments"] += fn["arguments"]

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
            reason = meta["finish_reason"]
            self.finish_reason = str(reason.get("type") if isinstance(reason, dict) else reason)
            if "spec_verify_ct" in meta:
                self.spec = ("sglang", meta)
            if self.structured and isinstance(obj.get("text"), str):
                self.content = [obj["text"]]  # /generate streams the whole text so far
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
    # Open loop: perf_counter at which the schedule said to send it (None in a closed loop).
    t_sched_perf: float | None = None
    finish_reason: str | None = None
    spec: tuple[str, dict[str, Any]] | None = None  # the engine's per-request figures, as sent
    content: str | None = None  # structured classes only: the answer text, for the checks
    tool_calls: list[dict[str, str]] | None = None
    # Time to first answer (chat API): the first non-empty `content` or tool call minus the send
    # time; None when none came. `reasoned`: reasoning text came before (or with) it.
    ttfa_s: float | None = None
    reasoned: bool = False
    reasoning_tokens: int | None = None  # usage.completion_tokens_details, when the server says
    # usage.prompt_tokens_details.cached_tokens: prompt tokens served from the prefix cache; None
    # when the server did not say (vLLM sends it only with --enable-prompt-tokens-details), never 0
    cached_tokens: int | None = None


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
    if rec.reasoned and ok and rec.t_answer is None:
        flags.append("no_answer")  # it reasoned and never answered (max_tokens ran out)
    details = usage.get("completion_tokens_details")
    reasoning_tokens = (_int_or_none(details.get("reasoning_tokens"))
                        if isinstance(details, dict) else None)
    prompt_details = usage.get("prompt_tokens_details")
    cached = (_int_or_none(prompt_details.get("cached_tokens"))
              if isinstance(prompt_details, dict) else None)
    ttft = e2e = decode = tpot = None
    if rec.t_first is not None:
        ttft = rec.t_first - rec.t_send
        e2e = (rec.t_last or rec.t_first) - rec.t_send
    if ok and completion is not None and completion > 1 and rec.t_first is not None:
        span = (rec.t_last or rec.t_first) - rec.t_first
        # A stream that arrived in one read has no decode span to measure: both rates stay
        # null rather than read as an infinitely fast or zero-time decode.
        if span > 0:
            decode = (completion - 1) / span
            tpot = span / (completion - 1)
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
        finish_reason=rec.finish_reason,
        spec=rec.spec,
        content="".join(rec.content) if rec.structured else None,
        tool_calls=[rec.tool_calls[i] for i in sorted(rec.tool_calls)] if rec.structured
        else None,
        ttfa_s=None if rec.t_answer is None else rec.t_answer - rec.t_send,
        reasoned=rec.reasoned,
        reasoning_tokens=reasoning_tokens,
        cached_tokens=cached,
    )
