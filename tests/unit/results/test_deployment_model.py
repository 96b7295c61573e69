"""The decision's model (results/deployment.py) takes every deployment `tailpod decide` writes:
the readers (`up --decision`, `benchmark --deploy`) refuse forged files
(tests/unit/cli/test_decision_file_checked_first.py), never a real one."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tailpod.errors import ConfigError
from tailpod.results import decide
from tailpod.results.analysis import analyze
from tailpod.results.deployment import read_decision
from tests.unit.results.test_decide import SWEEP


def compute(runs: list[Any], **kw: Any) -> dict[str, Any]:
    """decide.compute with each run's own analysis, as the CLI gives it."""
    return decide.compute(runs, analyses=[analyze(r) for r in runs], **kw)


@pytest.mark.parametrize(("sweep", "kind"), [
    (SWEEP, "lanes"),
    ({"plain": {1: [100, 105, 110], 4: [400, 410, 420]},
      "mtp-k2": {1: [105, 110, 115], 4: [300, 305, 310]}}, "static"),
    ({"plain": {1: [200, 201, 199], 2: [300, 301, 299], 4: [300, 301, 299]},
      "mtp-k2": {1: [100, 101, 99], 2: [200, 201, 199], 4: [500, 501, 499]}}, "mixed"),
])
def test_what_decide_writes_reads_back_unchanged(make_run: Any, tmp_path: Path,
                                                 sweep: dict[str, Any], kind: str) -> None:
    dec = compute([make_run(sweep)])
    path = tmp_path / "decision.json"
    path.write_text(json.dumps(dec))
    dep = read_decision(path)
    assert dep["kind"] == kind
    assert dep == json.loads(json.dumps(dec["deployment"]))  # nothing cast, nothing dropped


def test_an_unreadable_decision_is_one_line(tmp_path: Path) -> None:
    path = tmp_path / "decision.json"
    path.write_text("{")
    with pytest.raises(ConfigError) as caught:
        read_decision(path)
    assert caught.value.exit_code == 2 and "cannot read the decision" in caught.value.message
