"""decision.json refuses a key `tailpod decide` does not write (a misspelling reads as one), at
the top and inside the deployment, naming it; and `decide` checks its own document against the
same model, so what it writes is what `up --decision` reads (issue 37, item 4)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tailpod.errors import ConfigError, TailpodError
from tailpod.results.deployment import checked_decision, read_decision
from tests.unit.results.test_decide import SWEEP
from tests.unit.results.test_deployment_model import compute


def _written(tmp_path: Path, doc: dict[str, Any]) -> Path:
    path = tmp_path / "decision.json"
    path.write_text(json.dumps(doc))
    return path


def test_a_misspelt_top_level_key_is_refused_naming_it(make_run: Any, tmp_path: Path) -> None:
    dec = compute([make_run(SWEEP)])
    dec["deploymnet_gap"] = dec.pop("deployment_gap")
    path = _written(tmp_path, dec)
    with pytest.raises(ConfigError) as err:
        read_decision(path)
    assert "'deploymnet_gap'" in str(err.value) and str(path) in str(err.value)


def test_a_misspelt_deployment_key_is_refused_naming_it(make_run: Any, tmp_path: Path) -> None:
    dec = compute([make_run(SWEEP)])
    assert dec["deployment"]["kind"] == "lanes"
    dec["deployment"]["admision_basis"] = dec["deployment"].pop("admission_basis")
    with pytest.raises(ConfigError, match=r"'deployment\.admision_basis'"):
        read_decision(_written(tmp_path, dec))
    dec = compute([make_run(SWEEP)])
    dec["deployment"]["lanes"][0]["max_conn"] = dec["deployment"]["lanes"][0].pop("maxconn")
    with pytest.raises(ConfigError, match=r"'deployment\.lanes\.0\.max_conn'"):
        read_decision(_written(tmp_path, dec))


def test_decide_refuses_to_write_a_key_the_reader_would_refuse(make_run: Any) -> None:
    dec = compute([make_run(SWEEP)])
    assert checked_decision(dec) is dec
    with pytest.raises(TailpodError, match="'objectve'"):
        checked_decision(dec | {"objectve": "goodput"})
