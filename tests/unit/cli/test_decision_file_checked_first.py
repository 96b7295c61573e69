"""A forged or damaged decision.json (issue 38 item 1, adversary F8, scenarios 5 and 6) is checked
against the decision's model (results/deployment.py) before anything rents, waits on a pod or
stops its engine: exit 2, one line naming the field, never a traceback, never a cast (`k: 2.9`
is not K=2)."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from tailpod.cli import benchmark as benchmark_cli
from tailpod.cli.main import app
from tailpod.errors import ConfigError


def lanes(k: Any = 2, limit: Any = 2, **spec: Any) -> dict[str, Any]:
    return {"deployment": {"kind": "lanes", "admission_limit": limit,
                           "lanes": [{"name": "spec", "k": k, "method": "ngram", **spec},
                                     {"name": "plain", "k": 0, "method": None}]}}


# (file content, words the refusal must hold); json.dumps writes 1e400 as Infinity, so those
# two are written as text, as a forger would
FORGED: list[tuple[Any, str]] = [
    ([], "it must be a JSON object with a deployment"),
    ({"deployment": {"kind": "lanes", "admission_limit": 2}}, "deployment.lanes: Field required"),
    (lanes(k="abc"), "deployment.lanes.0.k"),
    ('{"deployment": {"kind": "lanes", "admission_limit": 2, "lanes": '
     '[{"k": 1e400}, {"k": 0}]}}', "deployment.lanes.0.k"),
    ('{"deployment": {"kind": "lanes", "admission_limit": 1e400, "lanes": '
     '[{"k": 2}, {"k": 0}]}}', "deployment.admission_limit"),
    ({"deployment": {"kind": "lanes", "admission_limit": 2, "lanes": []}},
     "deployment.lanes: must be two lanes"),
    ({"deployment": "lanes"}, "deployment"),
    (lanes(k=2.9, limit=1.7), "deployment.lanes.0.k: Input should be a valid integer (got 2.9)"),
    (lanes(k=-1), "deployment.lanes.0.k"),
    (lanes(limit=-3), "deployment.admission_limit"),
    (lanes(limit=0), "deployment.admission_limit"),
    (lanes(k=True), "deployment.lanes.0.k"),
    (lanes(method="x; touch /tmp/tailpod-forged"), "deployment.lanes.0.method"),
    (lanes(k=99), "deployment.lanes.0.k"),
    ({"deployment": {"kind": "lanes", "admission_limit": 2, "lanes": [{"k": 0}, {"k": 2}]}},
     "deployment.lanes: must be two lanes"),
]
STATIC_FORGED: list[tuple[Any, str]] = [
    ({"deployment": {"kind": "static", "k": 99, "method": "ngram"}}, "deployment.k"),
    ({"deployment": {"kind": "static", "k": 2.9, "method": "ngram"}}, "deployment.k"),
    ({"deployment": {"kind": "static", "k": 2, "method": "x; touch /tmp/tailpod-forged"}},
     "deployment.method"),
    ({"deployment": {"kind": "banana"}}, "deployment"),
]


def _write(tmp_path: Path, content: Any) -> Path:
    path = tmp_path / "decision.json"
    path.write_text(content if isinstance(content, str) else json.dumps(content))
    return path


@pytest.fixture()
def env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, list[str]]:
    """`up`'s rental and `benchmark`'s ledger, SSH wait and sweep, each recorded and stopped."""
    import tailpod.pods.cloud as cloud_pods

    monkeypatch.setenv("TAILPOD_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("TAILPOD_ENV_FILE", os.devnull)
    reached: dict[str, list[str]] = {"up": [], "benchmark": []}

    def stop(command: str, what: str):  # type: ignore[no-untyped-def]
        def f(*_a: object, **_k: object) -> None:
            reached[command].append(what)
            raise ConfigError(f"{what} reached")
        return f

    monkeypatch.setattr(cloud_pods, "up_cloud", stop("up", "rental"))
    monkeypatch.setattr(benchmark_cli, "ledger_for", stop("benchmark", "ledger"))
    monkeypatch.setattr("tailpod.measure.hosts.sweep_host", stop("benchmark", "ssh wait"))
    monkeypatch.setattr("tailpod.measure.sweep.run_sweep", stop("benchmark", "sweep"))
    return reached


UP = ["up", "--provider", "runpod", "--gpu", "NVIDIA A40", "--max-price", "1", "--model",
      "org/m", "--image", "vllm/vllm-openai:v0.11.0", "--no-first-contact"]


def _said(output: str) -> str:
    return " ".join(output.split())


@pytest.mark.parametrize(("content", "names"), FORGED)
def test_up_decision_refuses_a_forged_file_before_renting(
        tmp_path: Path, env: dict[str, list[str]], content: Any, names: str) -> None:
    path = _write(tmp_path, content)
    result = CliRunner().invoke(app, [*UP, "--lanes", "spec:2,plain", "--decision", str(path)])
    assert result.exit_code == 2, result.output
    assert isinstance(result.exception, SystemExit), result.output  # no traceback
    assert f"{path} is not a decision" in _said(result.output)
    assert names in _said(result.output)
    assert env["up"] == []


@pytest.mark.parametrize(("content", "names"), FORGED + STATIC_FORGED)
def test_benchmark_deploy_refuses_a_forged_file_before_the_pod(
        tmp_path: Path, env: dict[str, list[str]], content: Any, names: str) -> None:
    path = _write(tmp_path, content)
    result = CliRunner().invoke(app, ["benchmark", "tp-x", "--spec-k", "0", "--deploy",
                                      str(path)])
    assert result.exit_code == 2, result.output
    assert isinstance(result.exception, SystemExit), result.output
    assert f"{path} is not a decision" in _said(result.output)
    assert names in _said(result.output)
    assert env["benchmark"] == []  # not even the ledger: the engine is never stopped for it
    assert not Path("/tmp/tailpod-forged").exists()


def test_a_good_decision_reaches_the_rental_and_the_ledger(
        tmp_path: Path, env: dict[str, list[str]]) -> None:
    """The stops above are reached with a decision `tailpod decide` writes."""
    path = _write(tmp_path, lanes(k=2, limit=3))
    result = CliRunner().invoke(app, [*UP, "--decision", str(path)])
    assert env["up"] == ["rental"], result.output
    result = CliRunner().invoke(app, ["benchmark", "tp-x", "--spec-k", "0", "--deploy",
                                      str(path)])
    assert env["benchmark"] == ["ledger"], result.output
