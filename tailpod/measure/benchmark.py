"""What `tailpod benchmark` runs once its flags are checked: the sweep host for the pod, dressed
for what the pod serves (its lanes, a lanes deployment, a spot pod's stamp on each row), a run
resumed on a new pod gated again there first, then the sweep (or the max-rate search); a spot
pod that lost its bid said as that, or under --resume-on-preemption destroyed, proven gone and
its card rented again (docs/providers.md "Spot"). The verb parses, calls `run_benchmark` and
prints."""

from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from tailpod.config import Settings
from tailpod.engines.base import EngineConfig
from tailpod.errors import BillingNotProven, Preempted, TailpodError
from tailpod.ledger import Ledger, PodRecord
from tailpod.measure import matrix_run, sweep
from tailpod.measure.deploy import ServedLanesHost, deploying_host
from tailpod.measure.matrix_run import StopAwareHost, pod_stamp
from tailpod.measure.plan import SweepPlan
from tailpod.measure.sweep import RunContext, RunDirectory, SweepHost, regate_on_new_pod
from tailpod.provision.reconcile import spot_preemption
from tailpod.provision.tailnet.steps import remember_pod_ssh


def preempted_error(settings: Settings, ledger: Ledger, record: PodRecord, run_id: str
                    ) -> Preempted | None:
    """A spot pod its provider says preempted, said plainly: when, that its disk still bills,
    and how the run resumes on a new pod (docs/providers.md "Spot"); None for any other pod."""
    flag = spot_preemption(settings, ledger, record)
    if flag is None:
        return None
    return Preempted(
        f"{record.run_tag} was {flag}: the spot pod lost its bid and the benchmark cannot go on "
        "on it; the cell it was measuring is void and not counted (its rows are dropped when the "
        "run resumes), the finished cells are kept",
        hint=f"settle it with: tailpod down {record.run_tag}; then tailpod up --spot … and "
             f"tailpod benchmark --run-id {run_id} (the same flags) resumes from the last "
             "finished cell on the new pod, its gate taken again first")


def pod_stamped(host: SweepHost, record: PodRecord) -> SweepHost:
    """The host whose rows carry the pod they were measured on (matrix_run.pod_stamp), so a run
    resumed on a new spot pod says which cells came from which pod."""
    return StopAwareHost(host, threading.Event(), str, pod_stamp(record))


def resume_on_new_pod(run_dir: RunDirectory, plan: SweepPlan, record: PodRecord) -> list[str]:
    """A run resumed on another pod than the one it began on (a spot pod was preempted): the
    reference and the gates of the arms still to measure are taken again on this pod first
    (sweep.regate_on_new_pod). Returns those arms."""
    run = run_dir.load()
    if run is None or not run.get("run_tag") or run["run_tag"] == record.run_tag:
        return []
    note = f"resumed on {record.run_tag} after {run['run_tag']}: the gate is taken again there"
    if note in (run.get("notes") or []):  # gated on this pod already
        return []
    return regate_on_new_pod(run_dir, plan, note)


def benchmark_host(settings: Settings, ledger: Ledger, record: PodRecord,
                   progress: Callable[[float, str], None] | None, cache: str, from_here: bool,
                   lanes: dict[str, Any] | None, deployment: dict[str, Any] | None,
                   measured_from: list[str] | None = None) -> SweepHost:
    """The sweep host for `record` (its kind's: measure/hosts.py), measured as the lanes it
    serves, serving a lanes deployment, and stamping each row with a spot pod's identity.
    `measured_from` gets where the kind's host measures from."""
    # lazy: kept off what `tailpod --help` imports (docs/architecture.md)
    from tailpod.measure import hosts

    host: SweepHost = hosts.sweep_host(settings, ledger, record, progress, cache, from_here)
    if measured_from is not None:
        measured_from[:] = [host.measured_from]
    if lanes is not None:
        host = ServedLanesHost(host, record, lanes)
    if deployment is not None and deployment["kind"] == "lanes":
        host = deploying_host(settings, ledger, record, host, deployment)
    if record.extra.spot:  # each row names the pod it was measured on
        host = pod_stamped(host, record)
    return host


def replacement_settings(settings: Settings, lost: PodRecord) -> Settings:
    """What a preempted spot pod's replacement is rented with: the lost pod's provider, its card
    first and then the rest of the preference list it was rented from, its GPU count, its price
    cap and the bid `up` was asked for (None: each offer's minimum bid), its pinned image."""
    preference = [lost.gpu] if lost.gpu else []
    preference += [g for g in lost.extra.gpu_preference or [] if g not in preference]
    asked = next((e for e in lost.events if e.get("event") == "intent"), {})
    image = (lost.extra.image or {}).get("ref") or lost.image or settings.image
    return dataclasses.replace(
        settings, provider=lost.provider, gpus=tuple(preference) or settings.gpus,
        gpu_count=lost.gpu_count, spot=True, bid=asked.get("bid", lost.extra.bid),
        max_price=lost.extra.max_price if lost.extra.max_price is not None
        else settings.max_price, image=image)


def record_preemption(run_dir: RunDirectory, entry: dict[str, Any]) -> None:
    """The preemption in run.json `preemptions`, where the report's section reads it."""
    run = run_dir.load()
    known = (run or {}).get("preemptions") or []
    if run is not None and not any(p.get("pod") == entry["pod"] for p in known):
        run["preemptions"] = [*known, entry]
        run_dir.save(run)


@dataclass
class BenchmarkDone:
    """What `run_benchmark` leaves for the verb to print."""

    measured_from: str  # "pod", or off-pod for --from-here
    preemptions: list[dict[str, Any]]  # the spot pods lost and replaced on the way
    finished_on: PodRecord  # the pod the sweep ended on (a new one after a preemption)


def run_benchmark(settings: Settings, ledger: Ledger, record: PodRecord, plan: SweepPlan,
                  run_dir: RunDirectory, ctx: RunContext, *, cache: str, from_here: bool,
                  lanes: dict[str, Any] | None, deployment: dict[str, Any] | None,
                  max_rate: tuple[float, int] | None, resume_on_preemption: bool,
                  say: Callable[[str], None], say_plain: Callable[[str], None],
                  progress: Callable[[float, str], None] | None,
                  on_cell: Callable[[str], None] | None) -> BenchmarkDone:
    """`benchmark`: a spot pod already preempted refused before any SSH wait (replaced instead
    under `resume_on_preemption`), a run that began on another pod gated again here first, then
    the sweep (or, with `max_rate` (tolerance, rounds), the max-rate search) through the pod's
    host; `say` gets lines with markup, `say_plain` a provider's own words. Under
    `resume_on_preemption` a spot pod that loses its bid is destroyed and proven gone
    and its card rented again, the one way a spot sweep goes on (measure/matrix_run.py, as
    `matrix --spot`). A failure on a preempted spot pod raises Preempted (exit 3) instead of the
    transport's error; a lost pod whose destroy is not proven raises its own exit 3."""
    rid = ctx.run_id
    base = EngineConfig.from_json(record.engine)
    preempted = preempted_error(settings, ledger, record, rid)
    if preempted is not None and not resume_on_preemption:
        raise preempted  # before the SSH wait on a pod that is stopped
    resume_on_new_pod(run_dir, plan, record)
    preemptions: list[dict[str, Any]] = []
    on_pod = [record]  # the pod measured on now (a new one after a preemption)
    measured_from = ["pod"]

    def measure(pod: PodRecord) -> None:
        # lazy: kept off what `tailpod --help` imports (docs/architecture.md)
        from tailpod.measure.max_rate import find_max_rates

        on_pod[0] = pod
        host = benchmark_host(settings, ledger, pod, progress, cache, from_here, lanes,
                              deployment, measured_from)
        try:
            if max_rate is not None:
                find_max_rates(plan, run_dir, host, ctx, max_rate[0], max_rate[1], log=say,
                               progress=on_cell)
            else:
                sweep.run_sweep(plan, run_dir, host, RunContext.for_pod(pod, rid, base),
                                log=say, progress=on_cell)
        finally:
            host.close()

    def go_on(lost: PodRecord) -> PodRecord:
        entry = matrix_run.preemption_entry(ledger, lost, time.time())
        preemptions.append(entry)
        record_preemption(run_dir, entry)
        again = replacement_settings(settings, lost)
        steps = matrix_run.CloudSteps(use_tailnet=bool(lost.tailnet))

        def rent() -> PodRecord:
            try:
                return steps.up(again, base, ledger, say_plain)
            except TailpodError as exc:  # the lost pod is proven gone by now
                if exc.exit_code == 3:  # the replacement's own up left something that may bill
                    raise BillingNotProven(
                        f"{lost.run_tag} was preempted and destroyed (billing proven stopped), "
                        f"but its replacement failed and may still bill: {exc.message}",
                        hint=exc.hint) from exc
                raise TailpodError(
                    f"{lost.run_tag} was preempted and destroyed (billing proven "
                    f"stopped), and no new pod could be rented: {exc.message}",
                    hint=f"tailpod up --spot …, then tailpod benchmark --run-id {rid} "
                         "(the same flags) resumes from the last finished cell") from exc

        new = matrix_run.go_on_after_preemption(
            again, ledger, lost, settle=lambda p: steps.down(again, ledger, p),
            rent=rent, refuses=lambda: None, run_dir=run_dir, plan=plan,
            what="its card", say=say)
        if new.ssh.get("host"):  # `ssh tailpod-<new>` as after `up` (the lost one's went)

            try:  # a convenience: never what stops a sweep on a pod that bills
                path, _include = remember_pod_ssh(settings, new.run_tag, new.ssh)
                say(f"ssh config entry written to {path} (tailpod-{new.run_tag})")
            except (TailpodError, OSError) as exc:
                say(f"no ssh config entry for {new.run_tag}: {exc}")
        return new

    try:
        # a pod already preempted is replaced before anything waits on it
        first = record if preempted is None else go_on(record)
        finished_on = matrix_run.measure_through_preemptions(
            settings, first, measure, go_on,
            preempted_so_far=lambda: len(preemptions),
            stopped=lambda: not resume_on_preemption)
    except Exception as exc:
        if isinstance(exc, TailpodError) and exc.exit_code == 3:
            raise  # a lost pod's destroy not proven: its own words say what may bill
        # a cell that failed because the spot pod lost its bid says so, not the SSH error
        preempted = preempted_error(settings, ledger, on_pod[0], rid)
        if preempted is not None:
            raise preempted from exc
        now_on = ledger.get(on_pod[0].run_tag)
        if isinstance(exc, TailpodError) and now_on is not None and now_on.active \
                and now_on.run_tag != record.run_tag:  # the pod asked for is gone by now
            exc.message += (f" (on {now_on.run_tag}, rented when {record.run_tag} was "
                            f"preempted; it is still up: tailpod down {now_on.run_tag})")
        raise
    finally:
        for entry in preemptions:  # a pod replaced before run.json was first written
            record_preemption(run_dir, entry)
    return BenchmarkDone(measured_from[0], preemptions, finished_on)
