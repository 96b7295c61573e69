"""`tailpod benchmark --deploy DECISION.json`: the emitted deployment as one more arm of the sweep,
through the same gate, the same cells and the same reps (docs/decide.md).

A static (or flagged mixed) deployment is an ordinary arm of the named K, labelled `deploy-static`
/ `deploy-mixed`. A two-lane deployment, `deploy-lanes`, is served by stopping the pod's single
engine and starting both lanes and HAProxy on the engine's port (pods/lanes.py), so the probe and
the gate reach the proxy where they reached the engine; any later arm stops the lanes (each proven
gone) and relaunches the engine. `results/decide.py` then compares every `deploy…` arm with the
per-band best instead of choosing it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from tailpod.agent_client.driver import ArmStart
from tailpod.config import Settings
from tailpod.engines.base import EngineConfig, SpecArm
from tailpod.errors import ConfigError
from tailpod.ledger import Ledger, PodExtra, PodRecord
from tailpod.measure.plan import DEPLOY_PREFIX, Arm, Cell, SweepPlan
from tailpod.measure.sweep import GateResult, SweepHost
from tailpod.pods import lanes as lanes_mod

LaunchesFor = Callable[[Arm, dict[str, Any]], Sequence[lanes_mod.LaneLaunch]]


def read_deployment(path: Path) -> dict[str, Any]:
    """The decision's deployment, checked against its model (results/deployment.py) before the
    sweep waits on the pod or stops its engine."""
    from tailpod.results.deployment import read_decision

    dep = read_decision(path)
    if dep["kind"] == "none":
        raise ConfigError(f"{path}: no deployment to measure (kind 'none')")
    return dep


def deploy_arm(base: EngineConfig, dep: dict[str, Any], method: str | None = None) -> Arm:
    """The deployment as an arm: its label says what it is, its config is the engine it serves
    (the spec lane's, for lanes)."""
    kind = dep["kind"]
    if kind == "lanes":
        spec_lane = dep["lanes"][0]
        k, m = int(spec_lane["k"]), spec_lane.get("method") or method
    else:
        k, m = int(dep.get("k") or 0), dep.get("method") or method
    spec = SpecArm(k=k, method=m if k else None,
                   draft_model=base.spec.draft_model if k else None)
    return Arm(label=f"{DEPLOY_PREFIX}{kind}", config=replace(base, spec=spec))


LANES_ARM = f"{DEPLOY_PREFIX}lanes"  # two lanes behind HAProxy, measured as one arm
DEAD_STATUSES = ("DOWN", "MAINT")  # HAProxy `show stat` server states that take no request


def dead_lane(before: dict[str, Any] | None, after: dict[str, Any], concurrency: int | None,
              admission_limit: int) -> str | None:
    """Why a deploy-lanes cell did not measure the two lanes decided, or None: a lane HAProxy
    calls DOWN, the spec lane taking none of the cell's requests, or (closed loop above the
    admission limit, where the overflow must go somewhere) the plain lane taking none."""
    for name, c in after.items():
        if str(c.get("status") or "").startswith(DEAD_STATUSES):
            return f"lane {name} is {c['status']} (HAProxy)"
    if before is None:
        return None

    def took(name: str) -> int | None:
        a, b = (after.get(name) or {}).get("stot"), (before.get(name) or {}).get("stot")
        return a - b if isinstance(a, int) and isinstance(b, int) else None

    if took("spec") == 0:
        return "lane spec took 0 requests"
    if concurrency is not None and concurrency > admission_limit and took("plain") == 0:
        return (f"lane plain took 0 requests at c={concurrency}, above the admission limit "
                f"{admission_limit}")
    return None


def lanes_arm_start(info: dict[str, Any], lanes_run_tag: str | None) -> ArmStart:
    """What the sweep records as the start of the lanes arm: the spec lane's startup with every
    lane's facts, the admission limit and the lanes' gate beside it, and HAProxy's argv in front
    of the spec lane's."""
    spec = info["lanes"]["spec"]
    startup = dict(spec.get("startup") or {})
    startup["lanes"] = {name: {"startup": row.get("startup"), "budget": row.get("budget"),
                               "port": row.get("port"), "startup_s": row.get("startup_s")}
                        for name, row in info["lanes"].items()}
    startup["admission_limit"] = info["admission_limit"]
    startup["lanes_gate"] = info.get("gate")
    if lanes_run_tag is not None:
        startup["lanes_run_tag"] = lanes_run_tag
    return ArmStart(startup=startup,
                    argv=["haproxy", "-f", info["haproxy"]["config"], "--",
                          *spec.get("argv", [])],
                    startup_s=sum(float(r.get("startup_s") or 0)
                                  for r in info["lanes"].values()))


def measure_lane_cells(inner: SweepHost, arm: Arm, cells: list[Cell], plan: SweepPlan,
                       run_id: str, counts: Callable[[], dict[str, Any] | None],
                       admission_limit: int) -> list[dict[str, Any]]:
    """The lanes' cells, one at a time with HAProxy's counters read before and after each: the
    counts land on the cell row, and a cell that did not measure both lanes is void."""
    rows: list[dict[str, Any]] = []
    for cell in cells:
        before = counts()
        got = inner.run_cells(arm, [cell], plan, run_id)
        after = counts()
        for row in got:
            if row.get("kind") != "cell" or after is None:
                continue
            row["lane_counts"] = {n: {k: c.get(k) for k in ("stot", "smax")}
                                  for n, c in after.items()}
            why = dead_lane(before, after, cell.concurrency if cell.rate is None else None,
                            admission_limit)
            if why is not None:
                # not the deployment that was decided: void, and decide does not compare it
                row["void"], row["void_reason"] = True, why
                row["flags"] = [*row.get("flags", []), "dead_lane", "void"]
        rows += got
    return rows


class DeployingHost:
    """A sweep host that serves `deploy-lanes` as two lanes behind HAProxy and every other arm
    as the wrapped host does. This one runs the lanes on this machine (`--provider local`);
    PodDeployingHost runs them on a rented pod through its agent."""

    def __init__(self, inner: Any, settings: Settings, ledger: Ledger, record: PodRecord,
                 deployment: dict[str, Any], launches_for: LaunchesFor,
                 stop_engine: Callable[[], None]) -> None:
        if record.provider != "local" and not isinstance(self, PodDeployingHost):
            raise ConfigError("this host runs the lanes on this machine: --provider local")
        self.inner: SweepHost = inner
        self.settings, self.ledger, self.record = settings, ledger, record
        self.deployment = deployment
        self.launches_for = launches_for
        self.stop_engine = stop_engine
        self.lanes_record: PodRecord | None = None
        self.measured_from = inner.measured_from

    # --- where the lanes run: these three differ between this machine and a pod -------------

    def _lanes_up(self, arm: Arm) -> dict[str, Any]:
        """Both lanes and the proxy up on the engine's port; their `extra.lanes`."""
        self.lanes_record = lanes_mod.up_lanes(
            self.settings, self.ledger, self.launches_for(arm, self.deployment),
            int(self.deployment["admission_limit"]), int(arm.config.port),
            engine_cfg=arm.config.to_json(), gate=lanes_mod.local_gate(self.settings))
        return dict(self.lanes_record.extra.lanes)

    def _lanes_down(self) -> None:
        from tailpod.pods.kinds import kind_for

        assert self.lanes_record is not None
        current = self.ledger.get(self.lanes_record.run_tag) or self.lanes_record
        kind_for("local").down(self.settings, self.ledger, current)  # final counts; proven
        self.lanes_record = None

    def lane_counts(self) -> dict[str, Any] | None:
        return lanes_mod.lane_counts(self.lanes_record) if self.lanes_record else None

    # --- the sweep host ---------------------------------------------------------------------

    lanes_info: dict[str, Any] | None = None

    def _stop_lanes(self) -> None:
        if self.lanes_info is None:
            return
        self._lanes_down()
        self.lanes_info = None

    def restart(self, arm: Arm) -> ArmStart:
        if arm.label != LANES_ARM:
            self._stop_lanes()
            return self.inner.restart(arm)
        if self.lanes_info is None:
            self.stop_engine()  # the pod's single engine gives its port to the proxy
            self.lanes_info = self._lanes_up(arm)
        return self._lanes_start(self.lanes_info)

    def _lanes_start(self, info: dict[str, Any]) -> ArmStart:
        return lanes_arm_start(info, self.lanes_record.run_tag if self.lanes_record else None)

    def bare_decode(self, arm: Arm, plan: SweepPlan) -> dict[str, Any]:
        if arm.label == LANES_ARM:
            return {"status": "not_measured", "reason": "a lanes deployment has no bare decode"}
        self._stop_lanes()
        return self.inner.bare_decode(arm, plan)

    def run_cells(self, arm: Arm, cells: list[Cell], plan: SweepPlan,
                  run_id: str) -> list[dict[str, Any]]:
        if arm.label != LANES_ARM:
            return self.inner.run_cells(arm, cells, plan, run_id)
        return measure_lane_cells(self.inner, arm, cells, plan, run_id, self.lane_counts,
                                  int(self.deployment["admission_limit"]))

    def gate_reference(self, arm: Arm, plan: SweepPlan) -> dict[str, Any]:
        return self.inner.gate_reference(arm, plan)

    def gate_compare(self, arm: Arm, reference: dict[str, Any], plan: SweepPlan) -> GateResult:
        return self.inner.gate_compare(arm, reference, plan)

    def close(self) -> None:
        try:
            self._stop_lanes()
        finally:
            self.inner.close()


class PodDeployingHost(DeployingHost):
    """`deploy-lanes` on a rented pod: the sweep host's own agent (its one SSH session) stops the
    pod's engine and starts both lanes, the gate and HAProxy there (pods/cloud_lanes.py). The
    pod's ledger record carries `extra.lanes` while they run, so `down` stops them first
    (terminating the pod would stop them anyway)."""

    def __init__(self, inner: Any, settings: Settings, ledger: Ledger, record: PodRecord,
                 deployment: dict[str, Any], launches_for: LaunchesFor,
                 stop_engine: Callable[[], None]) -> None:
        super().__init__(inner, settings, ledger, record, deployment, launches_for, stop_engine)

    def _lanes_up(self, arm: Arm) -> dict[str, Any]:
        from tailpod.pods import cloud_lanes

        started = cloud_lanes.start_lanes_on_pod(
            self.inner.pod, self.settings, arm.config,  # type: ignore[attr-defined]
            self.launches_for(arm, self.deployment), int(self.deployment["admission_limit"]))
        info: dict[str, Any] = started.record["lanes"]
        current = self.ledger.get(self.record.run_tag) or self.record
        self.record = self.ledger.update(self.record.run_tag, event="deploy-lanes-up",
                                         extra=dataclasses.replace(current.extra, lanes=info))
        return info

    def _lanes_down(self) -> None:
        from tailpod.pods import cloud_lanes

        current = self.ledger.get(self.record.run_tag) or self.record
        settled = cloud_lanes.settle_with(self.inner.pod,  # type: ignore[attr-defined]
                                          self.settings, self.ledger, current)
        self.record = self.ledger.update(self.record.run_tag, event="deploy-lanes-down",
                                         extra=dataclasses.replace(
                                             settled.extra, lanes={},
                                             deploy_lanes=settled.extra.lanes or None))

    def lane_counts(self) -> dict[str, Any] | None:
        from tailpod.pods import cloud_lanes

        if self.lanes_info is None:
            return None
        probe = PodRecord(run_tag=self.record.run_tag, provider=self.record.provider,
                          extra=PodExtra(lanes=self.lanes_info))
        return cloud_lanes.pod_counts(self.inner.pod, probe)  # type: ignore[attr-defined]


# --- a pod that `up --lanes` left serving -----------------------------------------------------


def served_lanes(record: PodRecord) -> dict[str, Any] | None:
    """The lanes `up --lanes` left serving on this pod (its `extra.lanes`, proxy and lanes both
    recorded), or None for a pod of one engine."""
    lanes = record.extra.lanes or {}
    return lanes if lanes.get("lanes") and lanes.get("haproxy") else None


def served_lanes_arm(base: EngineConfig, lanes: dict[str, Any]) -> Arm:
    """The lanes as the one arm a benchmark of the pod measures, labelled as a deployment
    (`deploy-lanes`: decide compares it, never crowns it), its config the spec lane's."""
    cfg = (lanes["lanes"].get("spec") or {}).get("engine_config")
    return Arm(label=LANES_ARM, config=EngineConfig.from_json(cfg) if cfg else base)


def check_served_lanes_sweep(run_tag: str, lanes: dict[str, Any], ks: Sequence[int],
                             deploy: bool, serve_tax: bool) -> None:
    """A benchmark of a lanes pod measures the lanes as they are: any other arm would first
    replace them. Refused (exit 2) before the SSH wait."""
    asked = [f"--spec-k {','.join(map(str, ks))}" if list(ks) != [0] else "",
             "--deploy" if deploy else "", "--serve-tax" if serve_tax else ""]
    if any(asked):
        names = ", ".join(lanes.get("lanes") or {})
        raise ConfigError(
            f"{run_tag} serves two lanes ({names}) behind HAProxy: benchmark measures them as "
            f"they are, as one arm {LANES_ARM}; {' '.join(a for a in asked if a)} would replace "
            "them", hint=f"tailpod benchmark {run_tag} (the lanes); other arms on a pod of one "
            "engine (tailpod up without --lanes)")


class ServedLanesHost:
    """The sweep host of a pod serving lanes: the one arm is the lanes as `up --lanes` left them
    (never stopped, restarted or replaced: closing the sweep leaves them serving), each cell
    measured with HAProxy's counts and void where a lane took nothing (`dead_lane`)."""

    def __init__(self, inner: Any, record: PodRecord, lanes: dict[str, Any]) -> None:
        self.inner: SweepHost = inner
        self.record, self.lanes = record, lanes
        self.measured_from = inner.measured_from

    def restart(self, arm: Arm) -> ArmStart:
        if arm.label != LANES_ARM:
            raise ConfigError(f"{self.record.run_tag} serves lanes; arm {arm.label} would "
                              "replace them")
        return lanes_arm_start(self.lanes, self.record.run_tag)

    def lane_counts(self) -> dict[str, Any] | None:
        if self.record.provider == "local":
            return lanes_mod.lane_counts(self.record)
        from tailpod.pods import cloud_lanes

        return cloud_lanes.pod_counts(self.inner.pod, self.record)  # type: ignore[attr-defined]

    def bare_decode(self, arm: Arm, plan: SweepPlan) -> dict[str, Any]:
        return {"status": "not_measured", "reason": "a lanes deployment has no bare decode"}

    def run_cells(self, arm: Arm, cells: list[Cell], plan: SweepPlan,
                  run_id: str) -> list[dict[str, Any]]:
        return measure_lane_cells(self.inner, arm, cells, plan, run_id, self.lane_counts,
                                  int(self.lanes["admission_limit"]))

    def gate_reference(self, arm: Arm, plan: SweepPlan) -> dict[str, Any]:
        return self.inner.gate_reference(arm, plan)

    def gate_compare(self, arm: Arm, reference: dict[str, Any], plan: SweepPlan) -> GateResult:
        return self.inner.gate_compare(arm, reference, plan)

    def close(self) -> None:
        self.inner.close()  # the lanes are the pod's: they keep serving


def deploying_host(settings: Any, ledger: Any, record: PodRecord, host: Any,
                   deployment: dict[str, Any]) -> Any:
    """The sweep host that serves `deploy-lanes` as two lanes behind HAProxy, on this machine or
    (pod_deploying_host) a rented pod."""
    from tailpod.pods.kinds import kind_for
    from tailpod.provision.local.provider import LocalProvider

    kind = kind_for(record.provider)
    if kind.deploy_lanes_where() == "pod":  # the kind refuses one whose lanes serve nowhere
        return pod_deploying_host(settings, ledger, record, host, deployment)

    def launches_for(arm: Any, dep: dict[str, Any]) -> Any:
        on_cpu = kind.serves_on_cpu(kind.engine_adapter(arm.config.engine))
        specs = [lanes_mod.LaneSpec("spec", arm.config.spec.k), lanes_mod.LaneSpec("plain", 0)]
        return lanes_mod.engine_lanes(settings, arm.config, specs, on_cpu)

    def stop_engine() -> None:
        if record.pod_id:
            LocalProvider(settings.home).terminate(record.pod_id)
        host.engine_stopped = True

    return DeployingHost(host, settings, ledger, record, deployment, launches_for, stop_engine)


def pod_deploying_host(settings: Any, ledger: Any, record: PodRecord, host: Any,
                       deployment: dict[str, Any]) -> Any:
    """`deploy-lanes` on a rented pod, through the sweep host's agent."""
    from tailpod.pods import cloud_lanes

    on_cpu = cloud_lanes.pod_on_cpu(record)

    def launches_for(arm: Any, dep: dict[str, Any]) -> Any:
        specs = [lanes_mod.LaneSpec("spec", arm.config.spec.k), lanes_mod.LaneSpec("plain", 0)]
        return cloud_lanes.pod_launches(
            settings, arm.config, specs,
            cpu_kv_gib=lanes_mod.DEFAULT_LANE_KV_GIB if on_cpu else None)

    def stop_engine() -> None:
        host.pod.engine_stop()
        host.engine_stopped = True

    return PodDeployingHost(host, settings, ledger, record, deployment, launches_for,
                            stop_engine)
