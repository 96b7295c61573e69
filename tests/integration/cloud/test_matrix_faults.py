"""`tailpod matrix` on the sandbox cloud, without an engine: the money-safety faults.

The pods are really rented (ledger-first create on the emulated RunPod and vast.ai, the billing
meter running) and really torn down with their billing proof; the engine is not what these tests
test, so the bootstrap is skipped and the sweep runs against a scripted host (the real sweep
orchestrator, gate included). Each test ends with nothing billing on the meter.
"""

from __future__ import annotations

import _thread
import json
import threading
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from tailpod.agent_client.driver import ArmStart
from tailpod.cli.matrix import run_matrix
from tailpod.config import Settings, load_settings
from tailpod.engines.base import EngineConfig
from tailpod.errors import ConfigError, TailpodError
from tailpod.ledger import Ledger, PodRecord, new_run_tag
from tailpod.measure.matrix_run import BudgetPolicy, CostModel, MatrixRun, SweepSpec
from tailpod.measure.plan import Arm, Cell, SweepPlan
from tailpod.measure.sweep import GateResult
from tailpod.pods.down import down_many
from tailpod.provision.base import BillingEvidence, PodSpec
from tailpod.provision.create import up_remote
from tailpod.provision.teardown import down_remote
from tailpod.results.matrix import parse_cards
from tailpod.sandbox import Sandbox
from tests.helpers.api_timings import fast_timings
from tests.helpers.lifecycle_policy import fast_policy

IMAGE = "sandbox/engine@sha256:" + "ab" * 32  # a digest: pinned as given, no registry needed
A40 = "runpod:NVIDIA A40"  # $0.40/h in the sandbox catalog
RP4090 = "runpod:NVIDIA GeForce RTX 4090"  # $0.69/h
VAST4090 = "vastai:RTX 4090"  # $0.42/h + storage
TINY = CostModel(setup_min=0.01, restart_min=0.0, cell_min=0.001, teardown_min=0.0)
SWEEP = SweepSpec(ks=(0, 1), spec_method="ngram", concurrency=(1, 2), reps=1, max_tokens=16,
                  extend_k=False)


class ScriptedHost:
    """The pod's side of the sweep, scripted: tok/s falls with the card's price so the cards rank."""

    measured_from = "pod"

    def __init__(self, tok_s: float, cell_s: float, diverging: frozenset[str] = frozenset()
                 ) -> None:
        self.tok_s = tok_s
        self.cell_s = cell_s
        self.closed = False
        self.diverging = diverging  # arms whose greedy tokens differ from plain decode's

    def restart(self, arm: Arm) -> ArmStart:
        return ArmStart(startup={"engine": "vllm", "facts": {}, "lines": []}, argv=["vllm"],
                        startup_s=0.1)

    def run_cells(self, arm: Arm, cells: list[Cell], plan: SweepPlan,
                  run_id: str) -> list[dict[str, Any]]:
        rows = []
        for cell in cells:
            time.sleep(self.cell_s)
            tok_s = self.tok_s * cell.concurrency * (1.3 if arm.spec_k else 1.0)
            base = {"schema_version": 1, "run_id": run_id, "arm": arm.label,
                    "concurrency": cell.concurrency,
                    "rep": cell.rep, "prompt_class": cell.prompt_class, "cell": cell.cell_id}
            rows.append({**base, "kind": "request", "index": 0, "ok": True,
                         "completion_tokens": 16, "ttft_s": 0.05, "e2e_s": 0.5,
                         "t_start": time.time()})
            rows.append({**base, "kind": "cell", "requests": 4, "failed": 0, "wall_s": 10.0,
                         "output_tokens": round(tok_s * 10), "output_tok_s": tok_s,
                         "e2e_p50_s": 0.5 * cell.concurrency, "ttft_p50_s": 0.05})
        return rows

    def _tokens(self, arm: Arm) -> list[list[int]]:
        return [[1, 2, 4]] if arm.label in self.diverging else [[1, 2, 3]]

    def gate_reference(self, arm: Arm, plan: SweepPlan) -> dict[str, Any]:
        return {"token_ids": self._tokens(arm)}

    def gate_compare(self, arm: Arm, reference: dict[str, Any], plan: SweepPlan) -> GateResult:
        """The token-identity gate: the arm's greedy tokens against the reference it was given
        (plain decode's), so an arm that diverges fails and its card's cells are VOID."""
        ours, theirs = self._tokens(arm), reference.get("token_ids")
        if ours == theirs:
            return GateResult("pass", "token_ids", len(ours))
        return GateResult("fail", "token_ids", len(ours),
                          first_mismatch={"prompt": 0, "position": 2, "reference_token": 3,
                                          "candidate_token": 4})

    def bare_decode(self, arm: Arm, plan: SweepPlan) -> dict[str, Any]:
        return {"status": "not_measured", "reason": "scripted"}

    def close(self) -> None:
        self.closed = True


class SandboxSteps:
    """Rent through `up_remote` (the real money-safe create), skip SSH and the engine, measure with
    the scripted host, tear down through `down_remote` (the real proof)."""

    def __init__(self, *, bootstrap_fails_on: str | None = None, cell_s: float = 0.0,
                 diverging: frozenset[str] = frozenset(),
                 all_rented: threading.Barrier | None = None) -> None:
        self.bootstrap_fails_on = bootstrap_fails_on
        # every card's `up` waits here until all have rented: the lifetimes overlap only if the
        # matrix rents in parallel (a serial matrix breaks the barrier and fails its cards)
        self.all_rented = all_rented
        self.cell_s = cell_s
        self.diverging = diverging
        self.rented: list[str] = []
        self.hosts: list[ScriptedHost] = []

    def up(self, settings: Settings, cfg: EngineConfig, ledger: Ledger, say: Any) -> PodRecord:
        spec = PodSpec(run_tag=new_run_tag(), gpu_preference=list(settings.gpus), image=IMAGE,
                       start_command=["sleep", "600"], gpu_count=settings.gpu_count,
                       env={}, disk_gb=20, ports=[22])
        record, _info = up_remote(settings, ledger, spec, policy=fast_policy(),
                                  timings=fast_timings())
        self.rented.append(record.run_tag)
        if self.all_rented is not None:
            self.all_rented.wait(timeout=30)
        if settings.gpus[0] == self.bootstrap_fails_on:
            raise TailpodError("the engine did not start on the pod: CUDA out of memory")
        # what up_cloud records on the sandbox: the provider is emulated
        return ledger.update(record.run_tag, event="engine-healthy", status="running",
                             engine=cfg.to_json(), extra=replace(record.extra, emulated=True))

    def host(self, settings: Settings, ledger: Ledger, record: PodRecord,
             cache: str) -> ScriptedHost:
        host = ScriptedHost(tok_s=100.0 / (record.price_per_hr or 1.0), cell_s=self.cell_s,
                            diverging=self.diverging)
        self.hosts.append(host)
        return host

    def down(self, settings: Settings, ledger: Ledger, record: PodRecord) -> BillingEvidence:
        return down_remote(settings, ledger, record, policy=fast_policy(),
                           timings=fast_timings())


@pytest.fixture()
def settings(sandbox: Sandbox, tailpod_home: Path) -> Settings:
    env = {**sandbox.env(), "TAILPOD_HOME": str(tailpod_home),
           "TAILPOD_RESULTS_DIR": str(tailpod_home / "results"), "TAILPOD_MODEL": "org/tiny",
           "TAILPOD_IMAGE": IMAGE, "TAILPOD_TTL_HOURS": "1"}
    return load_settings(env=env, dotenv_path=tailpod_home / "absent.env")


def matrix(settings: Settings, steps: SandboxSteps, cards: list[str], *, budget: float = 5.0,
           parallel: int = 3, policy: BudgetPolicy | None = None,
           run_id: str | None = None) -> MatrixRun:
    run = run_matrix(settings, cards=parse_cards(cards) if cards else None, sweep=SWEEP,
                     cost=TINY, budget=budget, parallel=parallel,
                     base=EngineConfig(engine="vllm", model="org/tiny"), steps=steps,
                     run_id=run_id, policy=policy or BudgetPolicy(poll_s=0.05, margin_s=0.0))
    assert run is not None
    return run


def proven(settings: Settings, tag: str) -> bool:
    path = Path(settings.results_dir) / tag / "billing-proof.json"
    return path.exists() and json.loads(path.read_text())["proven"] is True


def assert_all_down(sandbox: Sandbox, settings: Settings, run: MatrixRun) -> None:
    assert sandbox.billing_now() == []
    ledger = Ledger(settings.state_dir)
    for entry in run.state.data["cards"].values():
        for tag in entry["pods"]:
            record = ledger.get(tag)
            assert record is not None and not record.active, tag
            assert proven(settings, tag), tag
    assert run.unproven == set()


def test_matrix_ranks_cards_and_tears_every_pod_down(sandbox: Sandbox,
                                                     settings: Settings) -> None:
    steps = SandboxSteps(all_rented=threading.Barrier(3))
    run = matrix(settings, steps, [A40, RP4090, VAST4090])
    statuses = {k: v["status"] for k, v in run.state.data["cards"].items()}
    assert statuses == {A40: "done", RP4090: "done", VAST4090: "done"}
    assert len(steps.rented) == 3
    assert len(steps.hosts) == 3 and all(h.closed for h in steps.hosts)  # each pod's session
    assert_all_down(sandbox, settings, run)
    report = json.loads((run.state.path.parent / "matrix-report.json").read_text())
    # tok/s is 100/price, so $/Mtok grows with the square of the price: the cheapest card wins
    cards = run.state.data["cards"]
    by_price = sorted(cards, key=lambda label: cards[label]["price_per_hr"])
    assert len({cards[label]["price_per_hr"] for label in cards}) == 3
    assert report["tables"][0]["ranking"] == by_price
    assert report["bands"] == [{"from": 1, "to": 2, "card": by_price[0]}]
    # lifetimes overlap: the pods were rented in parallel
    ledger = Ledger(settings.state_dir)
    spans = [(r.created_at, r.updated_at) for r in ledger.all()]
    assert max(start for start, _ in spans) < min(end for _, end in spans)
    assert (run.state.path.parent / "matrix.md").read_text().count("## Concurrency") == 2
    assert report["stamp"].startswith("EMULATED PROVIDERS")  # the runs' hardware check
    assert (run.state.path.parent / "matrix-cost.png").stat().st_size > 0


def test_capacity_on_one_card_fails_that_card_only(sandbox: Sandbox, settings: Settings) -> None:
    sandbox.add_fault("capacity", provider="runpod", gpu="NVIDIA GeForce RTX 4090")
    # slow cells: the other cards are still measuring when this one fails
    run = matrix(settings, SandboxSteps(cell_s=0.3), [A40, RP4090, VAST4090])
    cards = run.state.data["cards"]
    assert cards[RP4090]["status"] == "failed" and "capacity" in cards[RP4090]["error"]
    assert cards[A40]["status"] == "done" and cards[VAST4090]["status"] == "done"
    assert_all_down(sandbox, settings, run)
    markdown = (run.state.path.parent / "matrix.md").read_text()
    assert f"- {RP4090}: failed" in markdown


def test_bootstrap_failure_on_one_pod_leaves_the_others_running(sandbox: Sandbox,
                                                                settings: Settings) -> None:
    steps = SandboxSteps(bootstrap_fails_on="NVIDIA A40", cell_s=0.3)
    run = matrix(settings, steps, [A40, VAST4090], parallel=2)
    cards = run.state.data["cards"]
    assert cards[A40]["status"] == "failed" and "CUDA out of memory" in cards[A40]["error"]
    assert cards[VAST4090]["status"] == "done"
    assert len(cards[A40]["proofs"]) == 1  # it was rented, so it has its own billing proof
    assert_all_down(sandbox, settings, run)


def test_budget_crossed_mid_run_stops_rentals_and_tears_down(sandbox: Sandbox,
                                                             settings: Settings) -> None:
    # Projected: well under the budget. Real: slow cells at $0.40 + $0.69 /h cross $0.0004 in ~1.3 s.
    steps = SandboxSteps(cell_s=0.5)
    run = matrix(settings, steps, [A40, RP4090, VAST4090], budget=0.0004, parallel=2)
    cards = run.state.data["cards"]
    assert run.state.data["stopped"].startswith("budget")
    assert {cards[A40]["status"], cards[RP4090]["status"]} == {"stopped"}
    assert cards[VAST4090]["status"] == "skipped"  # the third card was never rented
    assert len(steps.rented) == 2
    assert_all_down(sandbox, settings, run)
    assert run.state.data["spent_at_stop_usd"] >= 0.0004  # it stopped at the crossing, not before
    assert sum(c["spend_usd"] for c in cards.values()) >= run.state.data["spent_at_stop_usd"]
    # stopped mid-run: no stopped card measured its whole plan (2 arms x 2 levels x 1 rep),
    # by the rows each wrote (how soon after the crossing is timing, and not asserted)
    for label in (A40, RP4090):
        rows = Path(cards[label]["run_dir"]) / "rows.jsonl"
        measured = [json.loads(line) for line in rows.read_text().splitlines()] \
            if rows.exists() else []
        assert len([r for r in measured if r.get("kind") == "cell"]) < 4, label


def test_ctrl_c_during_parallel_creation_leaves_nothing_billing(sandbox: Sandbox,
                                                                settings: Settings) -> None:
    # held until the interrupt (at most 30 s): a hold that lapsed on its own let the first create
    # finish before a loaded host brought the second one to the provider
    holds = [sandbox.add_fault("hold_create", provider=p, op="create", seconds=30.0)
             for p in ("runpod", "vast")]

    in_ledger_while_held: list[tuple[str, str]] = []

    def interrupt_once_both_creates_are_held() -> None:
        if all(sandbox.cloud.faults.wait_held(h, 10.0) for h in holds):
            # Both creates have reached the provider and made nothing yet: read the ledger
            # from disk now, before the interrupt, to see what it held while they were out.
            in_ledger_while_held.extend(
                (r.run_tag, r.status) for r in Ledger(settings.state_dir).all())
            assert sandbox.cloud.pods_public() == []
            _thread.interrupt_main()
        for hold in holds:  # the creates go on now, as a provider's would after a Ctrl-C
            sandbox.cloud.faults.release(hold)

    threading.Thread(target=interrupt_once_both_creates_are_held, daemon=True).start()
    steps = SandboxSteps()
    with pytest.raises(KeyboardInterrupt):
        run_matrix(settings, cards=parse_cards([A40, VAST4090]), sweep=SWEEP, cost=TINY,
                   budget=5.0, parallel=2, base=EngineConfig(engine="vllm", model="org/tiny"),
                   steps=steps, policy=BudgetPolicy(poll_s=0.05, margin_s=0.0))
    ledger = Ledger(settings.state_dir)
    assert len(steps.rented) <= 2
    tags = [r.run_tag for r in ledger.all()]
    assert len(tags) == 2
    # both pods were in the ledger, as creating, while their creates were held at the provider
    assert sorted(in_ledger_while_held) == sorted((tag, "creating") for tag in tags)
    assert sandbox.billing_now() == []
    assert all(not r.active for r in ledger.all())
    # `down --all` finds nothing left and proves it
    outcomes = down_many(settings, ledger, policy=fast_policy(),
                         timings=fast_timings())
    assert all(o.proven for o in outcomes)
    assert sandbox.billing_now() == []


def test_resume_skips_finished_cards_and_cells(sandbox: Sandbox, settings: Settings) -> None:
    sandbox.add_fault("capacity", provider="runpod", gpu="NVIDIA GeForce RTX 4090", times=1)
    first = matrix(settings, SandboxSteps(), [A40, RP4090], parallel=2)
    assert first.state.card(RP4090)["status"] == "failed"
    rows_before = (Path(first.state.card(A40)["run_dir"]) / "rows.jsonl").read_text()
    steps = SandboxSteps()
    resumed = matrix(settings, steps, [], run_id=first.state.data["matrix_id"])
    assert resumed.state.card(RP4090)["status"] == "done"
    assert len(steps.rented) == 1  # only the unfinished card was rented again
    assert (Path(resumed.state.card(A40)["run_dir"]) / "rows.jsonl").read_text() == rows_before
    assert_all_down(sandbox, settings, resumed)


@pytest.mark.parametrize(
    ("cards", "budget", "message"),
    [
        ([A40, "runpod:NVIDIA Imaginary 9000"], 5.0, "unknown card"),
        ([A40, "runpod:nvidia a40"], 5.0, "duplicate card"),
        ([A40], 0.000001, "below the projected cost of one cell"),
        ([A40, RP4090], 0.0001, "projected spend"),
    ],
)
def test_bad_input_is_refused_before_anything_is_rented(
    sandbox: Sandbox, settings: Settings, cards: list[str], budget: float, message: str
) -> None:
    steps = SandboxSteps()
    with pytest.raises(ConfigError, match=message):
        matrix(settings, steps, cards, budget=budget)
    assert steps.rented == [] and Ledger(settings.state_dir).all() == []
    assert sandbox.billing_now() == []


def test_cli_refuses_bad_input_with_exit_2_and_dry_run_rents_nothing(
    sandbox: Sandbox, settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    from typer.testing import CliRunner

    from tailpod.cli.main import app

    for key, value in {**sandbox.env(), "TAILPOD_HOME": str(settings.home),
                       "TAILPOD_RESULTS_DIR": str(settings.results_dir),
                       "TAILPOD_IMAGE": IMAGE, "TAILPOD_MODEL": "org/tiny",
                       "TAILPOD_TTL_HOURS": "1"}.items():
        monkeypatch.setenv(key, value)
    runner = CliRunner()
    no_budget = runner.invoke(app, ["matrix", "--card", A40])
    assert no_budget.exit_code == 2 and "--budget is required" in no_budget.output
    duplicate = runner.invoke(app, ["matrix", "--card", A40, "--card", "runpod: nvidia a40",
                                    "--budget", "5"])
    assert duplicate.exit_code == 2 and "duplicate card" in duplicate.output
    for engine in ("bogus", "llamacpp"):  # refused before the registry is asked for a digest
        wrong = runner.invoke(app, ["matrix", "--card", A40, "--budget", "5", "--engine", engine,
                                    "--image", "unreachable.invalid/img:tag"])
        assert wrong.exit_code == 2 and engine in wrong.output, wrong.output
        assert "registry" not in wrong.output
    bad_price = runner.invoke(app, ["matrix", "--card", A40, "--budget", "5", "--max-price", "-1"])
    assert bad_price.exit_code == 2 and "--max-price must be a positive number" in bad_price.output
    past_ttl = runner.invoke(app, ["matrix", "--card", A40, "--budget", "50", "--reps", "9"])
    assert past_ttl.exit_code == 2 and "past the pods' TTL of 1 h" in past_ttl.output
    # ngram: an mtp arm would have the checkpoint read first (engines/checkpoint.py check_arms)
    dry = runner.invoke(app, ["matrix", "--card", A40, "--card", 'vastai:"RTX 4090"x2',
                              "--budget", "5", "--spec-k", "0,1", "--spec-method", "ngram",
                              "--concurrency", "1,2,4", "--reps", "2", "--dry-run"])
    assert dry.exit_code == 0, dry.output
    # 3 arms (K=1 plus the extension to K=2) x 3 levels x 2 reps = 18 cells per card
    assert "(18 cells per card, at most)" in dry.output
    # 20 setup + 2 restarts x 3 + 18 cells x 1 + 2 teardown = 46 min at $0.40/h
    assert "runpod:NVIDIA A40: $0.40/h, projected $0.31" in dry.output
    # the whole 2-GPU pod, priced with the disk it rents: $0.78/h + 80 GB x $0.15/GB-month over
    # 720 h (tailpod/sandbox/model.py's offer) = $0.7967/h
    assert "vastai:RTX 4090x2: $0.80/h" in dry.output
    assert sandbox.billing_now() == [] and Ledger(settings.state_dir).all() == []


def test_never_more_pods_at_once_than_parallel(sandbox: Sandbox, settings: Settings) -> None:
    run = matrix(settings, SandboxSteps(cell_s=0.2), [A40, RP4090, VAST4090], parallel=2)
    assert {e["status"] for e in run.state.data["cards"].values()} == {"done"}
    ledger = Ledger(settings.state_dir)
    edges = []
    edges_by_tag: dict[str, dict[str, float]] = {}
    for record in ledger.all():
        times = {e["event"]: e["t"] for e in record.events}
        edges_by_tag[record.run_tag] = times
        edges += [(times["creating"], 1), (times["billing-proven"], -1)]
    alive = peak = 0
    for _t, step in sorted(edges, key=lambda edge: (edge[0], edge[1])):
        alive += step
        peak = max(peak, alive)
    assert peak <= 2  # never the third as well
    # and the third card was rented only after one of the first two was proven down (ordering
    # of the ledger's own events, not a duration)
    created = sorted(edges_by_tag.values(), key=lambda t: t["creating"])
    assert created[2]["creating"] >= min(t["billing-proven"] for t in created[:2])
    assert_all_down(sandbox, settings, run)


def test_a_provider_that_is_down_fails_its_card_only(sandbox: Sandbox,
                                                     settings: Settings) -> None:
    sandbox.add_fault("server_error", provider="vast", op="search", status=503)
    steps = SandboxSteps()
    run = matrix(settings, steps, [A40, VAST4090], parallel=2)
    cards = run.state.data["cards"]
    assert cards[VAST4090]["status"] == "failed"
    assert "could not be asked for offers" in cards[VAST4090]["error"]
    assert cards[A40]["status"] == "done" and len(steps.rented) == 1
    assert_all_down(sandbox, settings, run)


def test_an_arm_that_fails_the_gate_is_void_on_its_card(sandbox: Sandbox,
                                                        settings: Settings) -> None:
    """The gate is real here: an arm whose tokens differ from plain's is VOID, never ranked."""
    from tailpod.results.analysis import analyze
    from tailpod.results.io import load_run

    run = matrix(settings, SandboxSteps(diverging=frozenset({"ngram-k1"})), [A40])
    card = run.state.card(A40)
    assert card["status"] == "done"
    arms = {a["label"]: a for a in analyze(load_run(card["run_dir"]))["arms"]}
    assert arms["ngram-k1"]["void"] is True and arms["plain"]["void"] is False
    assert_all_down(sandbox, settings, run)
