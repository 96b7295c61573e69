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
import json
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
    try:
        dec = json.loads(Path(path).read_text())
    except (OSError, ValueError) as exc:
        raise ConfigError(f"cannot read the decision {path}: {exc}") from None
    dep = dec.get("deployment")
    if not isinstance(dep, dict) or dep.get("kind") not in ("static", "lanes", "mixed"):
        raise ConfigError(f"{path}: no deployment to measure (kind "
                          f"{(dep or {}).get('kind')!r})")
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
        if arm.label != "deploy-lanes":
            self._stop_lanes()
            return self.inner.restart(arm)
        if self.lanes_info is None:
            self.stop_engine()  # the pod's single engine gives its port to the proxy
            self.lanes_info = self._lanes_up(arm)
        return self._lanes_start(self.lanes_info)

    def _lanes_start(self, info: dict[str, Any]) -> ArmStart:
        spec = info["lanes"]["spec"]
        startup = dict(spec.get("startup") or {})
        startup["lanes"] = {name: {"startup": row.get("startup"), "budget": row.get("budget"),
                                   "port": row.get("port"), "startup_s": row.get("startup_s")}
                            for name, row in info["lanes"].items()}
        startup["admission_limit"] = info["admission_limit"]
        startup["lanes_gate"] = info.get("gate")
        if self.lanes_record is not None:
            startup["lanes_run_tag"] = self.lanes_record.run_tag
        return ArmStart(startup=startup,
                        argv=["haproxy", "-f", info["haproxy"]["config"], "--",
                              *spec.get("argv", [])],
                        startup_s=sum(float(r.get("startup_s") or 0)
                                      for r in info["lanes"].values()))

    def bare_decode(self, arm: Arm, plan: SweepPlan) -> dict[str, Any]:
        if arm.label == "deploy-lanes":
            return {"status": "not_measured", "reason": "a lanes deployment has no bare decode"}
        self._stop_lanes()
        return self.inner.bare_decode(arm, plan)

    def run_cells(self, arm: Arm, cells: list[Cell], plan: SweepPlan,
                  run_id: str) -> list[dict[str, Any]]:
        if arm.label != "deploy-lanes":
            return self.inner.run_cells(arm, cells, plan, run_id)
        rows: list[dict[str, Any]] = []
        for cell in cells:  # HAProxy's counters before and after each cell: what each lane took
            before = self.lane_counts()
            got = self.inner.run_cells(arm, [cell], plan, run_id)
            after = self.lane_counts()
            for row in got:
                if row.get("kind") != "cell" or after is None:
                    continue
                row["lane_counts"] = {n: {k: c.get(k) for k in ("stot", "smax")}
                                      for n, c in after.items()}
                why = dead_lane(before, after, cell.concurrency if cell.rate is None else None,
                                int(self.deployment["admission_limit"]))
                if why is not None:
                    # not the deployment that was decided: void, and decide does not compare it
                    row["void"], row["void_reason"] = True, why
                    row["flags"] = [*row.get("flags", []), "dead_lane", "void"]
            rows += got
        return rows

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
