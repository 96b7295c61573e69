"""SSE, chunked transfer coding and the content fast path, however the bytes are split."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tailpod.agent.probes import stream

STREAM = (
    b": keep-alive comment\n"
    b'data: {"a": 1}\n\n'
    b"event: message\r\n"
    b'data: {"b":\r\n'
    b"data: 2}\r\n\r\n"
    b"data:[DONE]\r"
    b"\r"
    b"data: open event never closed\n"
)
EXPECTED = [b'{"a": 1}', b'{"b":\n2}', b"[DONE]"]


def _feed_split(data: bytes, cuts: list[int]) -> list[bytes]:
    parser = stream.SSEParser()
    events: list[bytes] = []
    last = 0
    for cut in sorted(set(cuts)) + [len(data)]:
        events.extend(parser.feed(data[last:cut]))
        last = cut
    return events


def test_sse_whole_stream() -> None:
    assert _feed_split(STREAM, []) == EXPECTED


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(min_value=0, max_value=len(STREAM)), max_size=12))
def test_sse_any_split_gives_the_same_events(cuts: list[int]) -> None:
    assert _feed_split(STREAM, cuts) == EXPECTED


def _chunked(parts: list[bytes]) -> bytes:
    body = b"".join(b"%x;ext=1\r\n%s\r\n" % (len(p), p) for p in parts if p)
    return body + b"0\r\nTrailer: x\r\n\r\n"


@settings(max_examples=200, deadline=None)
@given(st.lists(st.binary(min_size=1, max_size=40), max_size=8),
       st.lists(st.integers(min_value=0, max_value=400), max_size=10))
def test_chunked_decoder_any_split(parts: list[bytes], cuts: list[int]) -> None:
    raw = _chunked(parts)
    dec = stream.ChunkedDecoder()
    out, last = b"", 0
    for cut in sorted({c for c in cuts if c <= len(raw)}) + [len(raw)]:
        out += dec.feed(raw[last:cut])
        last = cut
    assert out == b"".join(parts) and dec.done


def test_chunked_decoder_rejects_garbage() -> None:
    with pytest.raises(stream.ProtocolError):
        stream.ChunkedDecoder().feed(b"zz\r\nabc\r\n")


def test_response_parser_collects_error_bodies_apart() -> None:
    got: list[bytes] = []
    parser = stream.HTTPResponseParser(lambda data, now: got.append(data))
    parser.feed(b"HTTP/1.1 500 Internal Server Error\r\ncontent-length: 5\r\n\r\nboom!", 0.0)
    assert parser.complete and parser.status == 500 and parser.error_body == b"boom!"
    assert got == []


def _chunk(delta: dict | None = None, text: str | None = None, **extra: Any) -> bytes:
    choice: dict = {"index": 0, "logprobs": None, "finish_reason": None}
    if delta is not None:
        choice["delta"] = delta
    if text is not None:
        choice["text"] = text
    choice.update(extra)
    return json.dumps({"id": "x", "object": "chat.completion.chunk", "choices": [choice]}).encode()


# fragments that try to fool a pattern: quotes, escapes and the key names themselves
content_text = st.lists(
    st.sampled_from(list('ab "\\:,{}[]\n') + ['"content":"', '"text":"x', "token_ids"]),
    max_size=10,
).map("".join)


@settings(max_examples=400, deadline=None)
@given(content_text, st.sampled_from(["content", "reasoning_content", "role"]),
       st.sampled_from([None, [], [1, 2]]), st.booleans())
def test_fast_path_agrees_with_a_full_parse(
    text: str, key: str, ids: list[int] | None, compact: bool
) -> None:
    extra: dict[str, Any] = {} if ids is None else {"token_ids": ids}
    payload = _chunk({key: text}, **extra)
    if compact:
        payload = json.dumps(json.loads(payload), separators=(",", ":")).encode()
    fast = stream.StreamRecorder("chat")
    full = stream.StreamRecorder("chat", keep_text=True)  # keep_text forces the full parse
    assert fast._fast is not None and full._fast is None
    for rec in (fast, full):
        rec.feed(b"data: " + payload + b"\n\n", 1.0)
    assert fast.chunks == full.chunks


@settings(max_examples=200, deadline=None)
@given(content_text)
def test_completions_fast_path_agrees(text: str) -> None:
    payload = b"data: " + _chunk(text=text) + b"\n\n"
    fast, full = stream.StreamRecorder("completions"), stream.StreamRecorder(
        "completions", keep_text=True)
    fast.feed(payload, 1.0)
    full.feed(payload, 1.0)
    assert fast.chunks == full.chunks


def test_usage_chunk_is_parsed_and_not_counted_as_content() -> None:
    rec = stream.StreamRecorder("chat")
    rec.start()
    rec.feed(b"data: " + _chunk({"role": "assistant", "content": ""}) + b"\n\n", rec.t_send + 0.5)
    rec.feed(b"data: " + _chunk({"content": "hi"}) + b"\n\n"
             b"data: " + _chunk({"content": " there"}) + b"\n\n", rec.t_send + 1.0)
    rec.feed(b'data: {"choices":[],"usage":{"prompt_tokens":3,"completion_tokens":7}}\n\n'
             b"data: [DONE]\n\n", rec.t_send + 3.0)
    rec.finish(rec.t_send + 3.0)
    spec = stream.RequestSpec(0, "/v1/chat/completions", b"", "cold", "chat")
    r = stream.result_from_recorder(spec, rec)
    assert r.ok and r.chunks == 2 and r.completion_tokens == 7 and r.prompt_tokens == 3
    assert r.ttft_s == pytest.approx(1.0) and r.e2e_s == pytest.approx(1.0)  # usage not content
    # both content chunks arrived at once: no time span, so no rate (TPOT 0 s would be a lie)
    assert r.decode_tok_s is None and r.tpot_s is None


def test_decode_rate_and_tpot_use_usage_tokens() -> None:
    rec = stream.StreamRecorder("chat")
    rec.start()
    t0 = rec.t_send
    for i, t in enumerate((0.1, 0.3, 0.5)):
        rec.feed(b"data: " + _chunk({"content": f"x{i}"}) + b"\n\n", t0 + t)
    rec.feed(b'data: {"choices":[],"usage":{"completion_tokens":9}}\n\ndata: [DONE]\n\n', t0 + 0.6)
    rec.finish(t0 + 0.6)
    r = stream.result_from_recorder(stream.RequestSpec(0, "/", b"", "cold", "chat"), rec)
    assert r.decode_tok_s == pytest.approx((9 - 1) / 0.4)
    assert r.tpot_s == pytest.approx((0.5 - 0.1) / 8)
    assert r.chunk_gap_p50_s == pytest.approx(0.2) and r.chunk_gap_max_s == pytest.approx(0.2)


def test_server_error_event_fails_the_request() -> None:
    rec = stream.StreamRecorder("chat")
    rec.start()
    rec.feed(b'data: {"error": {"message": "engine died"}}\n\ndata: [DONE]\n\n', rec.t_send)
    rec.finish(rec.t_send)
    assert rec.error is not None and "engine died" in rec.error
