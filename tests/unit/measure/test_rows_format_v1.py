"""Rows stay format v1 across the pod agent: a results directory the probe.py sweep wrote reads
the same today, and the agent's sweep writes rows of the same shape and bookkeeping (the cells'
rep and cell id come from the laptop's one sweep loop, as the renumbered rows had them)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from tailpod.results.io import load_run
from tests import paths

FIXTURE = paths.FIXTURES / "results-v1-probe-py"
REPO = paths.REPO
ADDED_SINCE_THE_FIXTURE = {"provider_facts", "cold_start"}  # docs/results.md (issues 25, 29)
# request-row keys added since, additive (issue 39: why each stream ended, docs/probe.md)
ROW_KEYS_ADDED_SINCE = {"request": {"finish_reason"}, "cell": set()}


def _rows(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line]


def _shape(rows: list[dict[str, Any]]) -> dict[str, set[str]]:
    keys: dict[str, set[str]] = {}
    for row in rows:
        keys.setdefault(row["kind"], set()).update(row)
    return keys


def _bookkeeping(rows: list[dict[str, Any]]) -> list[tuple[Any, ...]]:
    return [(r["kind"], r["arm"], r["cell"], r["rep"], r["concurrency"], r["schema_version"])
            for r in rows]  # fmt: skip


def test_a_results_directory_written_before_reads_the_same() -> None:
    run = load_run(FIXTURE)
    assert run.meta.schema_version == 1 and run.meta.finished_at
    assert [a.label for a in run.meta.arms] == ["plain", "mtp-k2"]
    assert sorted(c.cell for c in run.cells) == sorted(
        f"{arm}|c{c}|r{r}|prose" for arm in ("plain", "mtp-k2") for c in (1, 2) for r in (0, 1)
    )
    assert all(c.requests == 4 and c.failed == 0 for c in run.cells)
    assert len(run.requests) == 32


def test_the_agent_sweep_writes_the_same_format_and_bookkeeping(tmp_path: Path) -> None:
    out = tmp_path / "run"
    subprocess.run(
        [sys.executable, str(FIXTURE / "write_fixture.py"), str(out), str(REPO)],
        check=True, capture_output=True, timeout=300,
    )  # fmt: skip
    before, after = _rows(FIXTURE / "rows.jsonl"), _rows(out / "rows.jsonl")
    new, old = _shape(after), _shape(before)
    assert set(new) == set(old)
    for kind in old:
        assert old[kind] <= new[kind]
        assert new[kind] - old[kind] == ROW_KEYS_ADDED_SINCE[kind]
    assert _bookkeeping(after) == _bookkeeping(before)
    old_run, new_run = (json.loads((d / "run.json").read_text()) for d in (FIXTURE, out))
    # Every key the old writer wrote is still written; run.json keys added since (additive, v1
    # readers ignore them) are named here.
    assert set(old_run) <= set(new_run)
    assert set(new_run) - set(old_run) == ADDED_SINCE_THE_FIXTURE
    assert [a["gate"] for a in new_run["arms"]] == [a["gate"] for a in old_run["arms"]]
    assert load_run(out).meta.schema_version == 1
