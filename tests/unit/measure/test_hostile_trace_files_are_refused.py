"""`benchmark --trace F` with a hostile file is refused with exit 2 and a line naming the cause,
before any wait, rental or write (measure/plan.py trace_spec): JSON nested deeper than the
parser's recursion limit, a path that is not a regular file (a FIFO would block the read, a
symlink to /dev/zero would fill memory), and a file larger than the trace size limit."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tailpod.cli.main import app
from tailpod.errors import ConfigError
from tailpod.measure import plan as plan_module
from tailpod.measure.plan import trace_spec

FORMATS = ("tailpod", "mooncake", "session", "aiperf-multi-turn")
DEPTH = 100_000  # far past CPython's default recursion limit of 1000


@pytest.mark.parametrize("fmt", FORMATS)
def test_json_nested_too_deep_is_refused_naming_the_line(tmp_path: Path, fmt: str) -> None:
    f = tmp_path / "deep.jsonl"
    f.write_text("\n" + '{"k": ' + "[" * DEPTH + "]" * DEPTH + "}\n")  # line 1 blank
    with pytest.raises(ConfigError, match=rf"{f}:2: .*nested"):
        trace_spec(f, fmt, 1.0)


@pytest.mark.timeout(10)
def test_a_fifo_is_refused_without_blocking_on_it(tmp_path: Path) -> None:
    fifo = tmp_path / "t.jsonl"
    os.mkfifo(fifo)  # nobody writes: opening it for reading would wait forever
    with pytest.raises(ConfigError, match="not a regular file"):
        trace_spec(fifo, "session", 1.0)


@pytest.mark.timeout(10)
def test_a_symlink_to_dev_zero_is_refused_without_reading_it(tmp_path: Path) -> None:
    link = tmp_path / "t.jsonl"
    link.symlink_to("/dev/zero")
    with pytest.raises(ConfigError, match="not a regular file"):
        trace_spec(link, "aiperf-multi-turn", 1.0)


def test_a_file_over_the_size_limit_is_refused_naming_both_sizes(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(plan_module, "TRACE_MAX_BYTES", 1000)
    f = tmp_path / "big.jsonl"
    f.write_text('{"turns": [{"user": "' + "x" * 1200 + '"}]}\n')
    with pytest.raises(ConfigError, match=r"1[,.]?2\d\d bytes.*limit of 1[,.]?000 bytes"):
        trace_spec(f, "session", 1.0)


def test_cli_deep_trace_exits_2_with_one_line_no_traceback(tmp_path: Path) -> None:
    f = tmp_path / "deep.jsonl"
    f.write_text("[" * DEPTH + "]" * DEPTH + "\n")
    env = {"TAILPOD_HOME": str(tmp_path / "home")}
    res = CliRunner().invoke(app, ["benchmark", "--trace", str(f), "--trace-format", "session"],
                             env=env)
    out = res.output
    assert res.exit_code == 2, out
    assert "Traceback" not in out and "RecursionError" not in out
    assert "nested" in out
    assert not (tmp_path / "home").exists() or not any((tmp_path / "home").rglob("*.json"))


@pytest.mark.parametrize(("fmt", "line"), [
    ("session", {"turns": [{"input_tokens": 10**18}]}),
    ("mooncake", {"timestamp": 0, "input_length": 10**18, "output_length": 4}),
    ("tailpod", {"t_start": 0.0, "prompt_tokens": 10**18, "completion_tokens": 4}),
])
def test_a_prompt_past_any_context_is_refused_even_without_a_known_context_length(
        tmp_path: Path, fmt: str, line: dict[str, object]) -> None:
    """The agent builds each prompt as text on the pod (arrival.approx_prompt): 10^18 tokens
    would exhaust its memory after the pod wait; `check_trace_context` only knew the pod's
    `up --context-length`, when one was given."""
    import json

    f = tmp_path / "t.jsonl"
    f.write_text(json.dumps(line) + "\n")
    with pytest.raises(ConfigError, match=r"1,000,000,000,000,000,000 tokens.*10,000,000"):
        trace_spec(f, fmt, 1.0)


def test_a_long_but_servable_prompt_passes(tmp_path: Path) -> None:
    f = tmp_path / "t.jsonl"
    f.write_text('{"turns": [{"input_tokens": 1000000}]}\n')
    assert trace_spec(f, "session", 1.0)["max_prompt_tokens"] == 1_000_000
