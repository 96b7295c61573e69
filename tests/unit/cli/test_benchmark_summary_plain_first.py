"""`benchmark`'s summary table lists plain, the baseline, first and the speculative arms after it
by K, as the sweep ran them. At e816682 it sorted by arm name: `ngram-k2, ngram-k3, plain`, and
`mtp-k10` before `mtp-k2` (newcomer 2.10)."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
from rich.console import Console

from tailpod.cli.benchmark import summary_table
from tailpod.results.io import write_run
from tests.helpers.run_builder import build_run


def _arm_column(run_dir: Path) -> list[tuple[str, str]]:
    buf = io.StringIO()
    Console(file=buf, width=200, color_system=None).print(summary_table(run_dir, "benchmark r"))
    rows = [[c.strip() for c in line.split("│")[1:3]] for line in buf.getvalue().splitlines()
            if line.startswith("│") and "arm" not in line]
    return [(arm, c) for arm, c in rows]


@pytest.mark.parametrize("labels", [["plain", "ngram-k2", "ngram-k3"],
                                    ["plain", "mtp-k2", "mtp-k10"]])
def test_plain_leads_the_summary_then_k_ascending(tmp_path: Path, labels: list[str]) -> None:
    run = build_run({label: {1: [100.0], 4: [300.0]} for label in labels})
    rows = _arm_column(write_run(run, tmp_path / "r"))
    assert rows == [(label, c) for label in labels for c in ("1", "4")]


def test_each_spec_arm_says_its_throughput_against_plain_at_the_same_c(tmp_path: Path) -> None:
    run = build_run({"plain": {1: [100.0], 4: [300.0]}, "ngram-k2": {1: [150.0], 4: [270.0]}})
    buf = io.StringIO()
    Console(file=buf, width=200, color_system=None).print(
        summary_table(write_run(run, tmp_path / "r"), "benchmark r"))
    rows = [[c.strip() for c in line.split("│")[1:6]] for line in buf.getvalue().splitlines()
            if line.startswith("│") and "arm" not in line]
    # 150 / 100 and 270 / 300, worked out here; plain is the baseline itself
    assert [(r[0], r[1], r[4]) for r in rows] == [
        ("plain", "1", "-"), ("plain", "4", "-"), ("ngram-k2", "1", "1.50×"),
        ("ngram-k2", "4", "0.90×")]


def test_a_void_arm_has_no_speedup_printed(tmp_path: Path) -> None:
    run = build_run({"plain": {1: [100.0]}, "mtp-k2": {1: [150.0]}},
                    void={"mtp-k2": "token mismatch"})
    buf = io.StringIO()
    Console(file=buf, width=200, color_system=None).print(
        summary_table(write_run(run, tmp_path / "r"), "benchmark r"))
    (spec,) = [line for line in buf.getvalue().splitlines()
               if "mtp-k2" in line and line.startswith("│")]
    assert "void" in spec.split("│")[5] and "1.50" not in spec


def test_the_table_says_each_arms_gate(tmp_path: Path) -> None:
    run = build_run({"plain": {1: [100.0]}, "mtp-k2": {1: [150.0]}, "mtp-k3": {1: [160.0]}},
                    void={"mtp-k3": "token mismatch"})
    buf = io.StringIO()
    Console(file=buf, width=200, color_system=None).print(
        summary_table(write_run(run, tmp_path / "r"), "benchmark r"))
    said = " ".join(buf.getvalue().split())
    # the run builder gates each spec arm on 6 prompts by token ids; a void arm failed at
    # prompt 1, position 17
    assert "gate mtp-k2 against plain (token_ids, 6 prompts): pass" in said, said
    assert ("gate mtp-k3 against plain (token_ids, 6 prompts): fail at prompt 1, position 17"
            in said), said
    assert "gate plain" not in said
