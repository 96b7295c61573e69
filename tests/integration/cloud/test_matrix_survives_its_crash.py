"""A `matrix` killed with SIGKILL after its first card's pod is up, then resumed (issue 38 item 2,
adversary F2 / scenario 33): `status` names the matrix and says it was interrupted; the resume
settles (proves down) or adopts the killed run's pod before it rents anything, and its budget
counts what that pod already spent. The killed run may die between the ledger's write and
matrix.json's, so the ledger's record names its matrix and card itself."""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from tailpod.cli.main import app
from tailpod.config import Settings
from tailpod.engines.base import EngineConfig
from tailpod.ledger import Ledger, PodRecord
from tailpod.pods.down import down_many
from tailpod.sandbox import Sandbox
from tests.helpers.api_timings import fast_timings
from tests.helpers.lifecycle_policy import fast_policy

from .conftest import kill_9_when_ready
from .test_matrix_faults import A40, IMAGE, VAST4090, SandboxSteps, assert_all_down, matrix, proven
from .test_matrix_faults import settings as settings  # noqa: F401 - the fixture, as there

HELPER = "tests.integration.cloud.interrupted_matrix"  # run from the repository, as a module


class WatchingSteps(SandboxSteps):
    """Keeps what the account billed at each rental; `healthy` says whether a pod left by the
    killed run may be adopted (the sandbox pods run no engine, so it is given)."""

    def __init__(self, sandbox: Sandbox, *, healthy: bool) -> None:
        super().__init__()
        self.sandbox = sandbox
        self.is_healthy = healthy
        self.billing_at_rent: list[list[str]] = []

    def up(self, settings: Settings, cfg: EngineConfig, ledger: Ledger, say: Any) -> PodRecord:
        self.billing_at_rent.append(sorted(str(r["name"]) for r in self.sandbox.billing_now()))
        return super().up(settings, cfg, ledger, say)

    def healthy(self, settings: Settings, ledger: Ledger, record: PodRecord) -> bool:
        return self.is_healthy and record.status == "running"


def _kill_matrix_after_its_first_pod(settings: Settings, tmp_path: Path) -> tuple[str, str, int]:
    """(the matrix id, the killed run's pod tag, the killed pid), the matrix.json left without
    the pod as a kill between the ledger's write and matrix.json's would leave it."""
    env = {"TAILPOD_HOME": str(settings.home), "TAILPOD_RESULTS_DIR": str(settings.results_dir),
           "TAILPOD_MODEL": "org/tiny", "TAILPOD_IMAGE": IMAGE, "TAILPOD_TTL_HOURS": "1",
           "TAILPOD_ENV_FILE": os.devnull,
           "TAILPOD_RUNPOD_URL": settings.runpod_url, "TAILPOD_VAST_URL": settings.vast_url,
           "RUNPOD_API_KEY": settings.runpod_api_key.reveal(),  # type: ignore[union-attr]
           "VAST_API_KEY": settings.vast_api_key.reveal(),  # type: ignore[union-attr]
           "TAILPOD_TAILSCALE_URL": settings.tailscale_url}
    ready = tmp_path / "ready"
    pid = kill_9_when_ready([sys.executable, "-m", HELPER, str(ready)], env, ready)
    tag = ready.read_text()
    [directory] = Path(settings.results_dir).glob("mx-*")
    state = directory / "matrix.json"
    data = json.loads(state.read_text())
    data["cards"][A40].update(pods=[], run_tag=None)
    state.write_text(json.dumps(data))
    return directory.name, tag, pid


def _spent(record: PodRecord) -> float:
    """The pod's $/h times the seconds from its create request to its proven end."""
    start = next(e["t"] for e in record.events if e["event"] == "creating")
    end = next(e["t"] for e in record.events if e["event"] == "billing-proven")
    assert record.price_per_hr is not None
    return record.price_per_hr * (end - start) / 3600.0


def test_status_names_the_interrupted_matrix_and_how_to_resume_or_settle(
        sandbox: Sandbox, settings: Settings, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    mx, tag, pid = _kill_matrix_after_its_first_pod(settings, tmp_path)
    for key, value in {**sandbox.env(), "TAILPOD_HOME": str(settings.home),
                       "TAILPOD_ENV_FILE": os.devnull}.items():
        monkeypatch.setenv(key, value)
    status = CliRunner().invoke(app, ["status", "--no-beat"], terminal_width=200)
    out = " ".join(status.output.split())
    assert f"interrupted matrix {mx}" in out, status.output
    assert f"tailpod matrix --run-id {mx}" in out and f"tailpod down {tag}" in out
    assert f"pid {pid} on" in out
    as_json = CliRunner().invoke(app, ["status", "--json", "--no-beat"])
    [row] = json.loads(as_json.stdout)["pods"]
    assert row["matrix"] == {"id": mx, "card": A40, "interrupted": True}
    down = CliRunner().invoke(app, ["down", tag])
    assert down.exit_code == 0, down.output
    assert sandbox.billing_now() == []


def test_a_resumed_matrix_settles_the_killed_runs_pod_before_renting_and_counts_its_spend(
        sandbox: Sandbox, settings: Settings, tmp_path: Path) -> None:
    mx, tag, _pid = _kill_matrix_after_its_first_pod(settings, tmp_path)
    time.sleep(0.5)  # the killed run's pod bills a little longer
    steps = WatchingSteps(sandbox, healthy=False)
    resumed = matrix(settings, steps, [], run_id=mx)
    # nothing of the killed run billed when the first new pod was rented: no overlap
    assert steps.billing_at_rent[0] == []
    assert len(steps.rented) == 2  # each card rented once by the resume
    cards = resumed.state.data["cards"]
    assert {label: entry["status"] for label, entry in cards.items()} == \
        {A40: "done", VAST4090: "done"}
    assert tag in cards[A40]["pods"] and proven(settings, tag)
    killed = Ledger(settings.state_dir).get(tag)
    assert killed is not None and not killed.active
    # the budget counted the killed run's pod: at least its ledger spend, never $0
    assert resumed.state.data["spent_before_usd"] >= round(_spent(killed), 6) > 0
    assert cards[A40]["spend_usd"] >= _spent(killed)
    assert_all_down(sandbox, settings, resumed)


def test_a_resumed_matrix_adopts_the_killed_runs_healthy_pod_for_its_card(
        sandbox: Sandbox, settings: Settings, tmp_path: Path) -> None:
    mx, tag, _pid = _kill_matrix_after_its_first_pod(settings, tmp_path)
    steps = WatchingSteps(sandbox, healthy=True)
    resumed = matrix(settings, steps, [], run_id=mx)
    cards = resumed.state.data["cards"]
    assert cards[A40]["status"] == "done" and cards[A40]["pods"] == [tag]
    assert len(steps.rented) == 1  # only the vast card was rented: the A40 pod was adopted
    assert steps.billing_at_rent[0] == [tag]
    assert resumed.state.data["spent_before_usd"] > 0
    assert_all_down(sandbox, settings, resumed)


def test_a_resume_after_down_all_still_counts_the_killed_runs_spend(
        sandbox: Sandbox, settings: Settings, tmp_path: Path) -> None:
    mx, tag, _pid = _kill_matrix_after_its_first_pod(settings, tmp_path)
    outcomes = down_many(settings, Ledger(settings.state_dir), policy=fast_policy(),
                         timings=fast_timings())
    assert [o.run_tag for o in outcomes if o.proven] == [tag] and sandbox.billing_now() == []
    killed = Ledger(settings.state_dir).get(tag)
    assert killed is not None and not killed.active
    steps = WatchingSteps(sandbox, healthy=True)
    resumed = matrix(settings, steps, [], run_id=mx)
    assert resumed.state.data["spent_before_usd"] >= round(_spent(killed), 6) > 0
    assert tag in resumed.state.card(A40)["pods"]
    assert len(steps.rented) == 2  # nothing live was left to adopt
    assert_all_down(sandbox, settings, resumed)
