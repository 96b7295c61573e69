"""The probe's stream and metrics maths, pinned where `make mutate` found the suite blind
(docs/testing.md): SGLang's acceptance from its counters and its per-request meta_info, the
`/generate` stream's events, the HTTP response parser's edges, and `probe metrics`' sums. Every
expected figure is worked out by hand in the test from the counts it plants."""

from __future__ import annotations

import math
from typing import Any

import pytest

from tailpod.agent.probes.metrics import (
    Sample,
    _finite_or_none,
    acceptance_from_sglang_meta,
    acceptance_from_sglang_metrics,
    acceptance_from_vllm,
    metrics_summary,
    normalise_acceptance,
    parse_prometheus,
    spec_snapshot,
    sum_by_label,
)
from tailpod.agent.probes.stream import HTTPResponseParser, ProtocolError, StreamRecorder

# -- SGLang counters -----------------------------------------------------------------------------


def test_sglang_counters_give_accepted_drafts_per_verify() -> None:
    # 10 requests made 200 tokens in 60 verifies: 10 came from prefill, each verify gives its
    # accepted drafts + 1, so accepted = 200 - 10 - 60 = 130; length 1 + 130/60; k+1 = 4 drafts
    # per verify means 3 proposed each: 180 draft tokens, rate 130/180.
    before = {"verify_calls": 40.0, "generation_tokens": 1000.0, "requests": 5.0}
    after = {"verify_calls": 100.0, "generation_tokens": 1200.0, "requests": 15.0,
             "num_draft_tokens": 4}
    acc, flags = acceptance_from_sglang_metrics(before, after, finished_requests=99)
    assert flags == []
    assert acc is not None
    assert (acc["drafts"], acc["accepted"], acc["draft_tokens"]) == (60, 130, 180)
    assert acc["acceptance_length"] == pytest.approx(1 + 130 / 60)
    assert acc["acceptance_rate"] == pytest.approx(130 / 180)
    assert acc["per_position"] == [] and acc["source"] == "sglang_metrics"
    native = acc["native"]
    assert (native["spec_verify_calls"], native["generation_tokens"]) == (60.0, 200.0)
    assert native["accept_length"] == pytest.approx(200 / 60)
    assert native["convention"] == (
        "SGLang accept length = generated tokens / verify calls (includes the bonus token and "
        "the prefill token, so it reads slightly high)")


def test_sglang_one_verify_counts_and_no_new_tokens_is_not_a_reset() -> None:
    acc, flags = acceptance_from_sglang_metrics({"verify_calls": 0.0, "generation_tokens": 0.0},
                                                {"verify_calls": 1.0, "generation_tokens": 4.0},
                                                finished_requests=1)
    assert flags == [] and acc is not None
    assert acc["native"]["accept_length"] == 4.0 and acc["accepted"] == 4 - 1 - 1
    acc, flags = acceptance_from_sglang_metrics({"verify_calls": 2.0, "generation_tokens": 5.0},
                                                {"verify_calls": 2.0, "generation_tokens": 5.0},
                                                finished_requests=0)
    assert flags == ["no_drafts"] and acc is not None  # an idle cell, not a counter reset


def test_sglang_counters_without_a_request_counter_use_the_cells_finished_requests() -> None:
    before = {"verify_calls": 0.0, "generation_tokens": 0.0}
    after = {"verify_calls": 50.0, "generation_tokens": 120.0}
    acc, flags = acceptance_from_sglang_metrics(before, after, finished_requests=20)
    assert acc is not None and flags == []
    assert acc["accepted"] == 120 - 20 - 50  # 50
    assert acc["draft_tokens"] is None and acc["acceptance_rate"] is None  # k unknown
    # a request counter that went backwards is not used either
    acc, _ = acceptance_from_sglang_metrics({**before, "requests": 9.0},
                                            {**after, "requests": 3.0}, finished_requests=20)
    assert acc is not None and acc["accepted"] == 50
    # a request counter that did not move counts zero requests
    acc, _ = acceptance_from_sglang_metrics({**before, "requests": 3.0},
                                            {**after, "requests": 3.0}, finished_requests=20)
    assert acc is not None and acc["accepted"] == 120 - 0 - 50


@pytest.mark.parametrize(("k_plus_1", "draft_tokens"), [(None, None), (1, None), (2, 10), (5, 40)])
def test_sglang_draft_tokens_are_verifies_times_k(k_plus_1: int | None,
                                                  draft_tokens: int | None) -> None:
    after = {"verify_calls": 10.0, "generation_tokens": 30.0, "num_draft_tokens": k_plus_1}
    acc, _ = acceptance_from_sglang_metrics({"verify_calls": 0.0, "generation_tokens": 0.0},
                                            after, finished_requests=2)
    assert acc is not None and acc["draft_tokens"] == draft_tokens


def test_sglang_accepted_never_goes_below_zero_and_no_verifies_is_no_drafts() -> None:
    acc, _ = acceptance_from_sglang_metrics({"verify_calls": 0.0, "generation_tokens": 0.0},
                                            {"verify_calls": 10.0, "generation_tokens": 12.0},
                                            finished_requests=5)
    assert acc is not None and acc["accepted"] == 0 and acc["acceptance_length"] == 1.0
    acc, flags = acceptance_from_sglang_metrics({"verify_calls": 3.0, "generation_tokens": 0.0},
                                                {"verify_calls": 3.0, "generation_tokens": 7.0},
                                                finished_requests=7)
    assert flags == ["no_drafts"] and acc is not None
    assert acc["acceptance_length"] is None and acc["native"]["accept_length"] is None


@pytest.mark.parametrize(("before", "after", "want"), [
    ({"verify_calls": 5.0, "generation_tokens": 1.0}, {"verify_calls": 4.0,
                                                       "generation_tokens": 9.0},
     (None, ["counter_reset"])),
    ({"verify_calls": 5.0, "generation_tokens": 9.0}, {"verify_calls": 6.0,
                                                       "generation_tokens": 8.0},
     (None, ["counter_reset"])),
    ({"generation_tokens": 1.0}, {"verify_calls": 4.0, "generation_tokens": 9.0}, (None, [])),
    ({"verify_calls": 1.0}, {"verify_calls": 4.0}, (None, [])),
])
def test_sglang_counters_missing_or_reset_give_nothing(before: dict, after: dict,
                                                       want: tuple) -> None:
    assert acceptance_from_sglang_metrics(before, after, finished_requests=3) == want


# -- SGLang meta_info ------------------------------------------------------------------------------

def test_sglang_meta_is_token_weighted_over_the_requests_that_verified() -> None:
    # The engine's own correct-draft counts (18 + 5 = 23) win over what the token count would
    # give (42 tokens - 2 prefill - 15 verifies = 25): the two differ on purpose here.
    metas: list[dict[str, Any]] = [
        {"spec_verify_ct": 0, "completion_tokens": 1},  # no verify: not counted, not the end
        {"spec_verify_ct": 10, "completion_tokens": 31, "spec_num_proposed_drafts": 30,
         "spec_num_correct_drafts": 18, "spec_accepted_drafts": 99},
        {"spec_verify_ct": 5.0, "completion_tokens": 11, "spec_proposed_drafts": 15,
         "spec_accepted_drafts": 5},
        {"spec_verify_ct": "7", "completion_tokens": 9},  # not a number: not counted
        {"spec_verify_ct": 7, "completion_tokens": None},
    ]
    acc = acceptance_from_sglang_meta(metas)
    assert acc is not None
    assert (acc["drafts"], acc["draft_tokens"], acc["accepted"]) == (15, 45, 23)
    assert acc["acceptance_length"] == pytest.approx(1 + 23 / 15)
    assert acc["acceptance_rate"] == pytest.approx(23 / 45)
    assert acc["source"] == "sglang_meta"
    native = acc["native"]
    assert (native["spec_verify_ct"], native["completion_tokens"], native["requests"]) == (
        15.0, 42.0, 2)
    assert native == {
        "convention": "SGLang meta_info spec_accept_length = completion_tokens / spec_verify_ct "
                      "(includes the bonus token and the prefill token)",
        "spec_verify_ct": 15.0, "completion_tokens": 42.0, "accept_length": 42 / 15,
        "requests": 2}
    one = acceptance_from_sglang_meta([{"spec_verify_ct": 1, "completion_tokens": 3}])
    assert one is not None and one["drafts"] == 1 and one["accepted"] == 3 - 1 - 1


def test_sglang_meta_without_draft_counts_derives_accepted_from_tokens() -> None:
    # 2 requests, 8 + 4 = 12 verifies, 30 tokens: 30 - 2 (prefill) - 12 = 16 accepted
    acc = acceptance_from_sglang_meta([{"spec_verify_ct": 8, "completion_tokens": 20},
                                       {"spec_verify_ct": 4, "completion_tokens": 10,
                                        "spec_num_correct_drafts": 3}])
    assert acc is not None
    assert acc["accepted"] == 16 and acc["draft_tokens"] is None
    assert acc["acceptance_rate"] is None
    low = acceptance_from_sglang_meta([{"spec_verify_ct": 8, "completion_tokens": 5}])
    assert low is not None and low["accepted"] == 0  # never below zero


def test_sglang_meta_with_nothing_verified_is_none() -> None:
    assert acceptance_from_sglang_meta([]) is None
    assert acceptance_from_sglang_meta([{"spec_verify_ct": 0, "completion_tokens": 5}]) is None


# -- the shared convention ---------------------------------------------------------------------------

def test_normalise_acceptance_floors_and_rounds() -> None:
    acc = normalise_acceptance(4.0, 12.4, 6.6, [3.0, -1.0], "s", {"n": 1})
    assert (acc["drafts"], acc["draft_tokens"], acc["accepted"]) == (4, 12, 7)
    assert acc["acceptance_length"] == pytest.approx(1 + 6.6 / 4)
    assert acc["acceptance_rate"] == pytest.approx(6.6 / 12.4)
    assert acc["per_position"] == [0.75, 0.0]
    assert (acc["source"], acc["native"]) == ("s", {"n": 1})
    neg = normalise_acceptance(2.0, 4.0, -1.0, [], "s", {})
    assert neg["acceptance_length"] == 1.0 and neg["acceptance_rate"] == 0.0
    single = normalise_acceptance(1.0, 2.0, 1.0, [1.0], "s", {})
    assert single["acceptance_length"] == 2.0 and single["per_position"] == [1.0]
    none = normalise_acceptance(0.0, 0.0, 0.0, [1.0], "s", {})
    assert none["acceptance_length"] is None and none["acceptance_rate"] is None
    assert none["per_position"] == []


def test_vllm_counter_deltas_per_position() -> None:
    before = {"drafts": 10.0, "accepted": 5.0, "draft_tokens": 30.0,
              "per_pos": {"0": 3.0, "1": 2.0}}
    after = {"drafts": 20.0, "accepted": 17.0, "draft_tokens": 60.0,
             "per_pos": {"0": 11.0, "1": 6.0, "2": 1.0}}
    acc, flags = acceptance_from_vllm(before, after)
    assert flags == [] and acc is not None
    assert acc["acceptance_length"] == pytest.approx(1 + 12 / 10)
    assert acc["acceptance_rate"] == pytest.approx(12 / 30)
    assert acc["per_position"] == pytest.approx([0.8, 0.4, 0.1])
    assert acc["native"] == {
        "convention": "vLLM counters: accepted excludes the bonus token; mean acceptance "
                      "length = 1 + accepted/drafts",
        "num_drafts": 10.0, "num_draft_tokens": 30.0, "num_accepted_tokens": 12.0,
        "num_accepted_tokens_per_pos": [8.0, 4.0, 1.0]}


def test_vllm_one_draft_counts_and_any_missing_or_reset_counter_voids_it() -> None:
    acc, flags = acceptance_from_vllm({"drafts": 0.0, "accepted": 0.0},
                                      {"drafts": 1.0, "accepted": 1.0})
    assert flags == [] and acc is not None and acc["acceptance_length"] == 2.0
    assert acc["draft_tokens"] is None  # no draft-token counter: no rate, and no error
    assert acceptance_from_vllm({"drafts": 1.0}, {"drafts": 2.0}) == (None, [])
    assert acceptance_from_vllm({"accepted": 1.0}, {"accepted": 2.0}) == (None, [])
    base = {"drafts": 5.0, "accepted": 5.0, "draft_tokens": 5.0}
    for key in ("drafts", "accepted", "draft_tokens"):
        assert acceptance_from_vllm(base, {**base, key: 4.0}) == (None, ["counter_reset"]), key


# -- probe metrics -----------------------------------------------------------------------------------

def test_metrics_summary_sums_under_the_prefix_and_spells_odd_numbers() -> None:
    samples = [Sample("vllm:a", {"x": "1"}, 1.5), Sample("vllm:a", {"x": "2"}, 2.0),
               Sample("vllm:b", {}, float("nan")), Sample("vllm:c", {}, float("inf")),
               Sample("vllm:d", {}, -math.inf), Sample("other", {}, 9.0)]
    out = metrics_summary(samples, "http://x/metrics", "vllm", prefix="vllm:")
    assert out == {"source": "http://x/metrics", "engine": "vllm",
                   "sums": {"vllm:a": 3.5, "vllm:c": "+Inf", "vllm:d": "-Inf"}}
    assert list(out["sums"]) == ["vllm:a", "vllm:c", "vllm:d"]
    full = metrics_summary(samples[1:3], "s", "vllm", with_samples=True)
    assert full["samples"] == [{"name": "vllm:a", "labels": {"x": "2"}, "value": 2.0},
                               {"name": "vllm:b", "labels": {}, "value": "NaN"}]
    assert metrics_summary([Sample("z", {}, 1.0), Sample("a", {}, 2.0)], "s", "e")["sums"] == {
        "a": 2.0, "z": 1.0}
    tiny = metrics_summary([Sample("p", {}, math.inf), Sample("q", {}, -math.inf)], "s", "e")
    assert tiny["sums"] == {"p": "+Inf", "q": "-Inf"}


def test_sum_by_label_counts_only_the_named_metric() -> None:
    samples = [Sample("spec:accepted", {"position": "0"}, 3.0),
               Sample("spec:accepted", {"position": "1"}, 2.0),
               Sample("spec:accepted", {"position": "0"}, 1.0),
               Sample("spec:drafts", {"position": "0"}, 100.0),
               Sample("spec:accepted", {}, 50.0)]
    assert sum_by_label(samples, "spec:accepted", "position") == {"0": 4.0, "1": 2.0}


# -- /generate (SGLang) stream events ----------------------------------------------------------------

def _gen(keep_ids: bool = False) -> StreamRecorder:
    return StreamRecorder("generate", keep_ids=keep_ids)


def _sse(*payloads: str) -> bytes:
    return b"".join(f"data: {p}\n\n".encode() for p in payloads)


def test_generate_events_time_each_new_token_count_and_keep_the_final_meta() -> None:
    rec = _gen(keep_ids=True)
    rec.feed(_sse('{"meta_info": {"completion_tokens": 1}}'), 1.0)
    rec.feed(_sse('{"meta_info": {"completion_tokens": 1}}'), 1.5)  # no new token: no chunk
    rec.feed(_sse('{"meta_info": {"completion_tokens": 3}}'), 2.0)
    rec.feed(_sse('{"meta_info": {"completion_tokens": 4, "prompt_tokens": 9, '
                  '"finish_reason": {"type": "stop"}}, "output_ids": [5, 6, 7, 8]}',
                  "[DONE]"), 2.5)
    assert (rec.t_first, rec.t_last, rec.chunks) == (1.0, 2.5, 3)
    assert rec.gaps == [1.0, 0.5]
    assert rec.usage == {"completion_tokens": 4, "prompt_tokens": 9}
    assert rec.meta == {"completion_tokens": 4, "prompt_tokens": 9,
                        "finish_reason": {"type": "stop"}}
    assert rec.token_ids == [5, 6, 7, 8] and rec.done and rec.error is None


def test_generate_events_without_counts_or_meta_change_nothing() -> None:
    rec = _gen()
    rec.feed(_sse('{"text": "x"}', '{"meta_info": "bad"}',
                  '{"meta_info": {"completion_tokens": "2"}}',
                  '{"meta_info": {"completion_tokens": 0}}'), 1.0)
    assert rec.t_first is None and rec.chunks == 0 and rec.usage is None and rec.meta is None
    rec.feed(_sse('{"meta_info": {"finish_reason": null, "completion_tokens": 2}}'), 2.0)
    assert rec.meta is None and rec.usage is None and rec.chunks == 1
    rec.feed(_sse('{"meta_info": {"finish_reason": "length", "completion_tokens": 2.0}, '
                  '"output_ids": [1, 2]}'), 3.0)
    assert rec.meta is not None and rec.usage is None  # a count that is not an int is not usage
    assert rec.token_ids == []  # ids only when asked for


def test_the_first_failure_is_the_one_kept() -> None:
    rec = _gen()
    rec.fail("connect refused")
    rec.fail("later noise")
    assert rec.error == "connect refused"


def test_generate_error_events_are_errors_unless_they_carry_meta() -> None:
    rec = _gen()
    rec.feed(_sse('{"error": "' + "e" * 400 + '"}'), 1.0)
    assert rec.error == "server error event: " + "e" * 300
    ok = _gen()
    ok.feed(_sse('{"error": null, "meta_info": {"completion_tokens": 1}}'), 1.0)
    assert ok.error is None and ok.chunks == 1


# -- the HTTP response parser ------------------------------------------------------------------------

def _parser() -> tuple[HTTPResponseParser, list[tuple[bytes, float]]]:
    got: list[tuple[bytes, float]] = []
    return HTTPResponseParser(lambda data, now: got.append((data, now))), got


def test_a_fresh_parser_knows_nothing_yet() -> None:
    p, got = _parser()
    assert (p.status, p.reason, p.headers, p.complete, p.keep_alive) == (0, "", {}, False, True)
    assert (p.bytes_received, p.error_body) == (0, b"")
    p.feed(b"HTTP/1.1 200 OK\r\nContent-Le", 1.0)
    assert p.status == 0 and got == [] and p.bytes_received == 27


def test_a_length_body_is_delivered_with_its_time_and_completes() -> None:
    p, got = _parser()
    p.feed(b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nab", 1.0)
    assert got == [(b"ab", 1.0)] and not p.complete
    p.feed(b"cdeXTRA", 2.0)
    assert got == [(b"ab", 1.0), (b"cde", 2.0)] and p.complete
    assert p.bytes_received == len(b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nab") + 7
    assert (p.status, p.reason, p.keep_alive) == (200, "OK", True)


def test_an_error_body_is_kept_not_delivered_and_capped() -> None:
    p, got = _parser()
    p.feed(b"HTTP/1.1 503 Busy Now\r\nContent-Length: 70000\r\n\r\n", 1.0)
    p.feed(b"x" * 65530, 1.0)
    p.feed(b"y" * 4470, 1.0)
    assert got == [] and p.complete and p.reason == "Busy Now"
    assert p.error_body == b"x" * 65530 + b"y" * 6


def test_a_3xx_body_is_not_the_callers() -> None:
    p, got = _parser()
    p.feed(b"HTTP/1.1 300 Multiple Choices\r\nContent-Length: 4\r\n\r\nmany", 1.0)
    assert got == [] and p.error_body == b"many"
    q, got = _parser()
    q.feed(b"HTTP/1.1 299 Odd\r\nContent-Length: 2\r\n\r\nok", 1.0)
    assert got == [(b"ok", 1.0)]


def test_a_chunked_error_body_is_kept_and_a_chunked_ok_body_delivered() -> None:
    p, got = _parser()
    p.feed(b"HTTP/1.1 500 Oops\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nbad\r\n0\r\n\r\n", 1.0)
    assert got == [] and p.error_body == b"bad" and p.complete
    q, got = _parser()
    q.feed(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: Chunked\r\n\r\n2\r\nok\r\n0\r\n\r\n", 3.0)
    assert got == [(b"ok", 3.0)] and q.complete
    r, got = _parser()
    r.feed(b"HTTP/1.1 201 Created\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nhi\r\n0\r\n\r\n", 4.0)
    assert got == [(b"hi", 4.0)]  # any 2xx body is the caller's


def test_a_read_until_close_body_completes_only_at_eof() -> None:
    p, got = _parser()
    p.feed(b"HTTP/1.1 200 OK\r\n\r\nhello", 1.0)
    assert got == [(b"hello", 1.0)] and not p.complete and not p.keep_alive
    p.eof()
    assert p.complete
    q, _ = _parser()
    q.feed(b"HTTP/1.1 200 OK\r\nContent-Length: 9\r\n\r\nabc", 1.0)
    q.eof()
    assert not q.complete  # a cut length body stays incomplete


@pytest.mark.parametrize(("head", "keep_alive"), [
    (b"HTTP/1.1 200 OK\r\nContent-Length: 0", True),
    (b"HTTP/1.1 200 OK\r\nConnection: Close\r\nContent-Length: 0", False),
    (b"HTTP/1.0 200 OK\r\nContent-Length: 0", False),
    (b"HTTP/1.0 200 OK\r\nConnection: Keep-Alive\r\nContent-Length: 0", True),
])
def test_keep_alive_follows_the_version_and_connection_header(head: bytes,
                                                              keep_alive: bool) -> None:
    p, _ = _parser()
    p.feed(head + b"\r\n\r\n", 1.0)
    assert p.keep_alive is keep_alive and p.complete


def test_a_bare_lf_head_interim_responses_and_empty_statuses() -> None:
    p, got = _parser()
    p.feed(b"HTTP/1.1 200 OK\nX-A:  b \n\nbody", 1.0)
    assert p.headers == {"x-a": "b"} and got == [(b"body", 1.0)]
    q, got = _parser()
    q.feed(b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok", 2.0)
    assert q.status == 200 and got == [(b"ok", 2.0)] and q.complete
    for status in (b"204 No Content", b"304 Not Modified"):
        r, got = _parser()
        r.feed(b"HTTP/1.1 " + status + b"\r\n\r\n", 1.0)
        assert r.complete and got == []
    s, _ = _parser()
    s.feed(b"HTTP/1.1 200\r\nContent-Length: 0\r\n\r\n", 1.0)
    assert s.reason == "" and s.status == 200


@pytest.mark.parametrize(("data", "words"), [
    (b"HTTX/1.1 200 OK\r\n\r\n", "bad status line"),
    (b"HTTP/1.1\r\n\r\n", "bad status line"),
    (b"HTTP/1.1 2x0 OK\r\n\r\n", "bad status code"),
    (b"HTTP/1.1 200 OK\r\nContent-Length: many\r\n\r\n", "bad content-length"),
])
def test_a_malformed_head_is_a_protocol_error(data: bytes, words: str) -> None:
    p, _ = _parser()
    with pytest.raises(ProtocolError, match=words):
        p.feed(data, 1.0)


def test_a_head_that_never_ends_is_refused_past_64_kib() -> None:
    p, _ = _parser()
    p.feed(b"HTTP/1.1 200 OK\r\nX: " + b"a" * 65000, 1.0)  # under the limit: still waiting
    with pytest.raises(ProtocolError, match="response head too large"):
        p.feed(b"a" * 600, 1.0)


def test_the_vllm_snapshot_keeps_the_generated_token_counter() -> None:
    samples = [Sample("vllm:generation_tokens_total", {"engine": "0"}, 100.0),
               Sample("vllm:generation_tokens_total", {"engine": "1"}, 23.0),
               Sample("vllm:spec_decode_num_drafts_total", {}, 7.0)]
    snap = spec_snapshot(samples, "vllm")
    assert snap["generation_tokens"] == 123.0 and snap["drafts"] == 7.0
    assert snap["accepted"] is None and snap["per_pos"] == {}


def test_the_vllm_snapshot_sums_each_counter_across_engines() -> None:
    # two engines (DP ranks): drafts 10 + 5, draft tokens 30 + 15, accepted 20 + 8, of which
    # position 0 took 12 + 5 and position 1 took 8 + 3; generated tokens 100 + 50
    text = "".join(
        f'vllm:spec_decode_num_drafts_total{{engine="{e}"}} {d}\n'
        f'vllm:spec_decode_num_draft_tokens_total{{engine="{e}"}} {t}\n'
        f'vllm:spec_decode_num_accepted_tokens_total{{engine="{e}"}} {a}\n'
        f'vllm:spec_decode_num_accepted_tokens_per_pos_total{{engine="{e}",position="0"}} {p0}\n'
        f'vllm:spec_decode_num_accepted_tokens_per_pos_total{{engine="{e}",position="1"}} {p1}\n'
        f'vllm:generation_tokens_total{{engine="{e}"}} {g}\n'
        for e, d, t, a, p0, p1, g in (("0", 10, 30, 20, 12, 8, 100), ("1", 5, 15, 8, 5, 3, 50)))
    assert spec_snapshot(parse_prometheus(text), "vllm") == {
        "drafts": 15.0, "draft_tokens": 45.0, "accepted": 28.0,
        "per_pos": {"0": 17.0, "1": 11.0}, "generation_tokens": 150.0}


def test_the_sglang_snapshot_reads_its_four_series() -> None:
    # SGLang's /metrics as tailpod/sandbox/synthetic_server.py writes it (the series the probe
    # reads, one tp rank): spec_accept_length is SGLang's own figure and is not taken.
    lbl = 'model_name="qwen",engine_type="unified",tp_rank="0"'
    text = ("# TYPE sglang:generation_tokens_total counter\n"
            f"sglang:generation_tokens_total{{{lbl}}} 1200.0\n"
            f"sglang:num_requests_total{{{lbl}}} 15.0\n"
            f"sglang:spec_verify_calls_total{{{lbl}}} 100.0\n"
            f"sglang:spec_num_draft_tokens{{{lbl}}} 4.0\n"
            f"sglang:spec_accept_length{{{lbl}}} +Inf\n")
    assert spec_snapshot(parse_prometheus(text), "sglang") == {
        "verify_calls": 100.0, "generation_tokens": 1200.0, "requests": 15.0,
        "num_draft_tokens": 4.0}


@pytest.mark.parametrize(("value", "expected"), [
    (None, None), (math.nan, None), (math.inf, None), (-math.inf, None), (0.0, 0.0), (2.5, 2.5),
])
def test_a_row_figure_that_is_not_finite_is_none(value: float | None,
                                                 expected: float | None) -> None:
    # request rows are JSON: NaN and ±Infinity are not JSON numbers, so they are written null
    assert _finite_or_none(value) == expected
