"""The acceptance fingerprint on the real CPU vLLM engine: the same draft-model pair measured twice
(a fresh engine each time) agrees; the same pair with the draft checkpoint swapped under the same
name is flagged, and the flag names the draft revision. One engine for the module, relaunched per
run; c=1, one rep, few tokens."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from tailpod.cli.main import app
from tailpod.engines.tiny_checkpoint import build_checkpoint
from tailpod.sandbox.podhost import free_port

pytestmark = pytest.mark.engine
runner = CliRunner()


def invoke(*args: str) -> Any:
    result = runner.invoke(app, list(args), catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return result


@pytest.fixture(scope="module")
def runs(
    engine_env: dict[str, str],
    tiny_models: dict[str, Path],
    tmp_path_factory: pytest.TempPathFactory,
    leftover_engines: Any,
) -> Any:
    draft = build_checkpoint(tmp_path_factory.mktemp("pair") / "draft", "draft")
    spec = ["--spec-k", "2", "--spec-method", "draft_model", "--draft-model", str(draft)]
    bench = ["--concurrency", "1", "--reps", "1", "--max-tokens", "24", "--no-extend-k"]
    record = json.loads(
        invoke("up", "--provider", "local", "--model", str(tiny_models["target"]),
               "--port", str(free_port()), *spec, "--json").stdout
    )  # fmt: skip
    tag = record["run_tag"]
    results = Path(engine_env["TAILPOD_RESULTS_DIR"])
    try:
        invoke("benchmark", *spec, *bench, "--run-id", "first")
        invoke("up", "--relaunch", tag, *spec)  # a fresh engine for the honest repeat
        invoke("benchmark", *spec, *bench, "--run-id", "repeat")
        # The draft checkpoint is swapped under the same name. The tiny models' tied embeddings
        # make a weakly initialised one echo its input, as the target does, so it accepts all;
        # the swapped revision is initialised strongly enough to predict otherwise.
        shutil.rmtree(draft)
        build_checkpoint(draft, "draft", seed=1, std=0.5)
        invoke("up", "--relaunch", tag, *spec)
        invoke("benchmark", *spec, *bench, "--run-id", "swapped")
    finally:
        runner.invoke(app, ["down", tag])
    assert leftover_engines(str(tiny_models["target"].parent)) == set()
    return {name: results / name for name in ("first", "repeat", "swapped")}


def fingerprint_arm(run_dir: Path) -> dict[str, Any]:
    run = json.loads((run_dir / "run.json").read_text())
    (arm,) = run["fingerprint"]["arms"]
    return dict(arm)


def test_each_run_records_its_fingerprint(runs: dict[str, Path]) -> None:
    arm = fingerprint_arm(runs["first"])
    assert arm["arm"] == "draft_model-k2" and arm["drafter"]["loaded"] is True
    assert arm["checkpoints"]["draft_model"]["revision"].startswith("sha256:")
    assert arm["checkpoints"]["model"]["revision"].startswith("sha256:")
    length = arm["ladder"]["prose"]["acceptance_length"]["median"]
    assert 1.0 <= length <= 3.0
    swapped = fingerprint_arm(runs["swapped"])
    assert swapped["checkpoints"]["draft_model"] != arm["checkpoints"]["draft_model"]
    assert swapped["checkpoints"]["model"] == arm["checkpoints"]["model"]


def test_the_same_pair_twice_agrees(runs: dict[str, Path]) -> None:
    result = invoke("compare", str(runs["first"]), str(runs["repeat"]), "--json")
    fp = json.loads(result.stdout)["fingerprint"]
    assert [c["status"] for c in fp["checks"]] == ["agrees"], fp
    assert fp["flags"] == []


def test_the_swapped_draft_is_flagged_with_its_revision(runs: dict[str, Path]) -> None:
    result = invoke("compare", str(runs["first"]), str(runs["swapped"]))
    first = fingerprint_arm(runs["first"])["checkpoints"]["draft_model"]["revision"]
    assert "FLAG: acceptance of draft_model-k2 (prose) differs" in result.output
    assert f"different draft checkpoint revision: {first} in first" in result.output
