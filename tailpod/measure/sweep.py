"""The sweep orchestrator: restart the engine per arm, gate speculative arms, run the probe per cell.

Laptop side. Where the engine and the probe run is a `SweepHost`: the local machine, or a pod over
SSH. Either way the probe measures against 127.0.0.1 on the machine that serves, and every row it
writes lands in `rows.jsonl` of the run directory as soon as its cell ends, so an interruption keeps
every finished cell and a rerun picks up where it stopped.
"""

from __future__ import annotations

import json
import math
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from functools import partial
from pathlib import Path
from typing import Any, Protocol, cast

from pydantic import ValidationError

from tailpod import __version__
from tailpod.agent_client.driver import ArmStart
from tailpod.engines.base import EngineConfig, SpecArm
from tailpod.errors import ConfigError, TailpodError
from tailpod.ledger import PodRecord
from tailpod.measure.plan import (
    Arm,
    Cell,
    Restart,
    SweepPlan,
    best_k_needs_extension,
    finished_cells,
    pending,
    rate_text,
)
from tailpod.provision.volumes import to_first_token
from tailpod.results.hardware import hardware_check
from tailpod.results.io import load_run, validation_summary
from tailpod.results.schema import (
    ROW_ADAPTER,
    ArmRecord,
    EngineRef,
    ImageRef,
    MeasuredFrom,
    Plan,
    PodDescription,
    RunMeta,
    unverified_reason,
)
from tailpod.secrets import redact


@dataclass
class GateResult:
    status: str  # pass | fail | skipped
    method: str | None = None
    prompts: int = 0
    first_mismatch: dict[str, Any] | None = None
    detail: str | None = None

    def to_json(self) -> dict[str, Any]:
        return self.__dict__.copy()


class SweepHost(Protocol):
    """Where the engine runs (tailpod/measure/hosts.py: a thin adapter over the pod agent).
    `measured_from` is "pod" when the probe runs beside the engine."""

    measured_from: str

    def restart(self, arm: Arm) -> ArmStart:
        """Serve this arm (relaunching the engine when it serves another); its start facts."""
        ...

    def bare_decode(self, arm: Arm, plan: SweepPlan) -> dict[str, Any]:
        """The serve tax's bare decode of this arm (the served engine stopped first), or a
        `not_measured` entry saying why not."""
        ...

    def close(self) -> None:
        """Let go of the pod (its one SSH session)."""
        ...

    def run_cells(
        self, arm: Arm, cells: list[Cell], plan: SweepPlan, run_id: str
    ) -> list[dict[str, Any]]:
        """Run the probe for these cells of the running arm; return its rows (requests and cells)."""
        ...

    def gate_reference(self, arm: Arm, plan: SweepPlan) -> dict[str, Any]:
        """Greedy token ids of the gate prompts from the running (plain) arm."""
        ...

    def gate_compare(self, arm: Arm, reference: dict[str, Any], plan: SweepPlan) -> GateResult:
        """Compare the running arm's greedy token ids with the reference."""
        ...


@dataclass
class RunContext:
    run_id: str
    provider: str
    model: str
    engine: str
    engine_version: str | None = None
    gpu: str | None = None
    gpu_count: int | None = None
    price_per_hr: float | None = None
    machine: dict[str, Any] = field(default_factory=dict)
    emulated: bool = False  # rented through a non-vendor API endpoint: claims unverified
    api_endpoint: str | None = None  # that endpoint (results/hardware.py)
    image_ref: str | None = None
    image_digest: str | None = None
    run_tag: str | None = None
    # What the provider's account was seen to do: the image's start form and CUDA bound, and
    # first contact's results for this account (ledger extra.provider_facts, pods/cloud.py).
    provider_facts: dict[str, Any] | None = None
    # Billed seconds and dollars from the create call to the engine serving, with its startup
    # phases and cache hit (ledger extra.cold_start, pods/cloud.py); the sweep adds the first
    # measured token (provision/volumes.py to_first_token).
    cold_start: dict[str, Any] | None = None

    @classmethod
    def for_pod(cls, record: PodRecord, run_id: str, cfg: EngineConfig) -> RunContext:
        """Provenance of a run on this pod: what the ledger knows about where it ran."""
        return cls(
            run_id=run_id,
            run_tag=record.run_tag,
            provider=record.provider,
            model=cfg.model,
            engine=cfg.engine,
            engine_version=record.extra.engine_version,
            gpu=record.gpu,
            gpu_count=record.gpu_count,
            price_per_hr=record.price_per_hr,
            machine=record.extra.machine or {},
            emulated=bool(record.extra.emulated),
            api_endpoint=record.extra.api_endpoint,
            image_ref=record.image,
            image_digest=(record.extra.image or {}).get("digest"),
            provider_facts=record.extra.provider_facts,
            cold_start=record.extra.cold_start,
        )


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


class RunDirectory:
    """run.json + rows.jsonl, written so a crash at any point leaves both readable."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self.run_json = self.path / "run.json"
        self.rows = self.path / "rows.jsonl"

    def load(self) -> dict[str, Any] | None:
        try:
            return json.loads(self.run_json.read_text())
        except (OSError, ValueError):
            return None

    def save(self, run: dict[str, Any]) -> None:
        """Write run.json through its model (results/schema.py RunMeta), the one the reader
        uses: a key the format does not declare fails here, not in a later report."""
        text = _checked(lambda: RunMeta.model_validate(run).model_dump_json(indent=2), "run.json")
        self.path.mkdir(parents=True, exist_ok=True)
        tmp = self.run_json.with_suffix(".json.tmp")
        tmp.write_text(redact(text))
        tmp.replace(self.run_json)

    def append_rows(self, rows: list[dict[str, Any]]) -> None:
        """Append rows as the probe wrote them (stdlib only on the pod, it has no models), each
        checked first against the row model the reader uses."""
        for row in rows:
            _checked(partial(ROW_ADAPTER.validate_python, row), f"row of {row.get('cell')}")
        self.path.mkdir(parents=True, exist_ok=True)
        with self.rows.open("a", encoding="utf-8") as fh:
            for row in rows:
                fh.write(redact(json.dumps(row, default=str)) + "\n")
            fh.flush()

    def drop_unfinished_requests(self) -> int:
        """Remove request rows of cells that never wrote their summary (a cell killed mid-way)."""
        if not self.rows.exists():
            return 0
        done = finished_cells(self.rows)
        kept, dropped = [], 0
        for line in self.rows.read_text(encoding="utf-8").splitlines():
            try:
                row = json.loads(line)
            except ValueError:
                dropped += 1
                continue
            if row.get("cell") in done:
                kept.append(line)
            else:
                dropped += 1
        if dropped:
            tmp = self.rows.with_suffix(".jsonl.tmp")
            tmp.write_text("".join(k + "\n" for k in kept), encoding="utf-8")
            tmp.replace(self.rows)
        return dropped

    def read_rows(self) -> list[dict[str, Any]]:
        if not self.rows.exists():
            return []
        out = []
        for line in self.rows.read_text(encoding="utf-8").splitlines():
            try:
                out.append(json.loads(line))
            except ValueError:
                continue
        return out


def _checked(build: Callable[[], Any], what: str) -> Any:
    """`build()`, with a model's refusal said in one line: a writer's bug, never a traceback."""
    try:
        return build()
    except ValidationError as exc:
        raise TailpodError(f"tailpod wrote a {what} that results format v1 refuses: "
                           f"{validation_summary(exc)}") from None


# What a finished cell's numbers depend on beyond its id (arm, concurrency, rep, class): a resume
# that changes one would keep the old cells beside new ones measured otherwise.
RESUME_KEEPS = ("max_tokens", "requests_per_cell", "unique_schema", "arrival", "burstiness",
                "arrival_seed")


def check_resumable(run_dir: RunDirectory, model: str, engine: str, plan: SweepPlan) -> None:
    """A run resumed (`--run-id` of a run with run.json) must be measured as it began: the same
    model, engine and RESUME_KEEPS of its plan, the same trace. ConfigError (exit 2) naming each
    difference, before anything waits or writes."""
    run = run_dir.load()
    if run is None:
        return
    was, now = run.get("plan") or {}, plan.to_json()
    pairs = [("model", run.get("model"), model),
             ("engine", (run.get("engine") or {}).get("name"), engine),
             *((key, was.get(key), now.get(key)) for key in RESUME_KEEPS),
             ("trace", (was.get("trace") or {}).get("name"), (now.get("trace") or {}).get("name"))]
    if was.get("soak_s") is not None and now.get("soak_s") is not None:  # added later: new cells
        pairs.append(("soak_s", was["soak_s"], now["soak_s"]))
    differs = [f"{key} {old} -> {new}" for key, old, new in pairs if old != new]
    if differs:
        raise ConfigError(f"run {run_dir.path.name} began with other settings ({'; '.join(differs)}); "
                          "resuming it would mix its finished cells with cells measured otherwise",
                          hint="the same flags and pod model resume it; another --run-id (or none) "
                               "starts a new run")


def new_run(ctx: RunContext, plan: SweepPlan, measured_from: str) -> dict[str, Any]:
    """A new run.json's content, built as its model (results/schema.py RunMeta)."""
    meta = RunMeta(
        run_id=ctx.run_id,
        run_tag=ctx.run_tag,
        tailpod_version=__version__,
        created_at=_now(),
        finished_at=None,
        provider=ctx.provider,
        pod=PodDescription(
            gpu=ctx.gpu, gpu_count=ctx.gpu_count, price_per_hr=ctx.price_per_hr,
            machine=ctx.machine, emulated=ctx.emulated,
            # The claimed GPU against the pod's own nvidia-smi facts; a stamp when they disagree.
            hardware_check=hardware_check(ctx.gpu, ctx.gpu_count, ctx.machine, ctx.emulated,
                                          ctx.api_endpoint),
        ),
        measured_from=cast(MeasuredFrom, measured_from),
        image=ImageRef(ref=ctx.image_ref, digest=ctx.image_digest),
        provider_facts=ctx.provider_facts,
        cold_start=ctx.cold_start,
        model=ctx.model,
        engine=EngineRef(name=ctx.engine, version=ctx.engine_version),
        plan=Plan.model_validate(plan.to_json()),
    )
    out: dict[str, Any] = meta.model_dump(mode="json")
    return out


def _arm_entry(run: dict[str, Any], arm: Arm) -> dict[str, Any]:
    for entry in run["arms"]:
        if entry["label"] == arm.label:
            return entry
    new: dict[str, Any] = ArmRecord(label=arm.label, engine_config=arm.config.to_json(),
                                    starts=[], unverified=None).model_dump(mode="json")
    run["arms"].append(new)
    return new


def regate_on_new_pod(run_dir: RunDirectory, plan: SweepPlan, note: str) -> list[str]:
    """A sweep that goes on on another pod (a spot pod was preempted): its plain reference and
    the gate of every arm with cells still to measure are cleared, so the resumed sweep takes the
    reference and gates those arms again on the new pod before any of their numbers; arms whose
    cells are all measured keep the gate of the pod they ran on, and a void arm stays void.
    Returns the arms to be gated again; `note` goes to run.json's notes."""
    run = run_dir.load()
    if run is None:
        return []
    todo = {s.arm for s in pending(plan, finished_cells(run_dir.rows)) if isinstance(s, Cell)}
    regated = []
    for entry in run.get("arms", []):
        if entry.get("label") in todo and not entry.get("void") and entry.get("gate") is not None:
            entry["gate"] = None
            regated.append(str(entry["label"]))
    run["gate_reference"] = None
    run.setdefault("notes", []).append(note)
    run_dir.save(run)
    return regated


def single_stream_throughput(rows: list[dict[str, Any]], plan: SweepPlan) -> dict[int, float]:
    """Median aggregate tok/s per K at the lowest concurrency, over cells that are not void, of the
    arms that are K candidates (a measured deployment is not one)."""
    lowest = min(plan.concurrency)
    by_k: dict[int, list[float]] = {}
    for row in rows:
        if row.get("kind") != "cell" or row.get("concurrency") != lowest or row.get("void") \
                or row.get("soak_s") is not None:  # a soak cell is not a rep of its level
            continue
        try:
            arm = plan.arm(row["arm"])
        except KeyError:
            continue
        if arm.is_deployment:
            continue
        k = arm.spec_k
        if row.get("output_tok_s") is not None:
            by_k.setdefault(k, []).append(float(row["output_tok_s"]))
    return {k: statistics.median(v) for k, v in by_k.items() if v}


# Saturation is a queue that grows for as long as arrivals come: past the server's capacity
# the later requests of a cell wait longer than the earlier ones (below it, the two halves of
# the schedule see the same latency). A cell is saturated when the median end-to-end latency from
# the schedule of its second half exceeds that of its first half by more than SATURATION_GROWTH
# of it and by SATURATION_FLOOR_S at least (noise on small latencies is not a queue), with at
# least SATURATION_MIN_REQUESTS answered. (Achieved against offered req/s would not do: a
# short cell's wall carries its last request's whole service time, so it reads low at any load.)
SATURATION_GROWTH = 0.5
SATURATION_FLOOR_S = 0.05
SATURATION_MIN_REQUESTS = 8


def _median(xs: list[float]) -> float:
    return float(statistics.median(xs))


def saturated_rate(rows: list[dict[str, Any]], arm: str) -> float | None:
    """The lowest finite rate at which a cell of `arm` saturated (any rep), from the rows so
    far; None when none has."""
    latencies: dict[str, list[tuple[int, float]]] = {}
    for row in rows:
        if row.get("kind") == "request" and row.get("arm") == arm and row.get("ok") \
                and isinstance(row.get("e2e_sched_s"), (int, float)):
            latencies.setdefault(str(row.get("cell")), []).append(
                (int(row.get("index") or 0), float(row["e2e_sched_s"])))
    found = None
    for row in rows:
        arrival = row.get("arrival")
        if row.get("kind") != "cell" or row.get("arm") != arm or not isinstance(arrival, dict):
            continue
        rate = arrival.get("rate")
        seq = [v for _, v in sorted(latencies.get(str(row.get("cell")), []))]
        if not (isinstance(rate, (int, float)) and math.isfinite(rate)) \
                or len(seq) < SATURATION_MIN_REQUESTS:
            continue
        early, late = _median(seq[: len(seq) // 2]), _median(seq[len(seq) - len(seq) // 2:])
        if late - early > max(SATURATION_GROWTH * early, SATURATION_FLOOR_S):
            found = rate if found is None else min(found, rate)
    return float(found) if found is not None else None


def cell_progress(cell: Cell, index: int, total: int, elapsed_s: float, measured: int) -> str:
    """The progress line while cell `index` of `total` (1-based) is measured: which cell, and the
    time left at this sweep's pace so far (its elapsed time, engine restarts and gates included,
    over the cells it measured), unknown until one cell has been measured."""
    load = ("trace" if cell.trace else f"rate={rate_text(cell.rate)}" if cell.rate is not None
            else f"soak c={cell.concurrency}" if cell.soak else f"c={cell.concurrency}")
    left = total - index + 1  # this cell and those after it
    eta = (f"~{elapsed_s / measured * left:.0f} s left" if measured
           else "time left known after this cell")
    return f"cell {index}/{total} arm={cell.arm} {load} rep={cell.rep}, {eta}"


def run_sweep(
    plan: SweepPlan,
    run_dir: RunDirectory,
    host: SweepHost,
    ctx: RunContext,
    log: Any = print,
    progress: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    """Run (or resume) a sweep. Returns the final run.json content. `progress` hears
    cell_progress()'s line before each cell is measured (the CLI's spinner, or a line on
    stderr without a terminal)."""
    started, measured = time.monotonic(), 0
    run = run_dir.load() or new_run(ctx, plan, host.measured_from)
    dropped = run_dir.drop_unfinished_requests()
    if dropped:
        run["notes"].append(f"resumed: dropped {dropped} rows of cells that did not finish")
        log(f"resuming: {dropped} rows of unfinished cells dropped; finished cells are kept")
    run_dir.save(run)
    reference: dict[str, Any] | None = run.get("gate_reference")
    running: str | None = None

    while True:
        done_before = len(finished_cells(run_dir.rows))
        steps = pending(plan, finished_cells(run_dir.rows))
        total = done_before + sum(isinstance(s, Cell) for s in steps)
        index = done_before
        for step in steps:
            arm = plan.arm(step.arm)
            entry = _arm_entry(run, arm)
            if isinstance(step, Restart) or running != arm.label:
                if not arm.config.spec.plain and reference is None:
                    # The gate needs plain decode's greedy tokens before any spec number.
                    plain = next((a for a in plan.arms if a.config.spec.plain), None)
                    if plain is not None:
                        reference = _start_and_reference(plain, run, run_dir, host, plan, log)
                if plan.serve_tax and entry.get("serve_tax") is None:
                    log(f"bare decode of {arm.label} for the serve tax (one more engine start)")
                    # The engine's own offline decode at the arm's settings, served engine
                    # stopped first (hosts.py).
                    entry["serve_tax"] = host.bare_decode(arm, plan)
                    run_dir.save(run)
                log(f"starting arm {arm.label}")
                t0 = time.time()
                start = host.restart(arm)
                running = arm.label
                entry.update(
                    argv=start.argv,
                    startup=start.startup,
                    checkpoints=start.checkpoints,
                    restart_s=round(time.time() - t0, 2),
                )
                entry["starts"].append({"at": _now(), "startup_s": start.startup_s})
                gated = any(not a.config.spec.plain for a in plan.arms)
                if arm.config.spec.plain and reference is None and gated:
                    reference = host.gate_reference(arm, plan)
                    run["gate_reference"] = reference
                if not arm.config.spec.plain and entry["gate"] is None:
                    gate = (
                        host.gate_compare(arm, reference or {}, plan)
                        if reference
                        else GateResult(
                            "skipped", detail="no plain arm in this sweep to gate against"
                        )
                    )
                    entry["gate"] = gate.to_json()
                    if gate.status == "fail":
                        entry["void"] = True
                        entry["void_reason"] = _void_reason(gate)
                        log(f"arm {arm.label} VOID: {entry['void_reason']}")
                    entry["unverified"] = unverified_reason(gate.status, gate.method)
                    if entry["unverified"]:
                        log(f"arm {arm.label} UNVERIFIED: {entry['unverified']}")
                run_dir.save(run)
            if isinstance(step, Restart):
                continue
            index += 1
            if _past_saturation(plan, step, run, run_dir, log):
                continue
            if progress is not None:
                progress(cell_progress(step, index, total, time.monotonic() - started, measured))
            rows = host.run_cells(arm, [step], plan, ctx.run_id)
            measured += 1
            if entry["void"]:
                for row in rows:
                    row["void"] = True
                    if row.get("kind") == "cell":
                        row.setdefault("flags", []).append("void")
            elif entry.get("unverified"):
                for row in rows:
                    if row.get("kind") == "cell":
                        row.setdefault("flags", []).append("unverified")
            run_dir.append_rows(rows)
            cold = run.get("cold_start")
            if cold and cold.get("billed_s_to_first_token") is None:
                to_first = to_first_token(cold, rows, time.time())
                if to_first is not None:
                    run["cold_start"] = to_first
                    run_dir.save(run)
                    log(f"billed to the first measured token: {to_first['billed_s_to_first_token']:.0f} s"
                        + (f" (${to_first['usd_to_first_token']:.4f})"
                           if to_first["usd_to_first_token"] is not None else ""))
            summary = next((r for r in rows if r.get("kind") == "cell"), None)
            if summary:
                log(
                    f"  {step.cell_id}: {summary.get('output_tok_s', 0):.1f} tok/s, "
                    f"failed {summary.get('failed', 0)}"
                )
        next_k = (
            best_k_needs_extension(
                single_stream_throughput(run_dir.read_rows(), plan),
                plan.max_k,
                {a.spec_k for a in plan.arms if not a.is_deployment},
            )
            if plan.extend_k
            else None
        )
        candidates = [a for a in plan.arms if not a.is_deployment]
        if next_k is None or any(a.spec_k == next_k for a in candidates):
            break
        template = max((a for a in candidates if a.spec_k > 0), key=lambda a: a.spec_k)
        spec = SpecArm(
            k=next_k,
            method=template.config.spec.method,
            draft_model=template.config.spec.draft_model,
        )
        plan.arms.append(Arm(label=spec.label(), config=replace(template.config, spec=spec)))
        run["plan"] = plan.to_json()
        run["notes"].append(f"best K was the largest measured; extended the sweep to K={next_k}")
        log(f"best K is the largest measured: extending to K={next_k}")
        run_dir.save(run)

    run["finished_at"] = _now()
    run_dir.save(run)
    _record_fingerprint(run, run_dir)
    return run


def _past_saturation(plan: SweepPlan, step: Cell, run: dict[str, Any], run_dir: RunDirectory,
                     log: Any) -> bool:
    """True (and noted in run.json once) when the cell's finite rate lies above a rate at which
    its arm already saturated: the ladder stops there for that arm (an `inf` cell still runs)."""
    if not plan.saturation_stop or plan.arm_rates is not None or step.rate is None \
            or not math.isfinite(step.rate):
        return False
    sat = saturated_rate(run_dir.read_rows(), step.arm)
    if sat is None or step.rate <= sat:
        return False
    note = (f"{step.arm}: rate {rate_text(step.rate)} skipped, the ladder saturated at "
            f"{rate_text(sat)} req/s (latency from the schedule grew across the cell)")
    if note not in run["notes"]:
        run["notes"].append(note)
        run_dir.save(run)
        log(note)
    return True


def _record_fingerprint(run: dict[str, Any], run_dir: RunDirectory) -> None:
    """The run's acceptance fingerprint (results/fingerprint.py), from the files just written.
    The measurements are saved already; a fingerprint that cannot be built is a note, not a loss."""
    # lazy: the fingerprint's reader loads at a run's end, not at every `tailpod` start
    # (docs/architecture.md, function-level imports)
    from tailpod.results.fingerprint import run_fingerprint

    try:
        run["fingerprint"] = run_fingerprint(load_run(run_dir.path))
    except (TailpodError, ValueError) as exc:
        run["notes"].append(f"no acceptance fingerprint: {exc}")
    run_dir.save(run)


def _start_and_reference(
    plain: Arm,
    run: dict[str, Any],
    run_dir: RunDirectory,
    host: SweepHost,
    plan: SweepPlan,
    log: Any,
) -> dict[str, Any]:
    log(f"starting arm {plain.label} for the gate reference")
    start = host.restart(plain)
    entry = _arm_entry(run, plain)
    entry.update(argv=start.argv, startup=start.startup, checkpoints=start.checkpoints)
    entry["starts"].append(
        {"at": _now(), "startup_s": start.startup_s, "purpose": "gate reference"}
    )
    reference = host.gate_reference(plain, plan)
    run["gate_reference"] = reference
    run_dir.save(run)
    return reference


def _void_reason(gate: GateResult) -> str:
    where = gate.first_mismatch or {}
    return (
        f"token-identity gate failed: prompt {where.get('prompt')} differs from plain decode at "
        f"token {where.get('position')}"
    )
