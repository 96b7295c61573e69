"""Per-request acceptance (issue 39 item 1): the engines' own figures read from each response,
normalised to one definition (1 + accepted drafts / verify steps), summarised per cell as
p10/p50/p90, request mean and token-weighted, and checked against the cell's /metrics delta."""

from __future__ import annotations

import json
import statistics
from collections.abc import Callable
from pathlib import Path

import pytest

from tailpod.agent.probes.load import RunOptions, build_body
from tailpod.agent.probes.metrics import (
    PER_REQUEST_MISMATCH_FLAG,
    per_request_summary,
    request_acceptance,
)
from tailpod.agent.probes.stream import RequestSpec, StreamRecorder, result_from_recorder
from tailpod.sandbox.synthetic_server import SyntheticServer
from tests.paths import FIXTURES

from .conftest import probe_run, sweep_cells

SPEC_FIXTURES = FIXTURES / "per-request-spec"


def _stream(*events: bytes) -> StreamRecorder:
    rec = StreamRecorder("chat")
    rec.start()
    rec.feed(b"".join(b"data: " + e + b"\n\n" for e in events), 1.0)
    rec.finish(2.0)
    return rec


def test_vllm_figures_ride_on_the_final_usage_chunk_and_keep_vllms_own_length() -> None:
    final = (SPEC_FIXTURES / "vllm_stream_final_usage_chunk.json").read_bytes().strip()
    delta = (b'{"id":"x","object":"chat.completion.chunk","choices":[{"index":0,'
             b'"delta":{"content":"hi"},"finish_reason":"stop"}]}')
    res = result_from_recorder(RequestSpec(0, "/v1/chat/completions", b"", "cold", "chat"),
                               _stream(delta, final, b"[DONE]"))
    assert res.ok and res.completion_tokens == 54 and res.finish_reason == "stop"
    assert res.spec is not None and res.spec[0] == "vllm"
    got = request_acceptance(*res.spec, res.completion_tokens)
    # by hand from the histogram [39, 1, 0, 3]: accepted = 1*1 + 3*3 = 10 over 39+1+0+3 = 43
    # steps; every slot of K=3 was drafted (3 * 43 = 129 = num_draft_tokens)
    assert got == {"source": "vllm_response", "steps": 43, "accepted": 10, "draft_tokens": 129,
                   "native_length": 1.2325581395348837, "drafts_trimmed": 0,
                   "acceptance_length": pytest.approx(1 + 10 / 43)}
    assert got["acceptance_length"] == pytest.approx(got["native_length"])


def test_sglang_length_drops_the_prefill_token_it_counts() -> None:
    body = json.loads((SPEC_FIXTURES / "sglang_chat_response.json").read_text())
    details = body["sglext"]["spec_tokens_details"]
    got = request_acceptance("sglang", details, body["usage"]["completion_tokens"])
    # 58 tokens: 1 from prefill, 20 verify steps each yield 1 + its accepted drafts:
    # accepted = 58 - 1 - 20 = 37; SGLang's own 58/20 = 2.9 reads 1/20 high
    assert got is not None and got["steps"] == 20 and got["accepted"] == 37
    assert got["acceptance_length"] == pytest.approx(1 + 37 / 20)
    assert got["native_length"] == pytest.approx(2.9)
    counted = dict(details, spec_num_proposed_drafts=60, spec_num_correct_drafts=35)
    assert request_acceptance("sglang", counted, 58)["accepted"] == 35  # type: ignore[index]


def test_sglang_is_asked_for_its_details_and_vllm_is_not() -> None:
    pclass = {"prompts": [], "response_format": None}
    prompt = {"messages": [{"role": "user", "content": "hi"}]}
    _, sglang = build_body(RunOptions(), "m", pclass, prompt, None, engine="sglang")
    _, vllm = build_body(RunOptions(), "m", pclass, prompt, None, engine="vllm")
    assert json.loads(sglang)["return_spec_tokens_details"] is True
    assert "return_spec_tokens_details" not in json.loads(vllm)


@pytest.mark.parametrize("engine", ["vllm", "sglang"])
def test_the_cell_reports_the_distribution_and_agrees_with_metrics(
    synthetic: Callable[..., SyntheticServer], tmp_path: Path, engine: str
) -> None:
    # chunks of 3, 1, 2 tokens after the first: 2, 0, 1 accepted drafts of K = 2 per step
    server = synthetic(spec_k=2, tokens_per_chunk=(3, 1, 2), metrics=engine,
                       per_request_spec=engine)
    rows = probe_run({"base_url": server.base_url, "requests_per_cell": 4, "warmup": 0,
                      "max_tokens": 13, "engine": engine},
                     sweep_cells("mtp-k2", [2], ["prose"]), tmp_path / "rows.jsonl")
    reqs = [r for r in rows if r["kind"] == "request"]
    cell = next(r for r in rows if r["kind"] == "cell")
    # 13 tokens: 1 prefill + chunks 3,1,2,3,1,2: steps 6, accepted 2+0+1+2+0+1 = 6
    for r in reqs:
        assert r["spec_acceptance"]["steps"] == 6 and r["spec_acceptance"]["accepted"] == 6
        assert r["spec_acceptance"]["acceptance_length"] == pytest.approx(2.0)
    summary = cell["acceptance_per_request"]
    lengths = [r["spec_acceptance"]["acceptance_length"] for r in reqs]
    q = statistics.quantiles(lengths, n=10, method="inclusive")
    assert summary["p10"] == pytest.approx(q[0]) and summary["p90"] == pytest.approx(q[8])
    assert summary["p50"] == pytest.approx(statistics.median(lengths))
    assert summary["request_mean"] == pytest.approx(statistics.fmean(lengths))
    assert summary["token_weighted"] == pytest.approx(1 + 24 / 24)
    assert cell["acceptance"]["acceptance_length"] == pytest.approx(summary["token_weighted"])
    assert PER_REQUEST_MISMATCH_FLAG not in cell["flags"]


def test_token_weighted_and_request_mean_differ_when_requests_differ() -> None:
    items = [{"source": "vllm_response", "steps": 10, "accepted": 20, "acceptance_length": 3.0},
             {"source": "vllm_response", "steps": 30, "accepted": 0, "acceptance_length": 1.0}]
    got = per_request_summary(items)
    assert got is not None
    assert got["request_mean"] == pytest.approx(2.0)  # (3 + 1) / 2
    assert got["token_weighted"] == pytest.approx(1 + 20 / 40)  # each step weighs the same


def test_a_per_request_total_that_disagrees_with_metrics_is_flagged(
    synthetic: Callable[..., SyntheticServer], tmp_path: Path
) -> None:
    # one accepted draft more per request than the counters saw: 4 over 24 drafts, beyond the
    # counters' resolution of 1/24
    server = synthetic(spec_k=2, tokens_per_chunk=(3, 1, 2), per_request_spec="vllm",
                       per_request_skew=1)
    rows = probe_run({"base_url": server.base_url, "requests_per_cell": 4, "warmup": 0,
                      "max_tokens": 13, "engine": "vllm"},
                     sweep_cells("mtp-k2", [2], ["prose"]), tmp_path / "rows.jsonl")
    cell = next(r for r in rows if r["kind"] == "cell")
    assert PER_REQUEST_MISMATCH_FLAG in cell["flags"]
    assert cell["acceptance_per_request"]["token_weighted"] == pytest.approx(1 + 28 / 24)
