"""Provider `local`: this machine is the pod.

The engine runs as a child process in its own process group, started by the same engine code the
pod agent runs on rented pods (tailpod/agent/bootstrap/engine.py). The provider's own record of
what it started (its "cloud-side truth") lives in `<home>/local/<run tag>/engine.json`, apart from
the ledger, so `status` can still tell orphans from ghosts the way it does for a real cloud.

A lanes run (pods/lanes.py) is one run tag with three processes: the proxy's record here, and
each lane engine's in `<home>/lanes/<run tag>/local/<run tag>-<lane>/engine.json`. Those lane
records are this provider's truth too: a run tag is listed while its proxy *or* any lane engine
lives, `terminate` stops the lane engines and then the proxy, and the billing proof checks every
one of them, so `down --all`, `down --expired` and the orphan sweep settle a lanes run whole
without the ledger's `extra.lanes`.
"""

from __future__ import annotations

import socket
from collections.abc import Iterable
from pathlib import Path

from tailpod.agent.bootstrap import engine
from tailpod.agent.bootstrap.start_error import EngineStartError
from tailpod.errors import ProviderError
from tailpod.provision.base import (
    BillingEvidence,
    Offer,
    PodInfo,
    PodSpec,
    PodState,
    ProofCheck,
    Provider,
)


def _machine_name() -> str:
    return f"local CPU ({socket.gethostname()})"


class LocalProvider(Provider):
    name = "local"

    def __init__(self, home: Path) -> None:
        self.root = Path(home) / "local"
        self.lanes_root = Path(home) / "lanes"

    def state_dir(self, run_tag: str) -> Path:
        return self.root / run_tag

    @staticmethod
    def pod_id_for(run_tag: str) -> str:
        return f"local:{run_tag}"

    @staticmethod
    def run_tag_of(pod_id: str) -> str:
        if not pod_id.startswith("local:"):
            raise ProviderError(f"{pod_id!r} is not a local pod id")
        return pod_id.split(":", 1)[1]

    def offers(
        self, gpu_preference: list[str], gpu_count: int, max_price: float | None
    ) -> list[Offer]:
        return [Offer(self.name, _machine_name(), 1, 0.0, available=True, offer_id="local")]

    def create(self, spec: PodSpec) -> PodInfo:
        port = spec.ports[0]
        plan = {
            "argv": spec.start_command,
            "env": {k: v for k, v in spec.env.items() if isinstance(v, str)},
            "host": "127.0.0.1",
            "port": port,
            "label": spec.env.get("TAILPOD_ARM_LABEL", "engine"),
        }
        try:
            state = engine.launch(plan, self.state_dir(spec.run_tag))
        except EngineStartError as exc:
            raise ProviderError(str(exc), hint="pick another --port or stop what uses it") from None
        return self._info(spec.run_tag, state)

    def _info(self, run_tag: str, state: dict) -> PodInfo:
        running = engine.is_running(state)
        return PodInfo(
            pod_id=self.pod_id_for(run_tag),
            run_tag=run_tag,
            state=PodState.RUNNING if running else PodState.TERMINATED,
            gpu_type=_machine_name(),
            gpu_count=0,
            price_per_hr=0.0,
            endpoint=f"http://{state['host']}:{state['port']}",
            detail={"pgid": state["pgid"], "log": state["log"], "started_at": state["started_at"]},
        )

    def engine_state(self, run_tag: str) -> dict | None:
        return engine.read_state(self.state_dir(run_tag))

    def lane_states(self, run_tag: str) -> dict[str, dict]:
        """{lane name: engine state} of a lanes run's engines (empty for any other run)."""
        root = self.lanes_root / run_tag / "local"
        if not root.is_dir():
            return {}
        out = {}
        for state_dir in sorted(root.iterdir()):
            state = engine.read_state(state_dir)
            if state is not None:
                lane = state_dir.name.removeprefix(f"{run_tag}-")
                out[lane] = state
        return out

    def get(self, pod_id: str) -> PodInfo | None:
        run_tag = self.run_tag_of(pod_id)
        state = self.engine_state(run_tag)
        if state is not None and engine.is_running(state):
            return self._info(run_tag, state)
        # The proxy is gone (or never started) but a lane engine may still run.
        for lane, lane_state in self.lane_states(run_tag).items():
            if engine.is_running(lane_state):
                info = self._info(run_tag, lane_state)
                info.detail["lane"] = lane
                return info
        return None

    def _tags(self) -> list[str]:
        tags: set[str] = set()
        for root in (self.root, self.lanes_root):
            if root.is_dir():
                tags.update(d.name for d in root.iterdir() if d.is_dir())
        return sorted(tags)

    def list_by_tag(self, run_tag: str | None = None) -> list[PodInfo]:
        found = []
        for tag in self._tags():
            if run_tag is not None and tag != run_tag:
                continue
            info = self.get(self.pod_id_for(tag))
            if info is not None:
                found.append(info)
        return found

    def terminate(self, pod_id: str) -> None:
        """Stop the run's lane engines (if any), then its own process group; each proven gone."""
        run_tag = self.run_tag_of(pod_id)
        alive = []
        for lane, lane_state in self.lane_states(run_tag).items():
            if not engine.stop(lane_state):
                alive.append(f"lane {lane}: process group {lane_state['pgid']} or port "
                             f"{lane_state['port']} (kill -9 -{lane_state['pgid']})")
        state = self.engine_state(run_tag)
        if state is not None and not engine.stop(state):
            alive.append(f"process group {state['pgid']} or port {state['port']} "
                         f"(kill -9 -{state['pgid']})")
        if alive:
            raise ProviderError("still alive: " + "; ".join(alive),
                                hint="kill the process groups named")

    def billing_evidence(
        self, run_tag: str, pod_id: str | None, price_per_hr: float | None,
        *, known_active_tags: Iterable[str] = (),
    ) -> BillingEvidence:
        # Proof here is per process group, never account-wide: other runs cannot blur it.
        state = self.engine_state(run_tag)
        checks = [
            ProofCheck("nothing tagged listed", not self.list_by_tag(run_tag), "local runner")
        ]
        still = []
        if state is not None:
            alive = engine.group_alive(int(state["pgid"]))
            port = engine.port_open(state["host"], int(state["port"]))
            checks.append(ProofCheck("process group gone", not alive, f"pgid {state['pgid']}"))
            checks.append(ProofCheck("port closed", not port, f"{state['host']}:{state['port']}"))
            if alive:
                still.append(f"process group {state['pgid']}: kill -9 -{state['pgid']}")
        for lane, lane_state in self.lane_states(run_tag).items():
            pgid, where = int(lane_state["pgid"]), f"{lane_state['host']}:{lane_state['port']}"
            alive = engine.group_alive(pgid)
            port = engine.port_open(lane_state["host"], int(lane_state["port"]))
            checks.append(ProofCheck(f"lane {lane} process group gone", not alive, f"pgid {pgid}"))
            checks.append(ProofCheck(f"lane {lane} port closed", not port, where))
            if alive:
                still.append(f"lane {lane} process group {pgid}: kill -9 -{pgid}")
        checks.append(ProofCheck("no charges", True, "the local machine bills nothing"))
        return BillingEvidence(checks=checks, still_billing=still)

