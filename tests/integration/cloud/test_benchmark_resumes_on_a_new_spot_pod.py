"""`benchmark --resume-on-preemption` on a vast.ai spot pod that loses its bid mid-sweep (issue 40
item 3), against the sandbox cloud: the stopped pod is destroyed and proven gone (its disk
included) before its card is rented again, under the same price cap, as a spot pod (or the next
card of its preference list when the card has no capacity); the sweep goes on from its last
finished cell on the new pod with the gate's reference taken there first; no cell is counted
twice or half, every cell names the pod it came from; run.json and the report say how many
preemptions, their minutes and dollars, and which cells came from which pod.

The pods are really rented and destroyed (the ledger-first create, the billing proof); the pod's
side of the sweep is scripted (test_matrix_faults.ScriptedHost), as is the new pod's bootstrap
(SandboxSteps: no SSH, no engine)."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner, Result

from tailpod.cli.main import app
from tailpod.config import Settings
from tailpod.engines.base import EngineConfig
from tailpod.ledger import Ledger, PodRecord
from tailpod.provision.base import PodSpec
from tailpod.provision.create import up_remote
from tailpod.sandbox import Sandbox
from tests.helpers.api_timings import fast_timings
from tests.helpers.lifecycle_policy import fast_policy

from .conftest import settings_for
from .test_matrix_faults import IMAGE, SandboxSteps, ScriptedHost
from .test_matrix_spot import PreemptedHost

CAP = 0.5  # $/h: every RTX 4090 and 3090 spot offer of the emulator is under it
PREFERENCE = ["RTX 4090", "RTX 3090"]
BENCH = ["--spec-k", "0,1", "--spec-method", "ngram", "--no-extend-k", "--concurrency", "1,2",
         "--reps", "1", "--max-tokens", "16", "--run-id", "spot-run"]
PLANNED = 2 * 2 * 1  # arms x concurrency levels x reps


def _env(sandbox: Sandbox, home: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    env = {**sandbox.env(), "TAILPOD_HOME": str(home), "TAILPOD_PROVIDER": "vastai",
           "TAILPOD_RESULTS_DIR": str(home / "results"), "TAILPOD_IMAGE": IMAGE,
           "TAILPOD_TTL_HOURS": "1"}
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    return env


def _rent_spot_pod(sandbox: Sandbox, home: Path, monkeypatch: pytest.MonkeyPatch) -> PodRecord:
    """A running vast spot pod as `up --spot --gpu "RTX 4090" --gpu "RTX 3090" --max-price 0.5`
    leaves it (its engine serving org/tiny)."""
    settings = settings_for(sandbox, home, **_env(sandbox, home, monkeypatch))
    ledger = Ledger(settings.state_dir)
    record, _info = up_remote(
        settings, ledger,
        PodSpec(run_tag="tp-spot-r1", gpu_preference=list(PREFERENCE), image=IMAGE, disk_gb=20,
                start_command=["sleep", "600"], spot=True, max_price=CAP),
        policy=fast_policy(), timings=fast_timings())
    return ledger.update(record.run_tag, status="running", operation={},
                         engine=EngineConfig(engine="vllm", model="org/tiny").to_json())


class Pods:
    """The seams `benchmark` reaches a pod through: the first pod's sweep loses its bid in its
    `cut_at`-th cell, every later pod's runs whole; new pods are rented as SandboxSteps does."""

    def __init__(self, sandbox: Sandbox, cut_at: int) -> None:
        self.sandbox, self.cut_at = sandbox, cut_at
        self.steps = SandboxSteps()
        self.hosts: dict[str, PreemptedHost] = {}

    def host(self, settings: Settings, ledger: Ledger, record: PodRecord, *_a: Any) -> Any:
        host = PreemptedHost(ScriptedHost(tok_s=100.0, cell_s=0.0), self.sandbox,
                             f"vast:{record.pod_id}", self.cut_at if not self.hosts else None)
        self.hosts[record.run_tag] = host
        return host

    def install(self, monkeypatch: pytest.MonkeyPatch) -> None:
        monkeypatch.setattr("tailpod.measure.hosts.sweep_host", self.host)
        monkeypatch.setattr("tailpod.measure.matrix_run.CloudSteps", lambda **_k: self.steps,
                            raising=False)

    def benchmark(self, monkeypatch: pytest.MonkeyPatch, run_tag: str, *more: str,
                  resume: bool = True) -> Result:
        """`benchmark RUN_TAG [--resume-on-preemption] BENCH... MORE...` through these seams,
        installed first; wide enough that no message wraps."""
        self.install(monkeypatch)
        flag = ["--resume-on-preemption"] if resume else []
        return CliRunner().invoke(app, ["benchmark", run_tag, *flag, *BENCH, *more],
                                  terminal_width=250)


def _creating(record: PodRecord) -> float:
    return next(e["t"] for e in record.events if e["event"] == "creating")


def _proven(home: Path, tag: str) -> bool:
    proof = home / "results" / tag / "billing-proof.json"
    return proof.exists() and json.loads(proof.read_text())["proven"] is True


def _replacement_left_up(sandbox: Sandbox, home: Path, lost: str, pods: Pods) -> PodRecord:
    """The one pod a resume rented, as a resume that failed on it must leave it: the lost pod
    `lost` destroyed with its proof, the replacement in the ledger, active, and alone billing."""
    [new_tag] = pods.steps.rented
    assert _proven(home, lost)
    new = Ledger(home).get(new_tag)
    assert new is not None and new.active
    assert [r["id"] for r in sandbox.billing_now()] == [new.pod_id]
    return new


def test_a_preempted_benchmark_goes_on_on_a_new_pod_of_the_same_card(
        sandbox: Sandbox, tailpod_home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    first = _rent_spot_pod(sandbox, tailpod_home, monkeypatch)
    pods = Pods(sandbox, cut_at=3)  # cells 1 and 2 finish on the first pod; the third is cut
    res = pods.benchmark(monkeypatch, first.run_tag)
    assert res.exit_code == 0, res.output
    [new_tag] = pods.steps.rented
    ledger = Ledger(tailpod_home)
    lost, new = ledger.get(first.run_tag), ledger.get(new_tag)
    assert lost is not None and new is not None

    # money: the lost pod destroyed with its proof, disk included, before the new one was created
    assert not lost.active and _proven(tailpod_home, first.run_tag)
    lost_pod = sandbox.cloud.pods[f"vast:{first.pod_id}"]
    assert lost_pod.status == "terminated"
    proven_at = next(e["t"] for e in lost.events if e["event"] == "billing-proven")
    assert proven_at <= _creating(new)
    assert [r["id"] for r in sandbox.billing_now()] == [new.pod_id]  # only the new pod bills
    # the same card, as a spot pod, under the same cap
    assert new.gpu == "RTX 4090" and new.extra.spot is True
    assert new.extra.max_price == CAP and new.price_per_hr is not None
    assert new.price_per_hr <= CAP
    assert sandbox.cloud.pods[f"vast:{new.pod_id}"].meta["is_bid"] is True

    # the sweep: every planned cell once, from the pod it was measured on; the cut one again
    run_dir = tailpod_home / "results" / "spot-run"
    rows = [json.loads(line) for line in (run_dir / "rows.jsonl").read_text().splitlines()]
    cells = [r for r in rows if r["kind"] == "cell"]
    assert len(cells) == PLANNED and len({r["cell"] for r in cells}) == PLANNED
    by_cell = {r["cell"]: r["pod"]["run_tag"] for r in cells}
    assert list(by_cell.values()).count(first.run_tag) == 2
    assert list(by_cell.values()).count(new_tag) == 2
    for row in rows:
        if row["kind"] == "request":
            assert row["pod"]["run_tag"] == by_cell[row["cell"]]
    assert pods.hosts[new_tag].references == 1  # the gate's reference taken again there

    # what the run keeps and the report says: one preemption, what the lost pod ran and cost
    run = json.loads((run_dir / "run.json").read_text())
    [entry] = run["preemptions"]
    assert entry["pod"] == first.run_tag and entry["pod_id"] == first.pod_id
    assert lost.price_per_hr is not None
    assert entry["pod_usd"] == pytest.approx(
        lost.price_per_hr * (entry["at"] - _creating(lost)) / 3600.0, abs=1e-6)
    assert entry["pod_minutes"] == pytest.approx((entry["at"] - lost.created_at) / 60.0, abs=0.01)
    assert any(f"preempted: {first.run_tag} lost its bid" in n for n in run["notes"])
    flat = " ".join(res.output.split())
    assert f"preempted 1 time(s) ({first.run_tag})" in flat
    assert f"tailpod down {new_tag}" in flat
    report = CliRunner().invoke(app, ["report", str(run_dir)])
    assert report.exit_code == 0, report.output
    markdown = (run_dir / "report.md").read_text()
    assert "## Preemptions (spot)" in markdown
    assert (f"1 preemption(s); the lost pods ran {entry['pod_minutes']:.1f} min for "
            f"${entry['pod_usd']:.4f}") in markdown
    assert f"cells by pod: {first.run_tag} 2, {new_tag} 2" in markdown

    down = CliRunner().invoke(app, ["down", new_tag])
    assert down.exit_code == 0, down.output
    assert sandbox.billing_now() == []


def test_a_card_with_no_capacity_left_is_replaced_by_the_next_of_the_preference_list(
        sandbox: Sandbox, tailpod_home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    first = _rent_spot_pod(sandbox, tailpod_home, monkeypatch)
    assert first.gpu == "RTX 4090"
    sandbox.add_fault("capacity", provider="vast", gpu="RTX 4090")
    pods = Pods(sandbox, cut_at=2)
    res = pods.benchmark(monkeypatch, first.run_tag, "--json")
    assert res.exit_code == 0, res.output
    [new_tag] = pods.steps.rented
    new = Ledger(tailpod_home).get(new_tag)
    assert new is not None and new.gpu == "RTX 3090" and new.extra.spot is True
    # cut in its second cell: one cell from the lost pod, the three others from the new one
    doc = json.loads(res.stdout)["preemptions"]
    assert doc["count"] == 1 and [p["pod"] for p in doc["lost"]] == [first.run_tag]
    assert doc["cells_by_pod"] == {first.run_tag: 1, new_tag: 3}
    assert _proven(tailpod_home, first.run_tag)
    assert [r["id"] for r in sandbox.billing_now()] == [new.pod_id]
    down = CliRunner().invoke(app, ["down", new_tag])
    assert down.exit_code == 0, down.output
    assert sandbox.billing_now() == []


def test_without_the_flag_a_preemption_still_stops_with_exit_3_and_rents_nothing(
        sandbox: Sandbox, tailpod_home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    first = _rent_spot_pod(sandbox, tailpod_home, monkeypatch)
    pods = Pods(sandbox, cut_at=2)
    res = pods.benchmark(monkeypatch, first.run_tag, resume=False)
    assert res.exit_code == 3, res.output
    assert f"{first.run_tag} was preempted at" in " ".join(res.output.split())
    assert pods.steps.rented == []


def test_the_flag_on_an_on_demand_pod_is_refused_before_anything(
        sandbox: Sandbox, tailpod_home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    first = _rent_spot_pod(sandbox, tailpod_home, monkeypatch)
    ledger = Ledger(tailpod_home)
    ledger.update(first.run_tag, extra={**first.extra.to_json(), "spot": None})
    pods = Pods(sandbox, cut_at=1)
    res = pods.benchmark(monkeypatch, first.run_tag)
    assert res.exit_code == 2, res.output
    assert "--resume-on-preemption needs a spot pod" in res.output
    assert pods.hosts == {} and pods.steps.rented == []
    assert not (tailpod_home / "results" / "spot-run").exists()


def test_a_pod_preempted_before_the_benchmark_is_replaced_before_anything_waits_on_it(
        sandbox: Sandbox, tailpod_home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    first = _rent_spot_pod(sandbox, tailpod_home, monkeypatch)
    lost_pod = sandbox.cloud.pods[f"vast:{first.pod_id}"]
    deadline = time.monotonic() + 5.0
    while lost_pod.started_at is None and time.monotonic() < deadline:
        time.sleep(0.02)
    pods = Pods(sandbox, cut_at=0)  # no cell is cut: the bid is lost before the benchmark
    sandbox.add_fault("outbid", provider="vast", times=1)
    res = pods.benchmark(monkeypatch, first.run_tag)
    assert res.exit_code == 0, res.output
    [new_tag] = pods.steps.rented
    assert list(pods.hosts) == [new_tag]  # the stopped pod was never connected to
    assert lost_pod.status == "terminated" and _proven(tailpod_home, first.run_tag)
    run_dir = tailpod_home / "results" / "spot-run"
    run = json.loads((run_dir / "run.json").read_text())
    assert [p["pod"] for p in run["preemptions"]] == [first.run_tag]
    cells = [json.loads(line) for line in (run_dir / "rows.jsonl").read_text().splitlines()]
    assert {r["pod"]["run_tag"] for r in cells if r["kind"] == "cell"} == {new_tag}
    down = CliRunner().invoke(app, ["down", new_tag])
    assert down.exit_code == 0, down.output
    assert sandbox.billing_now() == []


def test_when_the_lost_pod_cannot_be_proven_gone_nothing_new_is_rented_and_it_exits_3(
        sandbox: Sandbox, tailpod_home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    first = _rent_spot_pod(sandbox, tailpod_home, monkeypatch)
    sandbox.add_fault("terminate_fail", provider="vast", status=500)  # every destroy, 5xx
    pods = Pods(sandbox, cut_at=2)
    res = pods.benchmark(monkeypatch, first.run_tag)
    assert res.exit_code == 3, res.output
    assert pods.steps.rented == []  # never a new pod beside one that may still bill
    lost = Ledger(tailpod_home).get(first.run_tag)
    assert lost is not None and lost.active
    assert [r["id"] for r in sandbox.billing_now()] == [first.pod_id]  # its disk, known
    assert "Traceback" not in res.output
    assert f"billing is NOT proven stopped for {first.run_tag}" in " ".join(res.output.split())
    sandbox.clear_faults()
    down = CliRunner().invoke(app, ["down", first.run_tag])
    assert down.exit_code == 0, down.output
    assert sandbox.billing_now() == []
