"""The serve tax's bare decode answers the same way on this machine and on a pod
(measure/hosts.py bare_measured): the rows bare.py wrote, in order, and the tool its first row
names; no rows, no tool."""

from __future__ import annotations

from tailpod.measure.hosts import bare_measured


def test_the_rows_and_the_first_rows_tool() -> None:
    text = '{"tool": "vllm-bare", "concurrency": 1}\n\n  {"tool": "vllm-bare", "concurrency": 2}\n'
    assert bare_measured(text) == {
        "status": "measured", "tool": "vllm-bare",
        "rows": [{"tool": "vllm-bare", "concurrency": 1}, {"tool": "vllm-bare", "concurrency": 2}],
    }


def test_an_empty_rows_file_names_no_tool() -> None:
    assert bare_measured("\n") == {"status": "measured", "tool": None, "rows": []}
