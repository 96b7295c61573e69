"""What `tailpod benchmark` runs once its flags are checked: the sweep host for the pod, dressed
for what the pod serves (its lanes, a lanes deployment, a spot pod's stamp on each row), a run
resumed on a new pod gated again there first, then the sweep (or the max-rate search), and a
failure on a spot pod that lost its bid said as that (docs/providers.md "Spot"). The verb parses,
calls `run_benchmark` and prints."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from tailpod.config import Settings
from tailpod.errors import Preempted
from tailpod.ledger import Ledger, PodRecord
from tailpod.measure.plan import SweepPlan
from tailpod.measure.sweep import RunContext, RunDirectory, SweepHost


def preempted_error(settings: Settings, ledger: Ledger, record: PodRecord, run_id: str
                    ) -> Preempted | None:
    """A spot pod its provider says preempted, said plainly: when, that its disk still bills,
    and how the run resumes on a new pod (docs/providers.md "Spot"); None for any other pod."""
    from tailpod.provision.reconcile import spot_preemption

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
    from tailpod.measure.matrix_run import StopAwareHost, pod_stamp

    return StopAwareHost(host, threading.Event(), str, pod_stamp(record))


def resume_on_new_pod(run_dir: RunDirectory, plan: SweepPlan, record: PodRecord) -> list[str]:
    """A run resumed on another pod than the one it began on (a spot pod was preempted): the
    reference and the gates of the arms still to measure are taken again on this pod first
    (sweep.regate_on_new_pod). Returns those arms."""
    from tailpod.measure.sweep import regate_on_new_pod

    run = run_dir.load()
    if run is None or not run.get("run_tag") or run["run_tag"] == record.run_tag:
        return []
    note = f"resumed on {record.run_tag} after {run['run_tag']}: the gate is taken again there"
    if note in (run.get("notes") or []):  # gated on this pod already
        return []
    return regate_on_new_pod(run_dir, plan, note)


def benchmark_host(settings: Settings, ledger: Ledger, record: PodRecord,
                   progress: Callable[[float, str], None] | None, cache: str, from_here: bool,
                   lanes: dict[str, Any] | None,
                   deployment: dict[str, Any] | None) -> SweepHost:
    """The sweep host for `record` (its kind's: measure/hosts.py), measured as the lanes it
    serves, serving a lanes deployment, and stamping each row with a spot pod's identity."""
    from tailpod.measure.deploy import ServedLanesHost, deploying_host
    from tailpod.measure.hosts import sweep_host

    host: SweepHost = sweep_host(settings, ledger, record, progress, cache, from_here)
    if lanes is not None:
        host = ServedLanesHost(host, record, lanes)
    if deployment is not None and deployment["kind"] == "lanes":
        host = deploying_host(settings, ledger, record, host, deployment)
    if record.extra.spot:  # each row names the pod it was measured on
        host = pod_stamped(host, record)
    return host


def run_benchmark(settings: Settings, ledger: Ledger, record: PodRecord, plan: SweepPlan,
                  run_dir: RunDirectory, ctx: RunContext, *, cache: str, from_here: bool,
                  lanes: dict[str, Any] | None, deployment: dict[str, Any] | None,
                  max_rate: tuple[float, int] | None, log: Callable[[str], None],
                  progress: Callable[[float, str], None] | None,
                  on_cell: Callable[[str], None] | None) -> str:
    """`benchmark`: a spot pod already preempted refused before any SSH wait, a run that began on
    another pod gated again here first, then the sweep (or,
    with `max_rate` (tolerance, rounds), the max-rate search) through the pod's host; a failure
    on a preempted spot pod raises Preempted (exit 3) instead of the transport's error. Returns
    where the rows were measured from (pod, or off-pod for --from-here)."""
    from tailpod.measure.max_rate import find_max_rates
    from tailpod.measure.sweep import run_sweep

    preempted = preempted_error(settings, ledger, record, ctx.run_id)
    if preempted is not None:  # before the SSH wait on a pod that is stopped
        raise preempted
    resume_on_new_pod(run_dir, plan, record)
    host = benchmark_host(settings, ledger, record, progress, cache, from_here, lanes, deployment)
    try:
        if max_rate is not None:
            find_max_rates(plan, run_dir, host, ctx, max_rate[0], max_rate[1], log=log,
                           progress=on_cell)
        else:
            run_sweep(plan, run_dir, host, ctx, log=log, progress=on_cell)
    except Exception as exc:
        # a cell that failed because the spot pod lost its bid says so, not the SSH error
        preempted = preempted_error(settings, ledger, record, ctx.run_id)
        if preempted is not None:
            raise preempted from exc
        raise
    finally:
        host.close()
    return str(host.measured_from)
