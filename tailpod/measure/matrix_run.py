"""The card matrix run: rent, measure and tear down several cards in parallel within a budget.

A thin orchestrator over the single-pod functions: each card is rented and started by `up_cloud`,
measured on the pod by `run_sweep` with the pod's `RemoteSweepHost`, and torn down by `down_remote`
with its billing proof. What it adds is money safety across many pods:

- before anything is rented (`price_cards`): every card is priced from the provider's offers, an
  unknown card is refused, and the projected spend (CostModel) must fit the budget;
- while it runs (`MatrixRun`): at most `parallel` pods; the live spend (ledger prices x time since
  each create) plus the running rate over a safety margin is checked every few seconds, and when
  the budget would be crossed no further card is rented and every pod of the matrix is torn down;
- a card that fails (capacity, provider down, bootstrap, gate) fails alone and the state names it;
  every pod is known to the ledger from before its create (Ctrl-C or a crash leaves it there for
  `tailpod down --all`), and every pod the matrix rented ends with a billing proof;
- a resumed matrix skips finished cards; the others rerun into their own run directory, whose
  finished cells the sweep skips.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import threading
import time
from collections.abc import Callable
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from tailpod.config import Settings, run_path, source_of
from tailpod.engines.base import EngineConfig, engine_start_s
from tailpod.errors import BillingNotProven, ConfigError, TailpodError
from tailpod.ledger import Ledger, PodRecord, operation_owner_alive, operation_stamp
from tailpod.measure.plan import Arm, Cell, SweepPlan, spec_arms
from tailpod.measure.sweep import (
    ArmStart,
    GateResult,
    RunContext,
    RunDirectory,
    SweepHost,
    regate_on_new_pod,
    run_sweep,
)
from tailpod.provision.base import BillingEvidence
from tailpod.results.matrix import (
    MATRIX_FILE,
    MATRIX_PLOT,
    MATRIX_REPORT,
    Card,
    build_matrix,
    check_purchases,
    plot_matrix_cost,
    purchase_text,
    render_matrix_markdown,
)
from tailpod.secrets import redact

Say = Callable[[str], None]
STATE_SCHEMA = "tailpod.matrix/1"
_COUNTER = re.compile(r"^\[\s*\d+s\]\s*")


# -- the plan and its cost -------------------------------------------------------------------


@dataclass(frozen=True)
class CostModel:
    """What one card is projected to cost: the hours it bills times the card's $/hr.

    An estimate stated up front (the real rate is unknown until the engine runs): a setup (rent,
    boot, image pull, first engine start), one engine restart per further arm, a fixed time per
    measured cell, and teardown. Where an earlier run of the same card and engine measured its
    start (`measured_start`), that run's setup and restart replace the defaults (`for_card`)
    unless a flag pinned them. The live budget check is what enforces the cap."""

    setup_min: float = 20.0
    restart_min: float = 3.0
    cell_min: float = 1.0
    teardown_min: float = 2.0
    pin_setup: bool = False  # --setup-minutes was given: no measured start replaces it
    pin_restart: bool = False

    def card_hours(self, arms: int, cells: int) -> float:
        minutes = (self.setup_min + self.restart_min * max(0, arms - 1)
                   + self.cell_min * cells + self.teardown_min)
        return minutes / 60.0

    def cell_usd(self, price_per_hr: float) -> float:
        return price_per_hr * self.cell_min / 60.0

    def for_card(self, start: MeasuredStart | None) -> tuple[CostModel, dict[str, Any]]:
        """This model with the setup and restart `start` measured, where it did and no flag
        pinned them, and what the projection used, said (`start_line` words it)."""
        setup, restart = self.setup_min, self.restart_min
        setup_from = "--setup-minutes" if self.pin_setup else "default"
        restart_from = "--restart-minutes" if self.pin_restart else "default"
        if start is not None and start.setup_s is not None and not self.pin_setup:
            setup, setup_from = round(start.setup_s / 60.0, 4), "measured: billed to serving"
        if start is not None and start.restart_s is not None and not self.pin_restart:
            restart, restart_from = round(start.restart_s / 60.0, 4), f"measured: {start.restart_from}"
        measured = "measured" in setup_from or "measured" in restart_from
        used = {"setup_min": setup, "setup_from": setup_from, "restart_min": restart,
                "restart_from": restart_from,
                "run_id": start.run_id if start is not None and measured else None,
                "compile_cache_hit": start.compile_cache_hit if start is not None and measured
                else None}
        return dataclasses.replace(self, setup_min=setup, restart_min=restart), used

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def start_line(used: dict[str, Any]) -> str:
    """One line for `matrix --dry-run`: the setup and restart a card's projection used."""
    def part(name: str) -> str:
        return f"{name} {used[f'{name}_min']:.3g} min ({used[f'{name}_from']})"

    run = used.get("run_id")
    hit = used.get("compile_cache_hit")
    cache = "" if hit is None else (", compile cache hit" if hit else ", compiled")
    return (f"{part('setup')}, {part('restart')}"
            + (f" from run {run}{cache}" if run else ""))


# -- an earlier run's start ----------------------------------------------------------------------


@dataclass(frozen=True)
class MeasuredStart:
    """What an earlier run of a card and engine measured of its start (its run.json)."""

    run_id: str
    created_at: str
    setup_s: float | None  # cold_start billed_s_to_ready: the create call to the engine serving
    restart_s: float | None  # one further arm's engine restart
    restart_from: str  # "arm restarts" (the sweep's timed restarts) or "startup phases"
    compile_cache_hit: bool | None


def _seconds(v: Any) -> float | None:
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) and v >= 0 \
        else None


def _obj(v: Any) -> dict[str, Any]:
    return v if isinstance(v, dict) else {}


def _arm_phases(arms: list[dict[str, Any]]) -> dict[str, Any]:
    for arm in arms:
        phases = _obj(_obj(_obj(arm.get("startup")).get("facts")).get("startup_phases"))
        if phases:
            return phases
    return {}


def start_of(raw: dict[str, Any]) -> MeasuredStart | None:
    """The start a run.json states: the billed setup from `cold_start`, and a restart from the
    arms' timed restarts (their median: the whole restart, process and health wait included)
    or, when no arm was restarted, the engine's own start from its phases (engines/base.py
    engine_start_s, which leaves out the process start, so it is the lower figure). None when
    it states neither."""
    cold = _obj(raw.get("cold_start"))
    arms = [_obj(a) for a in raw.get("arms") or []]
    restarts = sorted(v for a in arms if (v := _seconds(a.get("restart_s"))) is not None)
    phases = _obj(cold.get("phases")) or _arm_phases(arms)
    restart: float | None
    if restarts:
        mid = len(restarts) // 2
        restart = restarts[mid] if len(restarts) % 2 else (restarts[mid - 1] + restarts[mid]) / 2
        restart_from = "arm restarts"
    else:
        restart, restart_from = engine_start_s(phases), "startup phases"
    setup = _seconds(cold.get("billed_s_to_ready"))
    if setup is None and restart is None:
        return None
    hit = cold.get("compile_cache_hit", phases.get("compile_cache_hit"))
    return MeasuredStart(str(raw.get("run_id") or ""), str(raw.get("created_at") or ""), setup,
                         restart, restart_from, hit if isinstance(hit, bool) else None)


def _earlier_starts(results_dir: Path, engine: str) -> list[tuple[Card, MeasuredStart]]:
    """Every run under `results_dir` (a run directory, or a matrix card's) of `engine` whose
    run.json states what its start took, with the card it ran on as its run.json names it."""
    found = []
    for path in sorted(results_dir.glob("*/run.json")) + sorted(results_dir.glob("*/*/run.json")):
        try:
            raw = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        if not isinstance(raw, dict) or _obj(raw.get("engine")).get("name") != engine:
            continue
        pod = _obj(raw.get("pod"))
        count = pod.get("gpu_count") or 1
        seen = Card(str(raw.get("provider") or ""), str(pod.get("gpu") or ""),
                    count if isinstance(count, int) else -1)
        start = start_of(raw)
        if start is not None:
            found.append((seen, start))
    return found


def _latest_start(starts: list[tuple[Card, MeasuredStart]], card: Card,
                  gpu_names: tuple[str, ...]) -> MeasuredStart | None:
    keys = {Card(card.provider, name, card.count).key() for name in (card.gpu, *gpu_names)}
    found = [start for seen, start in starts if seen.key() in keys]
    return max(found, key=lambda s: s.created_at) if found else None


def measured_start(results_dir: Path, card: Card, engine: str,
                   gpu_names: tuple[str, ...] = ()) -> MeasuredStart | None:
    """The latest run under `results_dir` (a run directory, or a matrix card's) of this card
    (provider, GPU, count) and engine whose run.json states what its start took. The GPU may
    be named as the card names it or as any of `gpu_names` (the provider's own name for it)."""
    return _latest_start(_earlier_starts(results_dir, engine), card, gpu_names)


def least_card_hours(results_dir: Path, card: Card, engine: str, sweep: SweepSpec,
                     cost: CostModel) -> tuple[float, dict[str, Any]]:
    """The fewest hours the card's projection can come to whatever its offer says, and the start
    that gives them; known before any provider is asked. The offer only adds its own name for the
    GPU to the earlier runs looked up (`price_cards`), so the projection is one of: the card's own
    name's, or that of each other GPU name an earlier run of its provider, count and engine
    states."""
    starts = _earlier_starts(results_dir, engine)  # every run.json read once
    others = {seen.gpu for seen, _start in starts
              if seen.provider == card.provider and seen.count == card.count}
    least: tuple[float, dict[str, Any]] | None = None
    for names in [(), *((name,) for name in sorted(others))]:
        card_cost, used = cost.for_card(_latest_start(starts, card, names))
        hours = card_cost.card_hours(sweep.projected_arms(), sweep.projected_cells())
        if least is None or hours < least[0]:
            least = (hours, used)
    assert least is not None
    return least


def ttl_refusal(settings: Settings, card: Card, hours: float,
                used: dict[str, Any]) -> ConfigError | None:
    """A card projected past the pods' TTL (the dead-man switch would end it mid-sweep)."""
    if settings.ttl_hours <= 0 or hours <= settings.ttl_hours:  # 0: no TTL
        return None
    return ConfigError(
        f"{card.label} is projected to need {hours:.2f} h ({start_line(used)}), past the "
        f"pods' TTL of {settings.ttl_hours:g} h (the dead-man switch would end it "
        "mid-sweep); nothing was rented",
        hint=f"set TAILPOD_TTL_HOURS={hours * 1.25:.1f}, or plan fewer arms, levels or reps")


def refuse_cards_past_ttl(settings: Settings, cards: list[Card], sweep: SweepSpec,
                          cost: CostModel) -> None:
    """Refuse, before any provider, registry or ledger call, a card that no offer could bring
    within the pods' TTL (`least_card_hours`); `price_cards` checks each card's own projection
    again once its offer named the GPU."""
    for card in cards:
        refusal = ttl_refusal(settings, card, *least_card_hours(
            Path(settings.results_dir), card, settings.engine, sweep, cost))
        if refusal is not None:
            raise refusal


@dataclass(frozen=True)
class SweepSpec:
    """The sweep every card runs, identical across cards (stored in matrix.json for resume)."""

    ks: tuple[int, ...] = (0,)
    spec_method: str = "mtp"
    draft_model: str | None = None
    concurrency: tuple[int, ...] = (1, 2, 4, 8, 16, 32, 64)
    reps: int = 3
    max_tokens: int = 256
    requests_per_cell: int | None = None
    prompt_classes: tuple[str, ...] = ("prose",)
    cache: str = "cold"
    extend_k: bool = True
    max_k: int = 8

    def plan(self, cfg: EngineConfig) -> SweepPlan:
        """A fresh plan for one card (the K extension grows a plan, so none is shared)."""
        return SweepPlan(
            arms=spec_arms(cfg, list(self.ks), self.spec_method, self.draft_model),
            concurrency=list(self.concurrency), prompt_classes=list(self.prompt_classes),
            reps=self.reps, max_tokens=self.max_tokens,
            requests_per_cell=self.requests_per_cell, extend_k=self.extend_k, max_k=self.max_k,
        )

    def projected_arms(self) -> int:
        """Arms the sweep may run: the K extension adds one past the largest K asked for."""
        spec = [k for k in self.ks if k > 0]
        extra = 1 if self.extend_k and spec and max(spec) < self.max_k else 0
        return len(set(self.ks)) + extra

    def projected_cells(self) -> int:
        return (self.projected_arms() * len(self.concurrency) * self.reps
                * len(self.prompt_classes))

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> SweepSpec:
        data = dict(data)
        for key in ("ks", "concurrency", "prompt_classes"):
            data[key] = tuple(data[key])
        return cls(**data)


@dataclass(frozen=True)
class BudgetPolicy:
    """How the live spend is watched: every `poll_s`, stop when the spend plus the running rate
    over `margin_s` (time to notice and tear down) would reach the budget."""

    poll_s: float = 5.0
    margin_s: float = 180.0


# -- the matrix state (matrix.json) --------------------------------------------------------------


class MatrixState:
    """matrix.json: the cards, their pods, status and spend; written atomically on every change."""

    def __init__(self, path: Path, data: dict[str, Any]) -> None:
        self.path = path
        self.data = data
        self.lock = threading.RLock()

    @classmethod
    def create(cls, directory: Path, matrix_id: str, cards: list[Card], *, budget: float,
               parallel: int, image: str, digest: str | None, cfg: EngineConfig,
               sweep: SweepSpec, cost: CostModel) -> MatrixState:
        data = {
            "schema": STATE_SCHEMA, "matrix_id": matrix_id,
            "created_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "budget_usd": budget, "parallel": parallel,
            "image": {"ref": image, "digest": digest}, "engine_config": cfg.to_json(),
            "sweep": sweep.to_json(), "cost_model": cost.to_json(), "stopped": None,
            "cards": {c.label: {"card": c.to_json(), "status": "pending", "error": None,
                                "pods": [], "run_tag": None, "proofs": {},
                                "run_dir": str(directory / c.slug), "projected_usd": None,
                                "price_per_hr": None, "spend_usd": 0.0} for c in cards},
        }
        state = cls(directory / MATRIX_FILE, data)
        state.save()
        return state

    @classmethod
    def load(cls, directory: Path) -> MatrixState:
        path = directory / MATRIX_FILE
        try:
            data = json.loads(path.read_text())
        except (OSError, ValueError):
            raise ConfigError(f"no readable matrix at {path}",
                              hint="--run-id names a matrix directory under the results dir") \
                from None
        if data.get("schema") != STATE_SCHEMA:
            raise ConfigError(f"{path} is not a tailpod matrix ({data.get('schema')!r})")
        return cls(path, data)

    @property
    def cards(self) -> list[Card]:
        return [Card(**{k: v for k, v in entry["card"].items() if k != "label"})
                for entry in self.data["cards"].values()]

    def card(self, label: str) -> dict[str, Any]:
        entry: dict[str, Any] = self.data["cards"][label]
        return entry

    def update(self, label: str, **fields: Any) -> None:
        with self.lock:
            self.data["cards"][label].update(fields)
            self.save()

    def save(self) -> None:
        with self.lock:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            tmp = self.path.with_suffix(".json.tmp")
            tmp.write_text(redact(json.dumps(self.data, indent=2, default=str)))
            tmp.replace(self.path)


# -- how one card is rented, measured and torn down ------------------------------------------


class CardSteps(Protocol):
    def up(self, settings: Settings, cfg: EngineConfig, ledger: Ledger, say: Say) -> PodRecord:
        """Rent the pod and start the engine with `cfg`; the ledger knows the pod throughout."""
        ...

    def host(self, settings: Settings, ledger: Ledger, record: PodRecord,
             cache: str) -> SweepHost:
        """Where the sweep runs: next to the engine, on the pod."""
        ...

    def down(self, settings: Settings, ledger: Ledger, record: PodRecord) -> BillingEvidence:
        """Terminate and prove billing stopped (raises unless proven)."""
        ...

    # Optional: `healthy(settings, ledger, record) -> bool`, whether a pod a killed run left can
    # be measured on (its engine answers); without it, a resume settles every such pod.


@dataclass
class CloudSteps:
    """The single-pod path every cloud `up` / `benchmark` / `down` takes."""

    use_tailnet: bool = True
    allow_unpinned: bool = False
    allow_nonephemeral: bool = False

    def up(self, settings: Settings, cfg: EngineConfig, ledger: Ledger, say: Say) -> PodRecord:
        from tailpod.pods.base import UpOptions
        from tailpod.pods.kinds import kind_for

        options = UpOptions(use_tailnet=self.use_tailnet, allow_unpinned=self.allow_unpinned,
                            allow_nonephemeral=self.allow_nonephemeral)
        result = kind_for(settings.provider).up(settings, cfg, ledger,
                                                lambda _f, line: say(line), options)
        return result.record

    def host(self, settings: Settings, ledger: Ledger, record: PodRecord,
             cache: str) -> SweepHost:
        from tailpod.measure.hosts import sweep_host

        return sweep_host(settings, ledger, record, None, cache)

    def down(self, settings: Settings, ledger: Ledger, record: PodRecord) -> BillingEvidence:
        from tailpod.pods.kinds import kind_for

        return kind_for(record.provider).down(settings, ledger, record)

    def healthy(self, settings: Settings, ledger: Ledger, record: PodRecord) -> bool:
        """A killed run's pod is adopted only while its engine answers (the sweep restarts it
        for each arm anyway, so the arm it served does not matter)."""
        from tailpod.pods.kinds import kind_for

        return record.status == "running" and bool(
            kind_for(record.provider).engine_healthy(settings, record))


class MatrixStopped(TailpodError):
    """The matrix was stopped (budget, Ctrl-C) while this card ran."""


class StopAwareHost:
    """A sweep host that refuses the next restart or cell once the matrix is stopped."""

    def __init__(self, host: SweepHost, stop: threading.Event, why: Callable[[], str],
                 pod: dict[str, Any] | None = None) -> None:
        self.host = host
        self.stop = stop
        self.why = why
        self.measured_from = host.measured_from
        self.pod = pod  # stamped on every row: the pod a cell was measured on

    def _check(self) -> None:
        if self.stop.is_set():
            raise MatrixStopped(f"stopped: {self.why()}")

    def restart(self, arm: Arm) -> ArmStart:
        self._check()
        return self.host.restart(arm)

    def run_cells(self, arm: Arm, cells: list[Cell], plan: SweepPlan,
                  run_id: str) -> list[dict[str, Any]]:
        self._check()
        rows = self.host.run_cells(arm, cells, plan, run_id)
        if self.pod is not None:
            for row in rows:
                row["pod"] = dict(self.pod)
        return rows

    def gate_reference(self, arm: Arm, plan: SweepPlan) -> dict[str, Any]:
        self._check()
        return self.host.gate_reference(arm, plan)

    def gate_compare(self, arm: Arm, reference: dict[str, Any], plan: SweepPlan) -> GateResult:
        self._check()
        return self.host.gate_compare(arm, reference, plan)

    def bare_decode(self, arm: Arm, plan: SweepPlan) -> dict[str, Any]:
        self._check()
        return self.host.bare_decode(arm, plan)

    def close(self) -> None:
        self.host.close()


class _CardLedger(Ledger):
    """The one ledger file, seen by one card: reports the run tag the moment the intent record
    is written (before the create request leaves), so the matrix can track and stop that pod."""

    def __init__(self, home: Path, on_new_tag: Callable[[str], None],
                 matrix: dict[str, Any] | None = None) -> None:
        super().__init__(home)
        self._on_new_tag = on_new_tag
        self._matrix = matrix

    def put(self, record: PodRecord) -> PodRecord:
        # The record names its matrix and card from its first write (the intent, before the
        # create leaves): a kill before matrix.json names the pod still leaves it known.
        if self._matrix is not None and record.extra.matrix is None:
            record.extra.matrix = dict(self._matrix)
        saved = super().put(record)
        self._on_new_tag(record.run_tag)
        return saved


# -- spend -----------------------------------------------------------------------------------


def record_spend(record: PodRecord, now: float, fallback_price: float | None) -> float:
    """What a pod has cost so far: its $/hr from the create (or, before the provider answered,
    the offer's) times the time from the create request to the proof (or now, while active)."""
    start = next((e["t"] for e in record.events if e.get("event") == "creating"),
                 record.created_at)
    end = now if record.active else max((e["t"] for e in record.events), default=now)
    price = record.price_per_hr if record.price_per_hr is not None else fallback_price
    return (price or 0.0) * max(0.0, end - start) / 3600.0


def refresh_price(settings: Settings, ledger: Ledger, record: PodRecord) -> PodRecord:
    """The pod's own $/hr once it runs, when the create's read-back could not tell it yet (RunPod
    reports a cost only for a RUNNING pod): $/Mtok needs the price this pod bills at."""
    if record.price_per_hr is not None or not record.pod_id:
        return record
    from tailpod.provision.providers import get_provider

    info = get_provider(record.provider, settings).get(record.pod_id)
    if info is None or info.price_per_hr is None:
        return record
    return ledger.update(record.run_tag, event="price-read", price_per_hr=info.price_per_hr)


# -- resume: what a killed run left -----------------------------------------------------------


def _still_owned(record: PodRecord) -> str | None:
    """Who still runs the matrix that holds this pod: another live process (here, or on a host
    whose processes cannot be seen from here); None when its owner is gone or is this one."""
    owner = (record.extra.matrix or {}).get("owner")
    if not isinstance(owner, dict) or not owner:
        return None
    alive = operation_owner_alive(owner)
    if alive is False or (alive and owner.get("pid") == os.getpid()):
        return None
    return f"pid {owner.get('pid')} on {owner.get('host')}"


def take_over(settings: Settings, state: MatrixState, steps: CardSteps,
              say: Say) -> dict[str, PodRecord]:
    """Before a resume rents anything: every pod of this matrix the ledger still holds as live
    (matrix.json names it, or its record names the matrix: a kill between the two writes) is
    attached to its card, then adopted (healthy, for a card still to measure: returned, one per
    card) or settled (torn down with its billing proof). Refuses while the matrix still runs
    elsewhere; raises BillingNotProven, before any rental, when a settle is not proven."""
    ledger = Ledger(settings.state_dir)
    matrix_id = state.data["matrix_id"]
    held = ledger.all()
    for record in held:
        mine = record.extra.matrix or {}
        label = mine.get("card")
        if mine.get("id") == matrix_id and isinstance(label, str) \
                and label in state.data["cards"]:
            with state.lock:
                pods = state.card(label)["pods"]
                if record.run_tag not in pods:
                    pods.append(record.run_tag)
                    state.save()
    by_tag = {r.run_tag: r for r in held}
    live = [(label, by_tag[tag]) for label, entry in state.data["cards"].items()
            for tag in entry["pods"] if tag in by_tag and by_tag[tag].active]
    for _label, record in live:
        holder = _still_owned(record)
        if holder is not None:
            raise ConfigError(
                f"matrix {matrix_id} is still running ({holder} holds {record.run_tag}); "
                "nothing was rented", hint="let it finish, or stop it (Ctrl-C) and resume")
    adopted: dict[str, PodRecord] = {}
    unproven: list[str] = []
    for label, record in live:
        card = next(c for c in state.cards if c.label == label)
        card_cfg = card_settings(settings, card, str(state.data["image"]["ref"]))
        healthy = getattr(steps, "healthy", None)
        if state.card(label)["status"] != "done" and label not in adopted \
                and healthy is not None and healthy(card_cfg, ledger, record):
            adopted[label] = record
            say(f"{label}: adopting {record.run_tag} from the interrupted run (healthy)")
            continue
        say(f"{label}: settling {record.run_tag} from the interrupted run")
        try:
            steps.down(card_cfg, ledger, record)
        except TailpodError as exc:
            unproven.append(f"{record.run_tag}: {exc.message}")
            continue
        proof = Path(settings.results_dir) / record.run_tag / "billing-proof.json"
        with state.lock:
            state.card(label)["proofs"][record.run_tag] = str(proof)
            state.save()
        say(f"{label}: {record.run_tag} torn down, billing proven stopped")
    if unproven:
        raise BillingNotProven(
            "the interrupted run's pods are not proven down, so nothing was rented: "
            + " | ".join(unproven),
            hint="run `tailpod down TAG` for each, then resume")
    return adopted


def spent_so_far(settings: Settings, state: MatrixState) -> tuple[float, str]:
    """USD every pod of the matrix has cost, earlier runs' included, and where it comes from:
    per pod the larger of the ledger's (its $/h times its billed time) and, where the provider
    measures it (RunPod's billing history, which lags), the provider's own figure."""
    from tailpod.provision.providers import get_provider

    ledger, now = Ledger(settings.state_dir), time.time()
    total, measured = 0.0, 0
    for entry in state.data["cards"].values():
        for tag in entry["pods"]:
            record = ledger.get(tag)
            if record is None:
                continue
            spend = record_spend(record, now, entry.get("price_per_hr"))
            billed = None
            if record.pod_id:
                try:
                    provider = get_provider(record.provider, settings)
                    reader = getattr(provider, "billed_so_far", None)
                    billed = reader(record.pod_id) if reader is not None else None
                except TailpodError:
                    billed = None
            if isinstance(billed, (int, float)) and billed > spend:
                spend, measured = float(billed), measured + 1
            total += spend
    source = "the ledger" + (f", the provider's billing for {measured} pod(s)" if measured else "")
    return round(total, 6), source


# -- preflight: price every card, refuse bad input -------------------------------------------


# A spot pod is rented again after a preemption at most this many times per card or benchmark
# (then it fails as any sweep whose pod died does; `--run-id` resumes it).
MAX_PREEMPTIONS = 3


def pod_stamp(record: PodRecord) -> dict[str, Any]:
    """What every row measured on `record`'s pod carries: which pod, and where it ran."""
    machine = record.extra.machine or {}
    return {"run_tag": record.run_tag, "pod_id": record.pod_id, "gpu": record.gpu,
            "host": (record.ssh or {}).get("host"),
            "machine": machine.get("hostname") or machine.get("id")}


def preempted_now(settings: Settings, record: PodRecord) -> bool:
    """Whether the provider says `record`'s spot pod lost its bid (PodInfo.detail["preempted"]);
    False when it cannot be asked: the card then fails as any card whose pod died."""
    from tailpod.provision.providers import get_provider

    if not record.extra.spot or not record.pod_id:
        return False
    try:
        info = get_provider(record.provider, settings).get(record.pod_id)
    except TailpodError:
        return False
    return bool(info is not None and info.detail.get("preempted"))


def preemption_entry(ledger: Ledger, lost: PodRecord, now: float) -> dict[str, Any]:
    """What a preemption cost, as matrix.json and a benchmark's run.json keep it: the lost pod,
    when it was seen lost, and its whole time and spend (an upper bound on the loss: the cut cell
    and the new pod's setup are the loss, the lost pod's finished cells are kept)."""
    seen = ledger.get(lost.run_tag) or lost
    return {"pod": lost.run_tag, "pod_id": lost.pod_id, "at": now,
            "pod_minutes": round((now - seen.created_at) / 60.0, 2),
            "pod_usd": round(record_spend(seen, now, seen.price_per_hr), 6)}


def go_on_after_preemption(settings: Settings, ledger: Ledger, lost: PodRecord, *,
                           settle: Callable[[PodRecord], Any], rent: Callable[[], PodRecord],
                           refuses: Callable[[], str | None], run_dir: RunDirectory,
                           plan: SweepPlan, what: str, say: Say) -> PodRecord:
    """A spot pod lost its bid mid-sweep (`matrix --spot`, `benchmark --resume-on-preemption`):
    `settle` destroys the stopped pod and proves it and its disk gone (raising when it cannot, so
    nothing is rented beside a pod that may still bill), `refuses` says why renting again would
    break the budget (None: go ahead), `rent` rents again under the same price cap and bid; the
    sweep then goes on from its last finished cell (the cut cell's rows are dropped and it is
    measured again) with the gate taken again on the new pod first (sweep.regate_on_new_pod).
    Returns the new pod."""
    say(f"[bold yellow]preempted[/]: {lost.run_tag} lost its bid; destroying it and renting "
        f"{what} again")
    settle(lost)
    refused = refuses()
    if refused:
        raise TailpodError(f"preempted, and not rented again: {refused}")
    record = refresh_price(settings, ledger, rent())
    regated = regate_on_new_pod(
        run_dir, plan,
        f"preempted: {lost.run_tag} lost its bid; the sweep goes on on {record.run_tag} "
        "from its last finished cell, the cut cell measured again")
    if regated:
        say(f"gate taken again on {record.run_tag} for {', '.join(regated)}")
    return record


def measure_through_preemptions(settings: Settings, record: PodRecord,
                                measure: Callable[[PodRecord], None],
                                go_on: Callable[[PodRecord], PodRecord], *,
                                preempted_so_far: Callable[[], int],
                                stopped: Callable[[], bool] = lambda: False) -> PodRecord:
    """`measure(record)`, and while it fails because the spot pod lost its bid (the provider
    says so: `preempted_now`), `go_on(lost)` gives the new pod and it is measured there; at most
    MAX_PREEMPTIONS times, and never once the run is `stopped`. Any other failure, or a pod the
    provider cannot be asked about, is raised as it was. Returns the pod the sweep finished on."""
    while True:
        try:
            measure(record)
            return record
        except Exception:
            if stopped() or preempted_so_far() >= MAX_PREEMPTIONS \
                    or not preempted_now(settings, record):
                raise
        record = go_on(record)


def card_settings(settings: Settings, card: Card, image: str) -> Settings:
    """The settings one card rents, prices and tears down with: its provider and GPUs, and its
    purchase (its own marker, else `--spot`); the bid goes only with a spot card."""
    spot = card.is_spot(settings.spot)
    return dataclasses.replace(settings, provider=card.provider, gpus=(card.gpu,),
                               gpu_count=card.count, image=image, spot=spot,
                               bid=settings.bid if spot else None)


def marks_spot(settings: Settings, cards: list[Card] | None, run_id: str | None) -> bool:
    """Whether a card is marked `:spot`: of `cards`, else of the matrix `run_id` resumes (its
    matrix.json). Such a card takes `--bid` as `--spot` does (config.py spot_problems)."""
    if not cards and run_id:
        state = MatrixState.load(run_path(settings.results_dir, run_id))
        return any(card.spot or (card.spot is None and state.card(card.label).get("spot"))
                   for card in state.cards)  # an unmarked card the resumed run bought spot
    return any(card.spot for card in cards or [])


def keep_purchases(settings: Settings, state: MatrixState) -> Settings:
    """`settings` for resuming `state`: its unmarked cards bought as the first run bought them
    (under `--spot` or not, kept per card in matrix.json), so a card's rows and $/Mtok read one
    purchase. `--spot`/`--no-spot` (or TAILPOD_SPOT) that says otherwise is refused (exit 2)."""
    given = source_of(settings, "spot")
    for card in state.cards:
        stored = state.card(card.label).get("spot")
        if card.spot is not None or stored is None:  # its marker is kept; or never priced
            continue
        if given is not None and bool(settings.spot) != stored:
            bought, asked = ("spot", "on-demand") if stored else ("on-demand", "spot")
            raise ConfigError(f"card {card.label!r} was rented {bought} by the matrix being "
                              f"resumed; the spot setting ({given}) would rent it {asked}",
                              hint="leave --spot/--no-spot out to resume each card as it was "
                                   "bought")
        if stored and not settings.spot:
            settings = dataclasses.replace(settings, spot=True)
    return settings


def check_spot_cards(settings: Settings, cards: list[Card], image: str) -> None:
    """A spot card (marked `:spot`, or any under `--spot`) whose provider sells no spot: exit 2
    before any offer query, rental or write (provision/providers.py `check_spot_route`)."""
    from tailpod.provision.providers import check_spot_route

    check_purchases(cards, settings.spot)
    for card in cards:
        if card.spot is None:  # `--spot` made it spot: the flag's own refusal and hint
            check_spot_route(card_settings(settings, card, image))
            continue
        try:
            check_spot_route(card_settings(settings, card, image))
        except ConfigError as exc:
            raise ConfigError(f"card {card.label}: {exc.message}",
                              hint=f"drop its :spot marker to rent it on-demand, e.g. "
                                   f"\"{dataclasses.replace(card, spot=None).label}\"") from None


def price_cards(settings: Settings, cards: list[Card], sweep: SweepSpec, cost: CostModel,
                budget: float, image: str) -> dict[str, dict[str, Any]]:
    """Each card's $/hr and projected spend, from the providers' offers; nothing is rented.

    Refuses (ConfigError) a card's projected hours past the pods' TTL, an unknown card, a budget
    below one cell of the cheapest card, and a projected total above the budget. A card whose
    provider cannot be asked fails alone."""
    from tailpod.preflight.cloud import PREFLIGHT_TIMINGS
    from tailpod.provision.providers import get_provider

    if budget <= 0:
        raise ConfigError(f"--budget must be positive, got {budget}")
    refuse_cards_past_ttl(settings, cards, sweep, cost)  # before the first offer query
    check_spot_cards(settings, cards, image)  # a card that cannot be spot: before any offer
    priced: dict[str, dict[str, Any]] = {}
    unknown: list[str] = []
    for card in cards:
        bought = card_settings(settings, card, image)  # the card's own purchase and bid
        provider = get_provider(card.provider, bought, timings=PREFLIGHT_TIMINGS)
        entry: dict[str, Any] = {"price_per_hr": None, "projected_usd": None, "problem": None,
                                 "spot": bought.spot, "bid": bought.bid}
        offer = None
        try:
            offer = provider.offers([card.gpu], card.count, settings.max_price)[0]
        except ConfigError:
            raise
        except TailpodError as exc:
            entry["problem"] = f"{card.provider} could not be asked for offers: {exc.message}"
        if offer is not None and offer.detail.get("error") == "unknown GPU type":
            unknown.append(card.label)
            continue
        # an earlier run names the GPU as the provider rented it (the offer's type)
        names = (offer.gpu_type,) if offer is not None and offer.gpu_type else ()
        card_cost, used = cost.for_card(
            measured_start(Path(settings.results_dir), card, settings.engine, names))
        hours = card_cost.card_hours(sweep.projected_arms(), sweep.projected_cells())
        entry.update(hours=round(hours, 4), start=used)
        refusal = ttl_refusal(settings, card, hours, used)
        if refusal is not None:  # this card's own projection, now that its offer named the GPU
            raise refusal
        price = offer.price_per_hr if offer is not None else None
        if bought.spot and offer is not None and price is not None:
            # a spot card is priced, and budgeted, at what its bid bills (provision/base.py)
            price = provider.spot_prices([offer.gpu_type], card.count, bought.bid
                                         ).get(offer.gpu_type)
            # the on-demand offer's price, kept for the report's spot-versus-on-demand $/Mtok
            entry.update(on_demand_per_hr=offer.price_per_hr)
        if offer is not None and price is None:
            entry["problem"] = (f"no {card.provider} {'spot ' if bought.spot else ''}offer "
                                f"for {card.count}x {card.gpu} right now")
        elif offer is not None and price is not None:
            entry["price_per_hr"] = price
            entry["projected_usd"] = round(price * hours, 4)
            entry["cell_usd"] = cost.cell_usd(price)
            entry["gpu"] = offer.gpu_type
        priced[card.label] = entry
    if unknown:
        raise ConfigError(f"unknown card(s): {', '.join(unknown)}; nothing was rented",
                          hint="use GPU names from the provider's catalog "
                               "(`tailpod check-requirements` lists the offers)")
    costs = {k: v for k, v in priced.items() if v["price_per_hr"] is not None}
    if not costs:
        raise ConfigError("no card could be priced, so nothing was rented: "
                          + "; ".join(f"{k}: {v['problem']}" for k, v in priced.items()))
    cheapest_cell = min(costs.items(), key=lambda kv: kv[1]["cell_usd"])
    if budget < cheapest_cell[1]["cell_usd"]:
        raise ConfigError(
            f"the budget ${budget:.4f} is below the projected cost of one cell "
            f"(${cheapest_cell[1]['cell_usd']:.4f} on {cheapest_cell[0]}); nothing was rented",
            hint="raise --budget")
    total = sum(v["projected_usd"] for v in costs.values())
    if total > budget:
        lines = ", ".join(f"{k} ${v['projected_usd']:.2f} ({v['hours']:.2f} h)"
                          for k, v in costs.items())
        raise ConfigError(
            f"the projected spend ${total:.2f} is above the budget ${budget:.2f} ({lines}); "
            "nothing was rented",
            hint="raise --budget, or drop cards, arms, concurrency levels or reps")
    return priced


# -- the run ---------------------------------------------------------------------------------


class MatrixRun:
    """Runs the cards of a matrix state in parallel, watching the budget from the main thread."""

    def __init__(self, settings: Settings, state: MatrixState, steps: CardSteps, *,
                 say: Say, policy: BudgetPolicy | None = None,
                 port_for: Callable[[int], int] | None = None,
                 adopted: dict[str, PodRecord] | None = None) -> None:
        self.settings = settings
        self.state = state
        self.steps = steps
        # A killed run's healthy pod per card (`take_over`): measured on instead of a rental.
        self.adopted = dict(adopted or {})
        self.owner = operation_stamp("matrix")
        self.say = say
        self.policy = policy or BudgetPolicy()
        self.port_for = port_for
        self.stop = threading.Event()
        self.stop_reason = ""
        self.unproven: set[str] = set()
        self._card_locks = {c.label: threading.Lock() for c in state.cards}
        self.budget = float(state.data["budget_usd"])
        self.sweep = SweepSpec.from_json(state.data["sweep"])
        self.base = EngineConfig.from_json(state.data["engine_config"])
        self.image = str(state.data["image"]["ref"])

    # -- bookkeeping --
    def ledger(self) -> Ledger:
        return Ledger(self.settings.state_dir)

    def _attach(self, label: str, run_tag: str) -> None:
        with self.state.lock:
            entry = self.state.card(label)
            if run_tag not in entry["pods"]:
                entry["pods"].append(run_tag)
            entry["run_tag"] = run_tag
            self.state.save()

    def spend(self) -> tuple[float, float]:
        """(USD spent so far by every pod of the matrix, USD/h now billing)."""
        ledger, now = self.ledger(), time.time()
        spent = rate = 0.0
        for entry in self.state.data["cards"].values():
            for tag in entry["pods"]:
                record = ledger.get(tag)
                if record is None:
                    continue
                spent += record_spend(record, now, entry.get("price_per_hr"))
                if record.active:
                    rate += record.price_per_hr or entry.get("price_per_hr") or 0.0
        return spent, rate

    def _save_spend(self) -> None:
        """Each card's spend so far into matrix.json at every poll, not only at its teardown."""
        with self.state.lock:
            for label in self.state.data["cards"]:
                self.state.card(label)["spend_usd"] = self._card_spend(label)
            self.state.save()

    def _card_spend(self, label: str) -> float:
        ledger, now = self.ledger(), time.time()
        entry = self.state.card(label)
        return round(sum(record_spend(r, now, entry.get("price_per_hr"))
                         for tag in entry["pods"] if (r := ledger.get(tag)) is not None), 6)

    # -- stopping --
    def request_stop(self, reason: str) -> None:
        if not self.stop.is_set():
            self.stop_reason = reason
            self.stop.set()
            self.state.data["stopped"] = reason
            self.state.save()
            self.say(f"[bold red]matrix stopped[/]: {reason}; no further card is rented, "
                     "tearing every pod down")
        self.teardown_active()

    def teardown_active(self) -> None:
        """Tear down, side by side, every pod of the matrix the ledger still holds as active."""
        ledger = self.ledger()
        labels = [label for label, entry in self.state.data["cards"].items()
                  if any((r := ledger.get(t)) is not None and r.active for t in entry["pods"])]
        threads = [threading.Thread(target=self.teardown, args=(label, False), daemon=True)
                   for label in labels]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()

    def watch_budget(self) -> None:
        spent, rate = self.spend()
        self._save_spend()
        margin = rate * self.policy.margin_s / 3600.0
        if not self.stop.is_set() and spent + margin >= self.budget:
            self.state.data["spent_at_stop_usd"] = round(spent, 6)
            self.request_stop(f"budget: ${spent:.4f} spent and ${rate:.2f}/h billing would cross "
                              f"${self.budget:.4f} within {self.policy.margin_s:.0f} s")

    def _budget_refuses(self, label: str) -> str | None:
        """Why renting this card now could cross the budget (None: go ahead)."""
        spent, _rate = self.spend()
        committed = 0.0
        for other, entry in self.state.data["cards"].items():
            if other != label and entry["status"] in ("renting", "measuring"):
                committed += max(0.0, (entry.get("projected_usd") or 0.0) - self._card_spend(other))
        projected = self.state.card(label).get("projected_usd") or 0.0
        if spent + committed + projected > self.budget:
            return (f"not rented: ${spent:.4f} spent, ${committed:.4f} committed to running "
                    f"cards and its own ${projected:.4f} would cross the budget ${self.budget:.4f}")
        return None

    # -- one card --
    def teardown(self, label: str, wait: bool = True) -> None:
        """Tear down every pod of this card that lacks a billing proof; idempotent. With
        `wait=False` it leaves a card alone whose teardown is already under way."""
        from tailpod.provision.teardown import PROOF_FILE, run_dir_for

        lock = self._card_locks[label]
        if not lock.acquire(blocking=wait):
            return
        try:
            entry = self.state.card(label)
            ledger = self.ledger()
            for tag in list(entry["pods"]):
                record = ledger.get(tag)
                proof = run_dir_for(self.settings, tag) / PROOF_FILE
                if record is None or (not record.active and proof.exists()):
                    continue
                card_cfg = card_settings(self.settings, self.card_of(label), self.image)
                try:
                    self.steps.down(card_cfg, ledger, record)
                except TailpodError as exc:
                    self.unproven.add(tag)
                    self.say(f"[bold red]{label}: teardown of {tag} NOT proven[/]: {exc.message}")
                    continue
                self.unproven.discard(tag)
                with self.state.lock:
                    entry["proofs"][tag] = str(proof)
                    self.state.save()
                self.say(f"{label}: {tag} torn down, billing proven stopped")
            self.state.update(label, spend_usd=self._card_spend(label))
        finally:
            lock.release()

    def _after_preemption(self, label: str, settings: Settings, cfg: EngineConfig,
                          ledger: Ledger, lost: PodRecord, run_dir: RunDirectory,
                          say: Say) -> PodRecord:
        """The card's spot pod lost its bid mid-sweep: the preemption recorded in matrix.json,
        then the one way on (`go_on_after_preemption`): the stopped pod destroyed and proven gone,
        the card rented again within the budget, the gate taken again on the new pod."""
        with self.state.lock:
            self.state.card(label).setdefault("preemptions", []).append(
                preemption_entry(ledger, lost, time.time()))
            self.state.save()

        def settle(_lost: PodRecord) -> None:
            self.teardown(label)
            if lost.run_tag in self.unproven:
                raise TailpodError(f"{lost.run_tag} was preempted and its teardown is not proven; "
                                   "the card is not rented again")

        return go_on_after_preemption(
            settings, ledger, lost, settle=settle,
            rent=lambda: self.steps.up(settings, cfg, ledger, say),
            refuses=lambda: self._budget_refuses(label), run_dir=run_dir,
            plan=self.sweep.plan(cfg), what="the card", say=say)

    def card_of(self, label: str) -> Card:
        return next(c for c in self.state.cards if c.label == label)

    def run_card(self, index: int, card: Card) -> None:
        label = card.label
        last = [""]

        def say(line: str) -> None:
            # The pod agent repeats its latest engine line every second under a counter;
            # with several pods on one console, print each line once.
            text = _COUNTER.sub("", line)
            if text != last[0]:
                last[0] = text
                self.say(f"[dim]{label}[/] {line}")

        if self.stop.is_set():
            self.state.update(label, status="skipped", error=f"not rented: {self.stop_reason}")
            if self.adopted.pop(label, None) is not None:
                self.teardown(label)
            return
        refused = self._budget_refuses(label)
        if refused:
            self.state.update(label, status="skipped", error=refused)
            say(refused)
            if self.adopted.pop(label, None) is not None:
                self.teardown(label)
            return
        settings = card_settings(self.settings, card, self.image)
        cfg = self.base if self.port_for is None \
            else dataclasses.replace(self.base, port=self.port_for(index))
        cfg = cfg.on_gpus(card.count)
        ledger = _CardLedger(self.settings.state_dir, lambda tag: self._attach(label, tag),
                             {"id": self.state.data["matrix_id"], "card": label,
                              "owner": self.owner})
        adopted = self.adopted.pop(label, None)
        self.state.update(label, status="measuring" if adopted else "renting", error=None)
        run_dir = Path(self.state.card(label)["run_dir"])
        try:
            if adopted is not None:  # the killed run's pod: its matrix owner is this run now
                mine = {"id": self.state.data["matrix_id"], "card": label, "owner": self.owner}
                adopted = ledger.update(adopted.run_tag, event="matrix-adopted",
                                        extra=dataclasses.replace(adopted.extra, matrix=mine))
            record = refresh_price(settings, ledger, adopted if adopted is not None
                                   else self.steps.up(settings, cfg, ledger, say))

            def measure(pod: PodRecord) -> None:
                prices = {**self.state.card(label).get("pod_prices", {}),
                          pod.run_tag: pod.price_per_hr}
                self.state.update(label, status="measuring", gpu=pod.gpu, pod_prices=prices)
                host = self.steps.host(settings, ledger, pod, self.sweep.cache)
                try:
                    run_id = f"{self.state.data['matrix_id']}-{card.slug}"
                    run_sweep(self.sweep.plan(cfg), RunDirectory(run_dir),
                              StopAwareHost(host, self.stop, lambda: self.stop_reason,
                                            pod_stamp(pod)),
                              RunContext.for_pod(pod, run_id, cfg), log=say)
                finally:
                    host.close()

            measure_through_preemptions(
                settings, record, measure,
                lambda lost: self._after_preemption(label, settings, cfg, ledger, lost,
                                                    RunDirectory(run_dir), say),
                preempted_so_far=lambda: len(self.state.card(label).get("preemptions", [])),
                stopped=self.stop.is_set)
            self.state.update(label, status="done")
        except Exception as exc:  # one card's failure, whatever it is, never stops the others
            stopped = self.stop.is_set()
            message = exc.message if isinstance(exc, TailpodError) else \
                f"{exc.__class__.__name__}: {exc}"
            self.state.update(label, status="stopped" if stopped else "failed",
                              error=redact(self.stop_reason if stopped else message))
            say(f"[red]{'stopped' if stopped else 'failed'}[/]: "
                f"{redact(self.stop_reason if stopped else message)}")
        finally:
            self.teardown(label)

    # -- all cards --
    def run(self, only: set[str] | None = None) -> None:
        """Run the cards not yet done (of `only`, when given)."""
        cards = [(i, c) for i, c in enumerate(self.state.cards)
                 if self.state.card(c.label)["status"] != "done"
                 and (only is None or c.label in only)]
        parallel = max(1, int(self.state.data["parallel"]))
        pool = ThreadPoolExecutor(max_workers=parallel, thread_name_prefix="tailpod-matrix")
        futures: dict[Future[None], str] = {pool.submit(self.run_card, i, c): c.label
                                            for i, c in cards}
        try:
            self._wait(futures)
        except BaseException as exc:  # Ctrl-C or a crash here: stop, tear down, then re-raise
            self.request_stop("interrupted (Ctrl-C)" if isinstance(exc, KeyboardInterrupt)
                              else f"interrupted ({exc.__class__.__name__})")
            pool.shutdown(wait=False, cancel_futures=True)
            self._drain(futures)
            raise
        finally:
            pool.shutdown(wait=False, cancel_futures=True)
            for label in list(self.adopted):  # an adopted pod its card never measured on
                self.adopted.pop(label)
                self.teardown(label)
            for future, label in futures.items():
                if future.cancelled() and self.state.card(label)["status"] == "pending":
                    self.state.update(label, status="skipped",
                                      error=f"not rented: {self.stop_reason}")
            for label in self.state.data["cards"]:
                self.state.update(label, spend_usd=self._card_spend(label))

    def _wait(self, futures: dict[Future[None], str]) -> None:
        remaining = set(futures)
        while remaining:
            _done, remaining = wait(remaining, timeout=self.policy.poll_s,
                                    return_when=FIRST_COMPLETED)
            self.watch_budget()
            if self.stop.is_set():
                self.teardown_active()  # a pod created after the stop is torn down too

    def _drain(self, futures: dict[Future[None], str]) -> None:
        """After a stop, wait for the cards still running; each ends with its own teardown."""
        remaining = {f for f in futures if not f.done()}
        while remaining:
            _done, remaining = wait(remaining, timeout=self.policy.poll_s)
            self.teardown_active()


# -- the matrix's report and its run (what `tailpod matrix` calls) ---------------------------


def cells_by_pod(run_dir: Path) -> dict[str, int]:
    """How many finished cells each pod measured (the `pod` every matrix row carries)."""
    from tailpod.measure.sweep import RunDirectory

    counts: dict[str, int] = {}
    if not (run_dir / "rows.jsonl").exists():
        return counts
    for row in RunDirectory(run_dir).read_rows():
        if row.get("kind") == "cell" and isinstance(row.get("pod"), dict):
            tag = str(row["pod"].get("run_tag"))
            counts[tag] = counts.get(tag, 0) + 1
    return counts


def write_matrix_report(state: MatrixState) -> dict[str, Path]:
    """matrix-report.json, matrix.md and the $/Mtok plot, next to matrix.json."""
    from tailpod.results.analysis import analyze
    from tailpod.results.io import load_run

    outcomes = []
    for label, entry in state.data["cards"].items():
        outcome: dict[str, Any] = {"card": label, "status": entry["status"],
                                   "error": entry.get("error"), "spend_usd": entry.get("spend_usd"),
                                   "proof": ", ".join(entry.get("proofs", {}).values()) or None,
                                   "run_tag": entry.get("run_tag"), "run_dir": entry["run_dir"],
                                   "preemptions": entry.get("preemptions") or [],
                                   "cells_by_pod": cells_by_pod(Path(entry["run_dir"])),
                                   "spot": entry.get("spot"), "bid": entry.get("bid"),
                                   "on_demand_per_hr": entry.get("on_demand_per_hr")}
        run_json = Path(entry["run_dir"]) / "run.json"
        if run_json.exists():
            try:
                outcome["analysis"] = analyze(load_run(entry["run_dir"]))
                outcome["run"] = json.loads(run_json.read_text())
            except (TailpodError, ValueError, OSError) as exc:
                outcome["error"] = "; ".join(filter(None, [outcome["error"],
                                                           f"results unreadable: {exc}"]))
        outcomes.append(outcome)
    # `--objective`/`--slo` as the matrix was started (matrix.json); cost, no SLO before them
    decision = state.data.get("decision") or {}
    matrix = build_matrix(outcomes, objective=decision.get("objective", "cost"),
                          slo=decision.get("slo"))
    for label, entry in state.data["cards"].items():
        prices = {p for p in (entry.get("pod_prices") or {}).values() if p is not None}
        if len(prices) > 1:  # a resumed card measured on a new pod: run.json keeps the first price
            matrix["warnings"].append(
                f"{label} was measured on pods at different prices "
                f"({', '.join(f'${p:.2f}/h' for p in sorted(prices))}); its $/Mtok uses the "
                "first pod's price")
    matrix.update(matrix_id=state.data["matrix_id"], budget_usd=state.data["budget_usd"],
                  stopped=state.data.get("stopped"), image=state.data["image"],
                  model=state.data["engine_config"].get("model"))
    directory = state.path.parent
    paths = {"json": directory / "matrix-report.json", "markdown": directory / MATRIX_REPORT,
             "plot": directory / MATRIX_PLOT}
    paths["json"].write_text(redact(json.dumps(matrix, indent=2, default=str)))
    paths["markdown"].write_text(redact(render_matrix_markdown(
        matrix, f"Card matrix {state.data['matrix_id']}: {matrix['model']}")))
    plot_matrix_cost(matrix, paths["plot"])
    return paths


def summary_lines(paths: dict[str, Path]) -> list[str]:
    """The matrix report's summary, a line each (rich markup): stamp, cheapest card per band,
    ranking per concurrency, each card's outcome and spend, where the report is."""
    matrix = json.loads(paths["json"].read_text())
    lines = [f"[bold red]{matrix['stamp']}[/]"] if matrix.get("stamp") else []
    for band in matrix["bands"]:
        span = f"c={band['from']}" + (f"–{band['to']}" if band["to"] != band["from"] else "")
        lines.append(f"  cheapest at {span}: [bold]{band['card']}[/]")
    for table in matrix["tables"]:
        lines.append(f"  c={table['concurrency']}: " + (" < ".join(table["ranking"]) or "—")
                     + "  ($/Mtok, lowest first)")
    for card in matrix["cards"]:
        lines.append(f"  {card['card']}: {card['status']}"
                     + (f" ({card['error']})" if card.get("error") else "")
                     + f", spent ${card.get('spend_usd') or 0:.4f}")
    lines.append(f"matrix report: {paths['markdown']} (plot {paths['plot'].name})")
    return lines


def new_matrix_id() -> str:
    return "mx-" + time.strftime("%Y%m%d-%H%M%S", time.gmtime()) + "-" + os.urandom(2).hex()


def run_matrix(settings: Settings, *, cards: list[Card] | None, sweep: SweepSpec,
               cost: CostModel, budget: float, parallel: int, base: EngineConfig,
               steps: CardSteps, run_id: str | None = None, dry_run: bool = False,
               allow_unpinned: bool = False, port_for: Callable[[int], int] | None = None,
               policy: BudgetPolicy | None = None,
               report: dict[str, Any] | None = None,
               decision: dict[str, Any] | None = None,
               say: Callable[[str], None] = print) -> MatrixRun | None:
    """Price, refuse or start (or resume, with `run_id`) a matrix, run it and write its report.

    None after a dry run. A resumed matrix keeps its cards, sweep, image and cost model; the
    budget covers every pod of the matrix, those of earlier runs included. `say` gets each line
    (rich markup)."""
    from tailpod.pods.cloud import pinned_image
    from tailpod.preflight.cloud import image_cuda, offer_settings

    results = Path(settings.results_dir)
    state: MatrixState | None = None
    spent_before = 0.0
    adopted: dict[str, Any] = {}
    if run_id:
        state = MatrixState.load(run_path(results, run_id))
        check_purchases(state.cards, settings.spot)  # `--spot` again over `:on-demand` cards
        settings = keep_purchases(settings, state)
        if cards and [c.label for c in cards] != [c.label for c in state.cards]:
            raise ConfigError("--card differs from the matrix being resumed",
                              hint="leave --card out to resume the same cards")
        sweep = SweepSpec.from_json(state.data["sweep"])
        cost = CostModel(**state.data["cost_model"])
        settings = dataclasses.replace(settings, model=state.data["engine_config"]["model"],
                                       engine=state.data["engine_config"]["engine"])
        pinned, digest = str(state.data["image"]["ref"]), state.data["image"]["digest"]
        if not dry_run:  # before anything is priced or rented: what the killed run left
            adopted = take_over(settings, state, steps, say)
        todo = [c for c in state.cards if state.card(c.label)["status"] != "done"]
        # every pod of the matrix from the ledger (matrix.json's spend a killed run never wrote)
        spent_before, source = spent_so_far(settings, state)
        state.data["spent_before_usd"] = spent_before
        say(f"resuming {run_id}: {len(state.cards) - len(todo)} card(s) done, "
                      f"${spent_before:.4f} spent so far (every pod of the matrix, from "
                      f"{source})")
    else:
        if not cards:
            raise ConfigError("no cards given", hint='pass --card "provider:GPU[xN]"')
        refuse_cards_past_ttl(settings, cards, sweep, cost)  # before the registry is asked
        pinned, digest = pinned_image(settings, allow_unpinned)
        todo = cards
    # priced as `up` rents: hosts must reach the image's CUDA (the one offer query, issue 37)
    cuda = image_cuda(dataclasses.replace(settings, image=pinned))[0]
    prices = price_cards(offer_settings(settings, cuda), todo, sweep, cost,
                         budget - spent_before, pinned)
    for label, entry in prices.items():
        line = (f"${entry['price_per_hr']:.2f}/h, projected ${entry['projected_usd']:.2f} "
                f"({purchase_text(entry)})"
                if entry["price_per_hr"] is not None else f"cannot run: {entry['problem']}")
        say(f"  {label}: {line}")
        say(f"    start: {start_line(entry['start'])}")
    total = sum(e["projected_usd"] or 0 for e in prices.values())
    if report is not None:
        report.update(dry_run=dry_run, budget_usd=budget, prices=prices,
                      projected_usd=round(total, 4))
    say(f"projected spend ${total:.2f} of ${budget - spent_before:.2f} left in the "
                  f"budget ({sweep.projected_cells()} cells per card, at most)")
    if dry_run:
        return None
    if state is None:
        assert cards is not None
        matrix_id = new_matrix_id()
        state = MatrixState.create(results / matrix_id, matrix_id, cards, budget=budget,
                                   parallel=parallel, image=pinned, digest=digest, cfg=base,
                                   sweep=sweep, cost=cost)
    else:
        state.data.update(budget_usd=budget, parallel=parallel, stopped=None)
    if decision is not None:  # the report's ranking: kept in matrix.json, a resume may change it
        state.data["decision"] = decision
    for label, entry in prices.items():
        fields: dict[str, Any] = {"projected_usd": entry["projected_usd"],
                                  "price_per_hr": entry["price_per_hr"],
                                  "projected_start": entry["start"]}
        fields.update(spot=bool(entry.get("spot")), bid=entry.get("bid"))  # the purchase
        if entry.get("spot"):
            fields.update(on_demand_per_hr=entry.get("on_demand_per_hr"))
        if entry["problem"]:
            fields.update(status="failed", error=entry["problem"])
        state.update(label, **fields)
    say(f"matrix {state.data['matrix_id']}: {len(todo)} card(s), {parallel} at a time, "
                  f"budget ${budget:.2f}")
    run = MatrixRun(settings, state, steps, say=say, policy=policy, port_for=port_for,
                    adopted=adopted)
    try:
        run.run(only={label for label, e in prices.items() if not e["problem"]})
    finally:
        paths = write_matrix_report(state)
        if report is not None:
            report.update(matrix_id=state.data["matrix_id"], paths=paths)
        for line in summary_lines(paths):
            say(line)
    return run
