"""`tailpod matrix --dry-run` projects a card's setup and restart from an earlier run of that card
and engine (measure/matrix_run.py measured_start), says which it used, and keeps the defaults for a
card no run measured. Prices come from the RunPod emulator (tailpod/sandbox)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tailpod.cli.main import app
from tailpod.provision.volumes import cold_start
from tailpod.results.io import write_run
from tailpod.sandbox import Sandbox
from tailpod.sandbox.model import default_runpod_catalog
from tests.helpers.run_builder import build_run
from tests.unit.cli.conftest import REGISTRY_IMAGE


def test_dry_run_uses_an_earlier_runs_start(registry_sandbox: Sandbox, tmp_path: Path,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    results = tmp_path / "results"
    env = {**registry_sandbox.env(), "TAILPOD_HOME": str(tmp_path / "home"),
           "TAILPOD_ENV_FILE": os.devnull, "TAILPOD_RESULTS_DIR": str(results)}
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    # an earlier A40 run that billed 360 s to serving (6 min) and restarted its mtp arm in 120 s
    earlier = build_run({"plain": {1: [10.0]}, "mtp-k2": {1: [12.0]}}, run_id="a40-before")
    earlier.meta.provider = "runpod"
    earlier.meta.pod.gpu, earlier.meta.pod.gpu_count = "NVIDIA A40", 1  # as the pod records it
    earlier.meta.cold_start = cold_start([{"t": 0.0, "event": "creating"}], 0.4, 360.0, {}, None)
    earlier.meta.arms[1].restart_s = 120.0
    write_run(earlier, results / "a40-before")
    # ngram: Qwen3-0.6B has no MTP head, and matrix refuses an arm its checkpoint cannot run
    result = CliRunner().invoke(app, [
        "matrix", "--dry-run", "--json", "--card", "runpod:A40", "--card", "runpod:L40S",
        "--spec-k", "0,2", "--spec-method", "ngram", "--concurrency", "1", "--reps", "1",
        "--budget", "20", "--model", "Qwen/Qwen3-0.6B", "--image", REGISTRY_IMAGE])
    assert result.exit_code == 0, result.output
    prices = json.loads(result.stdout)["prices"]
    a40, a100 = prices["runpod:A40"], prices["runpod:L40S"]
    assert a40["start"]["setup_min"] == 6.0 and a40["start"]["restart_min"] == 2.0
    assert a40["start"]["run_id"] == "a40-before"
    assert a100["start"]["setup_min"] == 20.0 and a100["start"]["setup_from"] == "default"
    # arms 0, 2 and the K extension's 3: 3 arms, 3 cells; 6 + 2 x 2 + 3 x 1 + 2 teardown = 15 min
    assert a40["hours"] == 0.25
    price = next(g.secure_price for g in default_runpod_catalog() if g.name == "A40")
    assert a40["projected_usd"] == pytest.approx(round(price * 0.25, 4))
    # the default card: 20 + 2 x 3 + 3 + 2 = 31 min
    assert a100["hours"] == pytest.approx(round(31 / 60, 4))
    said = "".join(result.stderr.split())  # Rich folds long lines
    assert "setup6min(measured:billedtoserving),restart2min(measured:armrestarts)fromruna40-before" \
        in said
    assert "setup20min(default),restart3min(default)" in said
