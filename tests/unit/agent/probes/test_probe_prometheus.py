"""The hand-written Prometheus text parser: real shapes, escapes, odd values, and fuzz."""

from __future__ import annotations

import math

from hypothesis import given, settings
from hypothesis import strategies as st

from tailpod.agent.probes import metrics, transport

EXPOSITION = r'''# HELP vllm:spec_decode_num_drafts Number of spec decoding drafts.
# TYPE vllm:spec_decode_num_drafts counter
vllm:spec_decode_num_drafts_total{engine="0",model_name="m"} 500.0
vllm:spec_decode_num_drafts_total{engine="1",model_name="m"} 25.0
vllm:spec_decode_num_drafts_created{engine="0",model_name="m"} 1.7563e+09
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="m",position="0"} 481.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="1",model_name="m",position="0"} 9.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="m",position="1"} 461.0
vllm:kv_cache_usage_perc{engine="0"} NaN
up_forever +Inf
down_forever -Inf 1712345678000
quoted{note="say \"hi\" \\ now\nnext",  other = "x" ,} 3
bare_metric 42
broken{unterminated="x} 1
nolabelvalue{a=} 2
missing_value{a="b"}
'''


def test_parses_labels_values_and_escapes() -> None:
    samples = metrics.parse_prometheus(EXPOSITION)
    by_name: dict[str, list[metrics.Sample]] = {}
    for s in samples:
        by_name.setdefault(s.name, []).append(s)
    assert by_name["quoted"][0].labels == {"note": 'say "hi" \\ now\nnext', "other": "x"}
    assert by_name["quoted"][0].value == 3.0
    assert by_name["bare_metric"][0].value == 42.0
    assert math.isinf(by_name["up_forever"][0].value) and by_name["up_forever"][0].value > 0
    assert by_name["down_forever"][0].value == -math.inf  # the timestamp is ignored
    assert math.isnan(by_name["vllm:kv_cache_usage_perc"][0].value)
    for bad in ("broken", "nolabelvalue", "missing_value"):
        assert bad not in by_name  # malformed lines are skipped, not fatal


def test_sums_across_engines_and_matches_the_exact_name() -> None:
    samples = metrics.parse_prometheus(EXPOSITION)
    assert metrics.sum_metric(samples, "vllm:spec_decode_num_drafts_total") == 525.0
    # the _created timestamp series must never leak into a counter
    assert metrics.sum_metric(samples, "vllm:spec_decode_num_drafts") is None
    assert metrics.sum_metric(samples, "absent_total") is None
    per_pos = metrics.sum_by_label(
        samples, "vllm:spec_decode_num_accepted_tokens_per_pos_total", "position"
    )
    assert per_pos == {"0": 490.0, "1": 461.0}
    assert transport.detect_engine(samples) == "vllm"


def test_sglang_names_are_detected() -> None:
    samples = metrics.parse_prometheus('sglang:spec_verify_calls_total{tp_rank="0"} 7\n')
    assert transport.detect_engine(samples) == "sglang"
    assert transport.detect_engine([]) == "none"


@settings(max_examples=300, deadline=None)
@given(st.text())
def test_never_raises_on_arbitrary_text(text: str) -> None:
    for s in metrics.parse_prometheus(text):
        assert isinstance(s.value, float) and isinstance(s.labels, dict)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.sampled_from(
    ["{", "}", '"', "\\", "=", ",", " ", "\n", "# TYPE ", "a", "_total", "NaN", "+Inf", "1e9",
     "-", ".", ":", "0"]), max_size=60))
def test_never_raises_on_exposition_like_fragments(parts: list[str]) -> None:
    metrics.parse_prometheus("".join(parts))


label_values = st.text(alphabet=st.characters(exclude_categories=["Cs"]), max_size=20)


@settings(max_examples=200, deadline=None)
@given(label_values, st.floats(allow_nan=False))
def test_escaped_label_values_round_trip(value: str, number: float) -> None:
    escaped = value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
    line = f'm_total{{a="{escaped}",b="2"}} {number!r}\n'
    samples = metrics.parse_prometheus(line)
    assert len(samples) == 1
    assert samples[0].labels == {"a": value, "b": "2"}
    assert samples[0].value == number
