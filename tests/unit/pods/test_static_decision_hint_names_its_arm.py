"""`up --decision` of a static decision says the `up` that deploys it, with the decision's own K
and method (newcomer 3.2: the hint said `tailpod up --spec-k K` though the file holds both;
pods/lanes.py `limit_from_decision`). Refused with exit 2 before anything rents."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from tailpod.cli.main import app
from tailpod.errors import ConfigError

UP = ["up", "--provider", "runpod", "--gpu", "NVIDIA A40", "--max-price", "1", "--model",
      "org/m", "--image", "vllm/vllm-openai:v0.11.0", "--no-first-contact"]


@pytest.fixture()
def rented(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    import tailpod.pods.cloud as cloud_pods

    monkeypatch.setenv("TAILPOD_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("TAILPOD_ENV_FILE", os.devnull)
    reached: list[str] = []

    def rent(*_a: object, **_k: object) -> None:
        reached.append("rental")
        raise ConfigError("rental reached")

    monkeypatch.setattr(cloud_pods, "up_cloud", rent)
    return reached


def _up_refused(tmp_path: Path, deployment: dict[str, Any]) -> tuple[Path, str]:
    """`up --decision` of a decision.json holding `deployment`: its path and what it said, once
    refused with exit 2."""
    path = tmp_path / "decision.json"
    path.write_text(json.dumps({"deployment": deployment}))
    result = CliRunner().invoke(app, [*UP, "--decision", str(path)])
    assert result.exit_code == 2, result.output
    return path, " ".join(result.output.split())


@pytest.mark.parametrize(("deployment", "command"), [
    ({"kind": "static", "k": 2, "method": "ngram", "arm": "ngram-k2"},
     "tailpod up --spec-k 2 --spec-method ngram"),
    ({"kind": "static", "k": 3, "method": "mtp"}, "tailpod up --spec-k 3 --spec-method mtp"),
    ({"kind": "static", "k": 0, "arm": "plain"}, "tailpod up --spec-k 0"),
])
def test_a_static_decision_names_the_up_that_deploys_it(
        tmp_path: Path, rented: list[str], deployment: dict[str, Any], command: str) -> None:
    path, said = _up_refused(tmp_path, deployment)
    assert f"{path}: the deployment is 'static', not two lanes" in said
    assert f"`{command}`" in said
    assert "--spec-k K" not in said
    assert rented == []


@pytest.mark.parametrize(("deployment", "command"), [
    # a mixed deployment serves several arms: no one K to name, whatever K it carries
    ({"kind": "mixed", "k": 2, "method": "ngram"}, "tailpod up --spec-k K"),
    ({"kind": "static", "arm": "plain"}, "tailpod up --spec-k K"),  # no K in the file
    # plain needs no method, even where the file names one
    ({"kind": "static", "k": 0, "method": "mtp"}, "tailpod up --spec-k 0"),
])
def test_a_decision_without_one_k_keeps_the_generic_hint(
        tmp_path: Path, rented: list[str], deployment: dict[str, Any], command: str) -> None:
    _, said = _up_refused(tmp_path, deployment)
    assert f"`{command}`" in said, said
    assert "--spec-method" not in said
    assert rented == []
