"""The probe's parsers on exact byte streams, for `make mutate` (docs/testing.md, "agent/probes
parsers"): each test feeds a stream whose framing is written out by hand and states what the spec
says comes out. The property tests beside them (test_probe_framing.py, test_probe_prometheus.py)
try every split; these pin each branch in one or two feeds so a mutant costs milliseconds.

Specs: chunked transfer coding, RFC 9112 §7.1 (https://www.rfc-editor.org/rfc/rfc9112#section-7.1);
message heads and obs-fold, RFC 9112 §4 and §5.2; server-sent events, the WHATWG HTML standard
(https://html.spec.whatwg.org/multipage/server-sent-events.html#event-stream-interpretation);
the Prometheus text format (https://prometheus.io/docs/instrumenting/exposition_formats/).
"""

from __future__ import annotations

import json
import math
from types import SimpleNamespace
from typing import Any

import pytest

from tailpod.agent.probes import stream
from tailpod.agent.probes.metrics import (
    Sample,
    parse_prometheus,
    percentile,
    sum_metric,
)
from tailpod.agent.probes.stream import (
    ChunkedDecoder,
    HTTPResponseParser,
    ProtocolError,
    RequestSpec,
    SSEParser,
    StreamRecorder,
    result_from_recorder,
)

# -- SSE (WHATWG: lines end in CRLF, LF or CR; a blank line dispatches; "data" appends) ---------


def _sse(*reads: bytes) -> list[bytes]:
    parser = SSEParser()
    out: list[bytes] = []
    for read in reads:
        out.extend(parser.feed(read))
    return out


def test_sse_one_event_per_read() -> None:
    assert _sse(b'data: {"a":1}\n\n') == [b'{"a":1}']
    assert _sse(b"data: x\n\n", b"data: yz\n\n") == [b"x", b"yz"]


def test_sse_a_cr_inside_the_one_event_read_is_a_line_end() -> None:
    # "data: a CR LF LF": CRLF ends the field line, LF the event; the payload is "a", not "a\r"
    assert _sse(b"data: a\r\n\n") == [b"a"]


def test_sse_a_read_ending_mid_line_dispatches_nothing_yet() -> None:
    assert _sse(b"data: a\nx") == []  # "x" is an unfinished line, no blank line seen
    assert _sse(b"data: a\nx", b"\n\n") == [b"a"]  # the line "x" is an unknown field


def test_sse_one_read_shapes_the_one_event_shortcut_must_not_take() -> None:
    assert _sse(b"data:x\n\n") == [b"x"]  # no space after the colon
    assert _sse(b": c\n\n") == []  # a comment, then a blank line: nothing to dispatch
    assert _sse(b"data: ab\nc\n") == []  # two lines, no blank line yet


def test_sse_a_held_partial_line_joins_the_next_read() -> None:
    assert _sse(b"data: x", b"data: a\n\n") == [b"xdata: a"]


def test_sse_open_data_joins_the_next_reads_event() -> None:
    parser = SSEParser()
    assert parser.feed(b"data: a\n") == []
    assert parser.feed(b"data: b\n\n") == [b"a\nb"]


def test_sse_crlf_split_across_reads_is_one_line_end() -> None:
    assert _sse(b"data: a\r", b"\ndata: b\n\n") == [b"a\nb"]
    assert _sse(b"data: a\r", b"\n\r\n") == [b"a"]


def test_sse_crlf_line_ends_and_multi_line_data() -> None:
    assert _sse(b"data: a\r\ndata: b\r\n\r\ndata: c\r\n\r\n") == [b"a\nb", b"c"]


def test_sse_bare_cr_line_ends() -> None:
    parser = SSEParser()
    # the final CR may be the first half of a CRLF, so the blank line is known only later
    assert parser.feed(b"data: a\rdata: b\r\r") == []
    assert parser.feed(b"data: c\r\r") == [b"a\nb"]
    assert parser.feed(b"\n") == [b"c"]  # the held CR, then LF: one line end, then the blank


def test_sse_fields_comments_and_spaces() -> None:
    events = _sse(
        b": comment\n"
        b"event: message\nid: 7\nretry: 100\n\n"  # no data: a blank line dispatches nothing
        b"data:x\n\n"  # no space after the colon
        b"data:  two\n\n"  # only one leading space is removed
        b"data\n\n"  # a field with no colon: the value is empty
        b"datax: no\n\n"  # not the data field
        b"data: [DONE]\n\n"
    )
    assert events == [b"x", b" two", b"", b"[DONE]"]


def test_sse_an_event_open_at_the_end_is_dropped() -> None:
    assert _sse(b"data: a\n\ndata: cut off\n") == [b"a"]
    assert _sse(b"\n\n\n") == []


# -- chunked (RFC 9112 §7.1: size in hex, optional ;ext, CRLF, data, CRLF; 0, trailers, CRLF) ---


def _chunks(*reads: bytes) -> tuple[bytes, ChunkedDecoder]:
    dec = ChunkedDecoder()
    return b"".join(dec.feed(r) for r in reads), dec


def test_chunked_a_fresh_decoder_is_not_done() -> None:
    # `done` is the decoder's public bool: False, not just falsy, until the last chunk's trailer
    assert ChunkedDecoder().done is False


def test_chunked_one_chunk_per_read() -> None:
    body, dec = _chunks(b"5\r\nhello\r\n")
    assert body == b"hello" and not dec.done
    body, dec = _chunks(b"5\r\nhello\r\n", b"1\r\n!\r\n")
    assert body == b"hello!" and not dec.done


def test_chunked_a_whole_body_in_one_read_with_extensions_and_trailers() -> None:
    raw = (b"5;name=value\r\nhello\r\n"
           b"A ; a=1;b=\"q\"\r\n, chunked!\r\n"  # BWS before ";" and hex in upper case
           b"0\r\nExpires: never\r\nX-Checksum: 1\r\n\r\n")
    body, dec = _chunks(raw)
    assert body == b"hello, chunked!" and dec.done


def test_chunked_last_chunk_ends_the_body_and_later_bytes_are_ignored() -> None:
    body, dec = _chunks(b"5\r\nhello\r\n0\r\n\r\n")
    assert body == b"hello" and dec.done
    assert dec.feed(b"3\r\nabc\r\n") == b""


def test_chunked_not_done_until_the_trailer_ends() -> None:
    dec = ChunkedDecoder()
    assert dec.feed(b"2\r\nab\r\n0\r\n") == b"ab" and not dec.done
    assert dec.feed(b"T: 1\r\n") == b"" and not dec.done
    assert dec.feed(b"\r\n") == b"" and dec.done


def test_chunked_data_split_across_reads() -> None:
    dec = ChunkedDecoder()
    assert dec.feed(b"a\r\n0123") == b"0123"
    assert dec.feed(b"45") == b"45"
    assert dec.feed(b"6789") == b"6789"
    assert dec.feed(b"\r") == b"" and not dec.done
    assert dec.feed(b"\n3\r\nab") == b"ab"
    assert dec.feed(b"c\r\n0\r\n\r\n") == b"c" and dec.done


def test_chunked_size_line_split_across_reads() -> None:
    body, dec = _chunks(b"1", b"0\r", b"\n0123456789abcdef\r\n0\r\n\r\n")
    assert body == b"0123456789abcdef" and dec.done


def test_chunked_bare_lf_framing_is_accepted() -> None:
    # RFC 9112 §2.2: a recipient MAY take a bare LF as a line terminator
    body, dec = _chunks(b"5\nhello\n0\n\n")
    assert body == b"hello" and dec.done


def test_chunked_bare_lf_split_before_the_line_end() -> None:
    dec = ChunkedDecoder()
    assert dec.feed(b"5\nhello") == b"hello"
    assert dec.feed(b"\n0\n\n") == b"" and dec.done  # the read starts with the data's LF


def test_chunked_a_size_line_alone_in_a_read() -> None:
    dec = ChunkedDecoder()
    assert dec.feed(b"2\r\n") == b""
    assert dec.feed(b"ab\r\n0\r\n\r\n") == b"ab" and dec.done


def test_chunked_a_size_line_split_so_its_tail_looks_like_a_whole_chunk() -> None:
    dec = ChunkedDecoder()
    assert dec.feed(b"5\r\nhello\r\n1") == b"hello"
    # the size is 0x12: these four bytes are the start of 18 bytes of data
    assert dec.feed(b"2\r\nab\r\n") == b"ab\r\n"
    assert dec.feed(b"c" * 14 + b"\r\n0\r\n\r\n") == b"c" * 14 and dec.done


def test_chunked_two_chunks_in_one_read_that_a_wrong_size_would_merge() -> None:
    # 0x1 then 0xa bytes: 21 bytes in all, the length a single 0x10 chunk would have
    body, dec = _chunks(b"1\r\nX\r\na\r\n0123456789\r\n")
    assert body == b"X0123456789" and not dec.done
    # 0x10 is sixteen: twelve bytes here are data, the chunk is not over
    body, dec = _chunks(b"10\r\n0123456789\r\n", b"abcd\r\n0\r\n\r\n")
    assert body == b"0123456789\r\nabcd" and dec.done


def test_chunked_crlf_pairs_inside_data_are_data() -> None:
    raw = b"10\r\n" + b"\r\n" * 8 + b"\r\n" + b"0\r\nA: 123456\r\n" + b"\r\n"
    body, dec = _chunks(raw)
    assert body == b"\r\n" * 8 and dec.done


@pytest.mark.parametrize(("raw", "message"), [
    (b"1\r\nXY\r\n", "missing CRLF after chunk data"),
    (b"1\r\naX\r\n", "missing CRLF after chunk data"),
    (b"1\r\na\x0b\r\n", "missing CRLF after chunk data"),
    (b"10\r\n" + b"x" * 17 + b"\r\n", "missing CRLF after chunk data"),
    (b"10\r\n\r\n" + b"Y" * 14 + b"\r\n\r\n", "bad chunk size line b''"),
    (b"\r\n5\r\nhello\r\n", "bad chunk size line b''"),
    (b"0" * 17 + b"5\x00?hello\r\n", "bad chunk size line " + repr((b"0" * 17 + b"5\x00?hello")[:40])),
])
def test_chunked_framing_errors_in_one_read(raw: bytes, message: str) -> None:
    with pytest.raises(ProtocolError) as err:
        ChunkedDecoder().feed(raw)
    assert str(err.value) == message


def test_chunked_data_not_followed_by_crlf_is_refused() -> None:
    dec = ChunkedDecoder()
    assert dec.feed(b"5\r\nhelloXY") == b"hello"
    with pytest.raises(ProtocolError) as err:
        dec.feed(b"\r\n")
    assert str(err.value) == "missing CRLF after chunk data"


def test_chunked_bad_size_lines() -> None:
    with pytest.raises(ProtocolError) as err:
        ChunkedDecoder().feed(b"x\r\nA\r\n")
    assert str(err.value) == "bad chunk size line b'x'"
    long_line = b"z" * 50
    with pytest.raises(ProtocolError) as err:
        ChunkedDecoder().feed(long_line + b"\r\n")
    assert str(err.value) == "bad chunk size line " + repr(b"z" * 40)
    with pytest.raises(ProtocolError) as err:
        ChunkedDecoder().feed(b"-5\r\nhello\r\n")
    assert str(err.value) == "negative chunk size"
    dec = ChunkedDecoder()
    assert dec.feed(b"1\r\na\r\n") == b"a"
    with pytest.raises(ProtocolError) as err:
        dec.feed(b"\r\n")  # an empty size line
    assert str(err.value) == "bad chunk size line b''"


def test_chunked_framing_line_limit_is_4096_bytes() -> None:
    dec = ChunkedDecoder()
    assert dec.feed(b"0" * 4096) == b""  # at the limit: still waiting for the line end
    with pytest.raises(ProtocolError) as err:
        ChunkedDecoder().feed(b"0" * 4097)
    assert str(err.value) == "chunk framing line too long"
    body, dec = _chunks(b"0" * 4095 + b"3", b"\r\nabc\r\n")
    assert body == b"abc"  # leading zeros are still hex


# -- HTTP/1.1 responses (RFC 9112 §4 status line, §5 fields, §6 body length) ---------------------


def _parser() -> tuple[HTTPResponseParser, list[tuple[bytes, float]]]:
    got: list[tuple[bytes, float]] = []
    return HTTPResponseParser(lambda data, now: got.append((data, now))), got


def test_status_line_and_fields() -> None:
    p, got = _parser()
    p.feed(b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nX-Odd:  spaced value \r\n"
           b"no-colon-line\r\nContent-Length: 2\r\n\r\nhi", 3.5)
    assert (p.status, p.reason) == (200, "OK")
    assert p.headers == {"content-type": "text/plain", "x-odd": "spaced value",
                         "no-colon-line": "", "content-length": "2"}
    assert got == [(b"hi", 3.5)] and p.complete and p.keep_alive


def test_reason_phrase_keeps_its_spaces_or_is_empty() -> None:
    p, _ = _parser()
    p.feed(b"HTTP/1.1 404 Not Found Here\r\nContent-Length: 0\r\n\r\n", 0.0)
    assert (p.status, p.reason, p.complete) == (404, "Not Found Here", True)
    p, _ = _parser()
    p.feed(b"HTTP/1.1 200\r\nContent-Length: 0\r\n\r\n", 0.0)
    assert (p.status, p.reason) == (200, "")


def test_obs_fold_continues_the_previous_field() -> None:
    # RFC 9112 §5.2: a user agent replaces each obs-fold with SP before reading the value
    p, got = _parser()
    p.feed(b"HTTP/1.1 200 OK\r\nX-Long: one\r\n two\r\n\tthree\r\nTransfer-Encoding: gzip,\r\n"
           b" chunked\r\n\r\n2\r\nhi\r\n0\r\n\r\n", 0.0)
    assert p.headers == {"x-long": "one two three", "transfer-encoding": "gzip, chunked"}
    assert got == [(b"hi", 0.0)] and p.complete


def test_a_fold_before_any_field_is_its_own_line() -> None:
    p, _ = _parser()
    p.feed(b"HTTP/1.1 200 OK\r\n  Content-Length : 1\r\n\r\nx", 0.0)
    assert p.headers == {"content-length": "1"} and p.complete


def test_lf_only_head() -> None:
    p, got = _parser()
    p.feed(b"HTTP/1.1 200 OK\nContent-Length: 3\n\nabc", 1.0)
    assert p.headers == {"content-length": "3"} and got == [(b"abc", 1.0)] and p.complete


def test_an_lf_only_head_ends_at_its_first_blank_line() -> None:
    p, got = _parser()
    p.feed(b"HTTP/1.1 200 OK\nTransfer-Encoding: chunked\n\n5\r\nhello\r\n0\r\n\r\n", 1.0)
    assert p.headers == {"transfer-encoding": "chunked"}
    assert got == [(b"hello", 1.0)] and p.complete
    p, got = _parser()
    p.feed(b"HTTP/1.1 200 OK\nContent-Length: 4\n\na\n\nb", 1.0)
    assert got == [(b"a\n\nb", 1.0)] and p.complete


def test_an_empty_head_is_refused() -> None:
    for raw in (b"\r\n\r\nHTTP/1.1 200 OK\r\n\r\n", b"\n\nHTTP/1.1 200 OK\n\n"):
        p, _ = _parser()
        with pytest.raises(ProtocolError) as err:
            p.feed(raw, 0.0)
        assert str(err.value) == "bad status line ''"


def test_bad_status_lines() -> None:
    line = "FTP/1.1 200 " + "x" * 100
    for head, message in [
        (line.encode(), f"bad status line {line[:80]!r}"),
        (b"HTTP/1.1", "bad status line 'HTTP/1.1'"),
        (b"HTTP/1.1 2o0 OK", "bad status code '2o0'"),
        (b"HTTP/1.1 " + b"9" * 10 + b"x" * 20 + b" OK", f"bad status code {'9' * 10 + 'x' * 10!r}"),
    ]:
        p, _ = _parser()
        with pytest.raises(ProtocolError) as err:
            p.feed(head + b"\r\n\r\n", 0.0)
        assert str(err.value) == message


def test_keep_alive_by_version_and_connection() -> None:
    cases = [
        (b"HTTP/1.1 200 OK\r\nContent-Length: 0", True),
        (b"HTTP/1.1 200 OK\r\nConnection: Close\r\nContent-Length: 0", False),
        (b"HTTP/1.0 200 OK\r\nContent-Length: 0", False),
        (b"HTTP/1.0 200 OK\r\nConnection: Keep-Alive\r\nContent-Length: 0", True),
    ]
    for head, keep in cases:
        p, _ = _parser()
        p.feed(head + b"\r\n\r\n", 0.0)
        assert p.keep_alive is keep and p.complete, head


def test_no_body_statuses_complete_at_once() -> None:
    for status in (204, 304):
        p, got = _parser()
        p.feed(b"HTTP/1.1 %d X\r\nContent-Length: 5\r\n\r\n" % status, 0.0)
        assert p.complete and p.status == status and got == []


def test_interim_responses_are_skipped() -> None:
    for interim in (100, 103, 199):
        p, got = _parser()
        p.feed(b"HTTP/1.1 %d Early\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok" % interim,
               2.0)
        assert (p.status, p.reason, got, p.complete) == (200, "OK", [(b"ok", 2.0)], True)


def test_content_length_bounds_the_body() -> None:
    p, got = _parser()
    p.feed(b"HTTP/1.1 200 OK\r\nContent-Length: 4\r\n\r\nab", 1.0)
    assert not p.complete
    p.feed(b"c", 2.0)
    assert not p.complete  # one byte still to come
    p.feed(b"dEXTRA", 3.0)
    assert got == [(b"ab", 1.0), (b"c", 2.0), (b"d", 3.0)] and p.complete
    assert p.bytes_received == len(b"HTTP/1.1 200 OK\r\nContent-Length: 4\r\n\r\nab") + 1 + 6
    p, got = _parser()
    p.feed(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n", 0.0)
    assert p.complete and got == []


def test_bad_content_length() -> None:
    p, _ = _parser()
    with pytest.raises(ProtocolError) as err:
        p.feed(b"HTTP/1.1 200 OK\r\nContent-Length: five\r\n\r\n", 0.0)
    assert str(err.value) == "bad content-length"


def test_chunked_wins_over_content_length_and_is_case_blind() -> None:
    p, got = _parser()
    p.feed(b"HTTP/1.1 200 OK\r\nContent-Length: 1\r\nTransfer-Encoding: Chunked\r\n\r\n"
           b"3\r\nabc\r\n", 1.0)
    assert got == [(b"abc", 1.0)] and not p.complete
    p.feed(b"0\r\n\r\n", 2.0)
    assert got == [(b"abc", 1.0)] and p.complete


def test_chunked_bodies_of_other_statuses() -> None:
    p, got = _parser()
    p.feed(b"HTTP/1.1 206 Partial\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nab\r\n0\r\n\r\n", 4.0)
    assert got == [(b"ab", 4.0)] and p.complete and p.error_body == b""
    p, got = _parser()
    p.feed(b"HTTP/1.1 503 Busy\r\nTransfer-Encoding: chunked\r\n\r\n4\r\nbusy\r\n", 4.0)
    assert got == [] and p.error_body == b"busy" and not p.complete


def test_read_until_close_body() -> None:
    p, got = _parser()
    p.feed(b"HTTP/1.1 200 OK\r\n\r\nsome", 1.0)
    p.feed(b" more", 2.0)
    assert p.keep_alive is False and not p.complete
    assert got == [(b"some", 1.0), (b" more", 2.0)]
    p.eof()
    assert p.complete


def test_head_split_across_reads_and_its_size_limit() -> None:
    p, got = _parser()
    p.feed(b"HTTP/1.1 200 OK\r\nContent-Le", 0.0)
    assert p.status == 0 and not p.complete
    p.feed(b"ngth: 1\r\n\r", 0.0)
    p.feed(b"\nz", 5.0)
    assert got == [(b"z", 5.0)] and p.complete
    p, _ = _parser()
    p.feed(b"H" * 65536, 0.0)  # at the limit: still waiting
    with pytest.raises(ProtocolError) as err:
        p.feed(b"H", 0.0)
    assert str(err.value) == "response head too large"


# -- the stream recorder (one streamed response → counts and timestamps) -----------------------


def _chat(delta: dict[str, Any] | None = None, **extra: Any) -> bytes:
    obj: dict[str, Any] = {"choices": [{"index": 0, "delta": delta or {}}]}
    obj.update(extra)
    return b"data: " + json.dumps(obj).encode() + b"\n\n"


def test_recorder_starts_empty() -> None:
    rec = StreamRecorder("chat")
    assert (rec.api, rec.keep_ids, rec.keep_text) == ("chat", False, False)
    assert (rec.t_send, rec.t_send_wall, rec.t_first, rec.t_last, rec.t_end) == (
        0.0, 0.0, None, None, None)
    assert (rec.chunks, rec.gaps, rec.usage, rec.meta, rec.done, rec.error, rec.bad_events) == (
        0, [], None, None, False, None, 0)
    assert (rec.token_ids, rec.text, rec.timings) == ([], [], None)
    assert isinstance(rec.sse, SSEParser)


def test_recorder_picks_the_content_pattern_by_api() -> None:
    assert StreamRecorder("chat")._fast is stream._CHAT_CONTENT
    assert StreamRecorder("completions")._fast is stream._TEXT_CONTENT
    assert StreamRecorder("generate")._fast is None
    assert StreamRecorder("chat", keep_ids=True)._fast is None
    assert StreamRecorder("completions", keep_text=True)._fast is None


def test_recorder_counts_content_events_and_gaps() -> None:
    rec = StreamRecorder("chat")
    rec.feed(_chat({"role": "assistant"}), 1.0)  # no content: not the first token
    rec.feed(_chat({"content": "a"}) + _chat({"content": "b"}), 1.5)
    rec.feed(_chat({"reasoning_content": "c"}), 2.25)
    rec.feed(b"data: [DONE]\n\n", 3.0)
    assert (rec.t_first, rec.t_last, rec.chunks, rec.gaps) == (1.5, 2.25, 3, [0.0, 0.75])
    assert rec.done and rec.error is None and rec.bad_events == 0


def test_recorder_reads_past_done_and_counts_bad_events() -> None:
    rec = StreamRecorder("completions", keep_text=True)  # the full parse, which counts bad JSON
    rec.feed(b"data: [DONE]\n\ndata: not json\n\ndata: {bad\n\n"
             b'data: [1, 2]\n\ndata: {"choices": [{"text": "x"}]}\n\n', 1.0)
    assert rec.done and rec.bad_events == 2 and rec.chunks == 1 and rec.t_first == 1.0
    rec = StreamRecorder("completions")  # the fast path reads plain chunks by pattern only
    rec.feed(b'data: {"choices": [{"text": "x"}]}\n\ndata: {"choices": [{"text": "y"}]}\n\n', 1.0)
    assert rec.chunks == 2 and rec.gaps == [0.0]


def test_recorder_fast_path_still_parses_usage_and_errors() -> None:
    rec = StreamRecorder("chat")
    rec.feed(_chat({"content": "a"}) + _chat(None, usage={"completion_tokens": 3}), 1.0)
    assert rec.usage == {"completion_tokens": 3} and rec.chunks == 1
    rec = StreamRecorder("chat")
    rec.feed(b'data: {"error": {"message": "overloaded"}}\n\n', 1.0)
    assert rec.error == "server error event: overloaded" and rec.chunks == 0


def test_recorder_keeps_ids_and_text_when_asked() -> None:
    rec = StreamRecorder("chat", keep_ids=True, keep_text=True)
    rec.feed(_chat({"content": "he"}) + _chat({"reasoning_content": "rc"}) + _chat({"reasoning": "r"}),
             1.0)
    rec.feed(b'data: {"choices": [{"delta": {}, "token_ids": [5, 6]}]}\n\n', 2.0)
    assert rec.text == ["he", "rc", "r"] and rec.token_ids == [5, 6] and rec.chunks == 4
    rec = StreamRecorder("completions", keep_ids=True)
    rec.feed(b'data: {"choices": [{"text": "", "token_ids": [9]}]}\n\n', 1.0)
    assert rec.token_ids == [9] and rec.text == [] and rec.chunks == 1


def test_event_error_forms() -> None:
    rec = StreamRecorder("chat")
    rec._event({"error": {"message": "m" * 400}}, 0.0)
    assert rec.error == "server error event: " + "m" * 300
    rec = StreamRecorder("chat")
    rec._event({"error": "plain"}, 0.0)
    assert rec.error == "server error event: plain"
    rec = StreamRecorder("chat")
    rec._event({"error": {"code": 1}}, 0.0)
    assert rec.error == "server error event: None"
    rec = StreamRecorder("chat")  # an error beside choices is not a failed request
    rec._event({"error": "x", "choices": [{"delta": {"content": "y"}}]}, 1.0)
    assert rec.error is None and rec.chunks == 1


def test_event_usage_timings_and_odd_choices() -> None:
    rec = StreamRecorder("completions", keep_text=True)
    rec._event({"usage": "no", "timings": [1], "choices": []}, 0.0)
    assert (rec.usage, rec.timings, rec.chunks) == (None, None, 0)
    rec._event({"usage": {"prompt_tokens": 2}, "timings": {"prompt_n": 2}, "choices": "x"}, 0.0)
    assert rec.usage == {"prompt_tokens": 2} and rec.timings == {"prompt_n": 2}
    rec._event({"choices": ["not a dict"]}, 0.0)
    rec._event({"choices": [{"text": ""}]}, 0.0)
    rec._event({"choices": [{"delta": {"content": "chat field"}}]}, 0.0)
    assert rec.chunks == 0
    rec._event({"choices": [{"text": "t", "token_ids": "not a list"}]}, 1.0)
    assert rec.chunks == 1 and rec.text == ["t"] and rec.token_ids == []
    rec = StreamRecorder("chat", keep_text=True, keep_ids=True)
    rec._event({"choices": [{"delta": None, "text": "completions field"}]}, 0.0)
    rec._event({"choices": [{"delta": {"content": ""}, "token_ids": [4]}]}, 1.0)
    assert rec.chunks == 1 and rec.text == [] and rec.token_ids == [4]


def test_generate_events_count_new_tokens_only() -> None:
    rec = StreamRecorder("generate", keep_ids=True)
    rec._event({"meta_info": {"completion_tokens": 1}}, 1.0)
    rec._event({"meta_info": {"completion_tokens": 1}}, 1.5)
    rec._event({"meta_info": {"completion_tokens": 3, "prompt_tokens": 4,
                              "finish_reason": {"type": "stop"}}, "output_ids": [1, 2, 3]}, 2.0)
    assert (rec.chunks, rec.t_first, rec.t_last) == (2, 1.0, 2.0)
    assert rec.usage == {"completion_tokens": 3, "prompt_tokens": 4}
    assert rec.token_ids == [1, 2, 3]


def test_a_stream_without_done_ends_in_error_at_its_end_time() -> None:
    # The OpenAI stream ends with `data: [DONE]`; a stream closed before it is cut short.
    rec = StreamRecorder("chat")
    rec.feed(_chat({"content": "a"}), 1.0)
    rec.finish(2.5)
    assert (rec.error, rec.t_end) == ("stream ended before data: [DONE]", 2.5)
    r = result_from_recorder(SPEC, rec)
    assert (r.ok, r.error, r.t_end_perf) == (False, "stream ended before data: [DONE]", 2.5)


def test_finish_keeps_a_whole_stream_ok_and_an_earlier_failure() -> None:
    rec = StreamRecorder("chat")
    rec.feed(_chat({"content": "a"}) + b"data: [DONE]\n\n", 1.0)
    rec.finish(3.0)
    assert (rec.error, rec.t_end) == (None, 3.0)
    rec = StreamRecorder("chat")
    rec.fail("read timed out")  # the first failure is the one kept, [DONE] or not
    rec.finish(4.0)
    assert (rec.error, rec.t_end) == ("read timed out", 4.0)


def test_start_reads_the_wall_and_the_perf_clock(monkeypatch: pytest.MonkeyPatch) -> None:
    clock = SimpleNamespace(time=lambda: 1_700_000_000.25, perf_counter=lambda: 42.5)
    monkeypatch.setattr(stream, "time", clock)
    rec = StreamRecorder("chat")
    rec.start()
    assert (rec.t_send_wall, rec.t_send) == (1_700_000_000.25, 42.5)
    rec.feed(_chat({"content": "a"}), 43.0)
    rec.finish(44.0)
    r = result_from_recorder(SPEC, rec)
    # ttft 43.0 - 42.5; the row's t_start is the wall clock at send
    assert (r.t_start, r.t_send_perf, r.ttft_s, r.t_end_perf) == (1_700_000_000.25, 42.5, 0.5, 44.0)


# -- result_from_recorder ------------------------------------------------------------------------

SPEC = RequestSpec(index=4, path="/v1/chat/completions", body=b"{}", cache="warm", api="chat")


def _recorder(**fields: Any) -> StreamRecorder:
    rec = StreamRecorder("chat")
    for key, value in fields.items():
        setattr(rec, key, value)
    return rec


def test_result_rates_from_usage_and_timestamps() -> None:
    rec = _recorder(t_send=10.0, t_send_wall=1700.0, t_first=10.5, t_last=11.5, t_end=12.0,
                    usage={"completion_tokens": 5, "prompt_tokens": 7}, chunks=3,
                    gaps=[0.25, 1.0, 0.5], meta={"m": 1}, timings={"prompt_n": 7, "x": 1},
                    done=True)
    r = result_from_recorder(SPEC, rec)
    assert (r.index, r.cache, r.ok, r.error, r.flags) == (4, "warm", True, None, [])
    assert (r.prompt_tokens, r.completion_tokens, r.chunks) == (7, 5, 3)
    # ttft 10.5 - 10; e2e 11.5 - 10; 4 tokens after the first over 1 s: 4 tok/s, 0.25 s each
    assert (r.ttft_s, r.e2e_s, r.decode_tok_s, r.tpot_s) == (0.5, 1.5, 4.0, 0.25)
    assert (r.chunk_gap_p50_s, r.chunk_gap_max_s) == (0.5, 1.0)
    assert (r.t_start, r.t_send_perf, r.t_end_perf) == (1700.0, 10.0, 12.0)
    assert r.meta == {"m": 1} and r.server_timings == {"prompt_n": 7}


def test_result_two_tokens_and_one_token() -> None:
    r = result_from_recorder(SPEC, _recorder(t_send=0.0, t_first=1.0, t_last=1.5,
                                             usage={"completion_tokens": 2}))
    assert (r.decode_tok_s, r.tpot_s, r.prompt_tokens) == (2.0, 0.5, None)
    r = result_from_recorder(SPEC, _recorder(t_send=0.0, t_first=1.0, t_last=1.5,
                                             usage={"completion_tokens": 1}))
    assert (r.ttft_s, r.e2e_s, r.decode_tok_s, r.tpot_s) == (1.0, 1.5, None, None)


def test_result_one_read_stream_has_no_rates() -> None:
    for t_last in (None, 1.0):
        r = result_from_recorder(SPEC, _recorder(t_send=0.25, t_first=1.0, t_last=t_last,
                                                 usage={"completion_tokens": 9}))
        assert (r.ttft_s, r.e2e_s, r.decode_tok_s, r.tpot_s) == (0.75, 0.75, None, None)


def test_result_without_usage_or_first_token() -> None:
    for usage in (None, {}):
        r = result_from_recorder(SPEC, _recorder(t_send=2.0, usage=usage, t_end=None))
        assert r.ok and r.flags == ["no_usage"] and r.completion_tokens is None
        assert (r.ttft_s, r.e2e_s, r.chunk_gap_p50_s, r.chunk_gap_max_s) == (None,) * 4
        assert r.t_end_perf == 2.0 and r.server_timings is None
    r = result_from_recorder(SPEC, _recorder(usage={"completion_tokens": 4}))
    assert r.completion_tokens == 4 and r.flags == [] and r.decode_tok_s is None


def test_result_of_a_failed_stream() -> None:
    rec = _recorder(t_send=0.0, t_first=1.0, t_last=2.0, error="cut",
                    usage={"completion_tokens": 3, "prompt_tokens": True})
    r = result_from_recorder(SPEC, rec)
    assert (r.ok, r.error, r.flags, r.completion_tokens, r.prompt_tokens) == (
        False, "cut", [], 3, None)
    assert (r.ttft_s, r.decode_tok_s, r.tpot_s) == (1.0, None, None)
    r = result_from_recorder(SPEC, _recorder(error="cut"))
    assert r.flags == []  # a failure is not also flagged for missing usage


# -- Prometheus text (label values escape \\ \" \n; values are Go floats; # starts a comment) ----


def test_labels_with_escapes_commas_and_braces() -> None:
    text = ('m{a="x",b="y\\"z",c="p,q}r"} 1\n'
            'm{nl="one\\ntwo",bs="back\\\\slash",odd="\\t"} 2\n')
    assert parse_prometheus(text) == [
        Sample("m", {"a": "x", "b": 'y"z', "c": "p,q}r"}, 1.0),
        Sample("m", {"nl": "one\ntwo", "bs": "back\\slash", "odd": "\\t"}, 2.0),
    ]


def test_label_spacing_trailing_comma_and_empty_braces() -> None:
    text = ('m{ a = "x" ,\tb="y" } 3\n'
            'm{a="x",} 4\n'
            'm{} 5\n'
            'm{}6\n'  # no blank is needed where tokens would not merge
            'm{a="x"}12\n'
            'm{Xa="v"} 7\n'
            'm{a1_:="v"} 6\n')  # ":" may not be in a label name: this line is malformed
    assert parse_prometheus(text) == [
        Sample("m", {"a": "x", "b": "y"}, 3.0),
        Sample("m", {"a": "x"}, 4.0),
        Sample("m", {}, 5.0),
        Sample("m", {}, 6.0),
        Sample("m", {"a": "x"}, 12.0),
        Sample("m", {"Xa": "v"}, 7.0),
    ]


@pytest.mark.parametrize("line", [
    'm{a=x} 1', 'm{a="x" 1', 'm{a="x"', 'm{="x"} 1', 'm{a "x"} 1', 'm{a="x" b="y"} 1',
    'm{a="x\\', 'm{1a="x"} 1', 'm{a', 'm{a=', 'm{a="x",', 'm{a="x"}', '1m 1', 'm', 'm abc',
    '{a="x"} 1', 'm{a:b="x"} 1', 'm{a=X"x"} 1', 'm{a="x"X} 1', '\x0bm 1',
])
def test_malformed_lines_are_skipped(line: str) -> None:
    assert parse_prometheus(line + "\nok 1\n") == [Sample("ok", {}, 1.0)]


def test_names_values_comments_and_line_ends() -> None:
    text = ("# HELP vllm:x help text\n# TYPE vllm:x counter\n"
            "vllm:num_requests_running 3\r\n"
            "  _lead{a1=\"v\"} 1e3 1700000000000\n"
            "\tnan_gauge NaN\n"
            "inf +Inf\nneg -Inf\nfrac -0.5\nXtotalX 2\n"
            "\n# EOF\n")
    samples = parse_prometheus(text)
    assert [(s.name, s.labels) for s in samples] == [
        ("vllm:num_requests_running", {}), ("_lead", {"a1": "v"}), ("nan_gauge", {}),
        ("inf", {}), ("neg", {}), ("frac", {}), ("XtotalX", {})]
    values = [s.value for s in samples]
    assert values[:2] == [3.0, 1000.0] and math.isnan(values[2])
    assert values[3:] == [math.inf, -math.inf, -0.5, 2.0]


def test_only_lf_ends_a_line() -> None:
    # a vertical tab or form feed inside a label value is content, not a line break
    assert parse_prometheus('m{a="x\x0by\x0cz"} 1') == [Sample("m", {"a": "x\x0by\x0cz"}, 1.0)]


def test_histogram_buckets_and_sums() -> None:
    text = ('h_bucket{le="0.1"} 3\nh_bucket{le="1"} 5\nh_bucket{le="+Inf"} 6\n'
            'h_sum 2.5\nh_count 6\nh_created 1700000000\n'
            'c_total{engine="0",model="a"} 10\nc_total{engine="1",model="a"} 5\n'
            'c_total{engine="1",model="b"} NaN\nc_total{engine="2",model="b"} 0.5\n')
    s = parse_prometheus(text)
    assert [x.labels["le"] for x in s[:3]] == ["0.1", "1", "+Inf"]
    assert sum_metric(s, "h_bucket", le="+Inf") == 6.0
    assert sum_metric(s, "h_count") == 6.0 and sum_metric(s, "h") is None
    assert sum_metric(s, "c_total") == 15.5  # NaN skipped
    assert sum_metric(s, "c_total", model="a") == 15.0
    assert sum_metric(s, "c_total", engine="1", model="a") == 5.0
    assert sum_metric(s, "c_total", engine="1", model="b") is None  # only a NaN: nothing
    assert sum_metric(s, "c_total", model="z") is None
    assert sum_metric([Sample("z", {}, 0.0)], "z") == 0.0  # present at zero is not absent


def test_metric_and_label_name_characters_at_their_range_ends() -> None:
    # Metric names are [a-zA-Z_:][a-zA-Z0-9_:]*, label names [a-zA-Z_][a-zA-Z0-9_]*: the ends of
    # each range are names; the characters between "Z" and "a" other than "_" ([ \ ] ^ `) and
    # a leading digit are not, so those lines are malformed and skipped.
    text = ("a 1\nz 2\nA 3\nZ 4\n_0 5\n_9 6\n:x 7\n"
            "x[y 8\nx\\y 9\nx]y 10\nx^y 11\nx`y 12\n0x 13\n9x 14\n"
            'm{a="1",z="2",A="3",Z="4",_09="5"} 15\nm{x^y="6"} 16\n')
    assert parse_prometheus(text) == [
        Sample("a", {}, 1.0), Sample("z", {}, 2.0), Sample("A", {}, 3.0), Sample("Z", {}, 4.0),
        Sample("_0", {}, 5.0), Sample("_9", {}, 6.0), Sample(":x", {}, 7.0),
        Sample("m", {"a": "1", "z": "2", "A": "3", "Z": "4", "_09": "5"}, 15.0),
    ]


@pytest.mark.parametrize(("values", "q", "expected"), [
    ([1.0, 2.0, 3.0, 4.0], 50, 2.5),  # position 1.5
    ([10.0, 20.0, 30.0, 40.0, 50.0], 25, 20.0),  # position exactly 1
    ([50.0, 10.0, 40.0, 20.0, 30.0], 75, 40.0),  # unsorted in, position exactly 3
    ([10.0, 20.0, 30.0, 40.0, 50.0], 0, 10.0),
    ([10.0, 20.0, 30.0, 40.0, 50.0], 100, 50.0),  # the last rank has no right neighbour
    ([0.0, 8.0], 75, 6.0),  # position 0.75
    ([7.0], 99, 7.0),
    ([None, 3.0, math.nan, 1.0], 50, 2.0),  # None and NaN are not values
])
def test_percentile_at_exact_ranks(values: list[float | None], q: float, expected: float) -> None:
    assert percentile(values, q) == expected


def test_percentile_p99_of_one_to_hundred_and_empty() -> None:
    # position 99 * 0.99 = 98.01: 99 + (100 - 99) * 0.01
    assert percentile([float(i) for i in range(1, 101)], 99) == pytest.approx(99.01, abs=1e-12)
    assert percentile([], 50) is None
    assert percentile([None, math.nan], 50) is None
