"""A cell's `arrival` and `options.slo` as the probe checks them (agent/probes/arrival.py
`parse_arrival`, `parse_slo`): what each accepts, and each refusal's exact words, so a probe that
stops names the field and the rule it broke (issue 37 item 10, `make mutate`)."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest

from tailpod.agent.probes.arrival import Arrival, parse_arrival, parse_slo, trace_requests
from tailpod.agent.probes.basics import ProbeError


def _refused(call: Any, raw: Any) -> str:
    with pytest.raises(ProbeError) as err:
        call(raw)
    return str(err.value)


@pytest.fixture()
def mooncake(tmp_path: Path) -> str:
    path = tmp_path / "trace.jsonl"
    path.write_text('{"timestamp": 0, "input_length": 10, "output_length": 5}\n'
                    '{"timestamp": 500, "input_length": 20, "output_length": 5}\n')
    return str(path)


def _trace(path: str, **more: Any) -> dict[str, Any]:
    return {"process": "trace", "trace": {"path": path, "format": "mooncake", "speed": 2.0},
            **more}


def test_a_trace_arrival_is_read_as_given(mooncake: str) -> None:
    assert parse_arrival(_trace(mooncake, requests=1)) == Arrival(
        "trace", None, 1.0, 0, 1, None, {"path": mooncake, "format": "mooncake", "speed": 2.0})


def test_an_open_loop_arrival_takes_its_defaults() -> None:
    # process poisson, burstiness 1, seed 0; a rate under one request a second; one request
    assert parse_arrival({"rate": 0.5, "requests": 1}) == Arrival("poisson", 0.5, 1.0, 0, 1, None)
    assert parse_arrival({"process": "gamma", "rate": "inf", "burstiness": 0.5, "seed": 3,
                          "requests": 2}) == Arrival("gamma", math.inf, 0.5, 3, 2, None)
    assert parse_arrival({"rate": 2, "duration_s": 0.5}) == Arrival("poisson", 2.0, 1.0, 0, None,
                                                                    0.5)


@pytest.mark.parametrize(("raw", "message"), [
    ("poisson", "arrival must be an object"),
    ({"rate": 2, "requests": 1, "nope": 1, "bad": 2}, "unknown arrival key(s): bad, nope"),
    ({"process": "burst", "rate": 2, "requests": 1},
     "arrival process must be one of poisson, gamma, constant, trace"),
    ({"requests": 5}, "arrival rate is required"),
    ({"rate": 0, "requests": 5}, "arrival rate must be > 0 (or inf: all at once)"),
    ({"rate": 2, "burstiness": 0, "requests": 5}, "arrival burstiness must be > 0"),
    ({"rate": 2, "burstiness": "x", "requests": 5},
     "arrival burstiness must be a number, not 'x'"),
    ({"rate": 2, "seed": True, "requests": 5}, "arrival seed must be an integer"),
    ({"rate": 2}, "arrival needs exactly one of requests, duration_s"),
    ({"rate": 2, "requests": 0}, "arrival requests must be an integer >= 1"),
    ({"rate": 2, "requests": True}, "arrival requests must be an integer >= 1"),
    ({"rate": 2, "duration_s": "x"}, "arrival duration_s must be a number, not 'x'"),
    ({"rate": 2, "duration_s": 0}, "arrival duration_s must be > 0"),
    ({"rate": "inf", "duration_s": 5}, "arrival rate inf needs requests, not duration_s"),
    ({"rate": 2.0, "burstiness": True, "requests": 5}, "arrival burstiness must be a number, "
     "not True"),
    ({"rate": 2.0, "burstiness": math.inf, "requests": 5}, "arrival burstiness must be finite"),
    ({"rate": math.nan, "requests": 5}, "arrival rate must be finite"),
    ({"process": "trace", "rate": 2.0, "trace": {}}, "arrival rate is not allowed with process "
     "trace (the trace's own times)"),
    ({"process": "trace", "trace": "t.jsonl"}, "arrival process trace needs trace: {path, "
     "format, speed}"),
    ({"process": "trace", "trace": {"path": "t", "extra": 1, "bogus": 2}},
     "unknown trace key(s): bogus, extra"),
    ({"process": "trace", "trace": {"path": ""}}, "trace path must be a non-empty string"),
    ({"process": "trace", "trace": {"path": "t", "format": "csv"}},
     "trace format must be one of tailpod, mooncake, session, aiperf-multi-turn"),
    ({"process": "trace", "trace": {"path": "t", "speed": "fast"}},
     "arrival trace speed must be a number, not 'fast'"),
    ({"process": "trace", "trace": {"path": "t", "speed": 0}}, "trace speed must be > 0"),
    ({"process": "trace", "trace": {"path": "t"}, "requests": 3, "duration_s": 9},
     "a trace takes at most one of requests, duration_s (its first N, or its first seconds)"),
    ({"process": "trace", "trace": {"path": "t"}, "requests": 0},
     "arrival requests must be an integer >= 1"),
    ({"process": "trace", "trace": {"path": "t"}, "requests": True},
     "arrival requests must be an integer >= 1"),
    ({"process": "trace", "trace": {"path": "t"}, "duration_s": "x"},
     "arrival duration_s must be a number, not 'x'"),
    ({"process": "trace", "trace": {"path": "t"}, "duration_s": 0},
     "arrival duration_s must be > 0"),
])
def test_each_arrival_refusal_says_what_is_wrong(raw: Any, message: str) -> None:
    assert _refused(parse_arrival, raw) == message


def test_a_trace_file_that_cannot_be_read_is_named(tmp_path: Path) -> None:
    missing = str(tmp_path / "none.jsonl")
    assert _refused(parse_arrival, _trace(missing)) == f"trace {missing}: No such file or directory"
    bad = tmp_path / "bad.jsonl"
    bad.write_text("{\n")
    arrival = Arrival("trace", None, trace={"path": str(bad), "format": "tailpod", "speed": 1.0})
    assert _refused(trace_requests, arrival) == f"{bad}:1: not valid JSON"


def test_an_arrival_records_its_duration_only_when_it_has_one() -> None:
    assert Arrival("poisson", 2.0, duration_s=30.0).as_json() == {
        "process": "poisson", "rate": 2.0, "burstiness": 1.0, "seed": 0, "duration_s": 30.0}
    assert Arrival("constant", math.inf, requests=4).as_json() == {
        "process": "constant", "rate": "inf", "burstiness": 1.0, "seed": 0, "requests": 4}


def test_an_slo_keeps_the_targets_given() -> None:
    assert parse_slo({"ttft_ms": None, "tpot_ms": 50, "e2el_ms": 0.5}) == {
        "tpot_ms": 50.0, "e2el_ms": 0.5}
    assert parse_slo({}) is None and parse_slo(None) is None


@pytest.mark.parametrize(("raw", "message"), [
    ([500], "slo must be an object"),
    ({"ttft": 1, "p99": 2}, "unknown slo key(s): p99, ttft"),
    ({"ttft_ms": 0}, "slo ttft_ms must be a number > 0"),
    ({"ttft_ms": True}, "slo ttft_ms must be a number > 0"),
    ({"ttft_ms": "500"}, "slo ttft_ms must be a number > 0"),
    ({"tpot_ms": math.inf}, "slo tpot_ms must be a number > 0"),
])
def test_each_slo_refusal_names_the_target(raw: Any, message: str) -> None:
    assert _refused(parse_slo, raw) == message
