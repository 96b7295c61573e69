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
