"""A session trace given without `--trace-format session` (the default reads request lines) was
refused with "no requests in the trace" and the hint "--trace-format (this read it as tailpod)",
which names neither the format nor why. Lines that hold `turns` are sessions: the hint names
`--trace-format session` (tailpod's own, with `shared_prefix`/`start_s`) or `aiperf-multi-turn`."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tailpod.errors import ConfigError
from tailpod.measure.plan import trace_spec

SESSION = {"session_id": "s0", "start_s": 0.0, "shared_prefix": "You help.",
           "turns": [{"input_tokens": 30, "max_tokens": 16}, {"user": "go on", "think_s": 0.3}]}
AIPERF = {"session_id": "s0", "turns": [{"text": "hi", "output_length": 8},
                                        {"text": "more", "delay": 500}]}


def _file(tmp_path: Path, line: dict[str, object]) -> Path:
    path = tmp_path / "t.jsonl"
    path.write_text(json.dumps(line) + "\n")
    return path


@pytest.mark.parametrize(("line", "names"), [(SESSION, "--trace-format session"),
                                             (AIPERF, "--trace-format aiperf-multi-turn")])
def test_session_lines_read_as_requests_name_the_session_format(
        tmp_path: Path, line: dict[str, object], names: str) -> None:
    with pytest.raises(ConfigError) as got:
        trace_spec(_file(tmp_path, line), "tailpod", 1.0)
    assert got.value.hint is not None and names in got.value.hint
    assert "holds turns" in got.value.hint


def test_a_request_log_that_is_bad_keeps_the_plain_hint(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as got:
        trace_spec(_file(tmp_path, {"nothing": 1}), "tailpod", 1.0)
    assert got.value.hint == "--trace-format (this read it as tailpod)"
