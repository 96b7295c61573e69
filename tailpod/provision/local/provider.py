"""Provider `local`: this machine is the pod.

The engine runs as a child process in its own process group, started by the same engine code the
pod agent runs on rented pods (tailpod/agent/bootstrap/engine.py). The provider's own record of
what it started (its "cloud-side truth") lives in `<home>/local/<run tag>/engine.json`, apart from
the ledger, so `status` can still tell orphans from ghosts the way it does for a real cloud.
"""

from __future__ import annotations

import socket
from collections.abc import Iterable
from pathlib import Path

from tailpod.agent.bootstrap import engine
from tailpod.agent.bootstrap.errors import EngineStartError
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

    def get(self, pod_id: str) -> PodInfo | None:
        run_tag = self.run_tag_of(pod_id)
        state = self.engine_state(run_tag)
        if state is None or not engine.is_running(state):
            return None
        return self._info(run_tag, state)

    def list_by_tag(self, run_tag: str | None = None) -> list[PodInfo]:
        if not self.root.is_dir():
            return []
        found = []
        for state_dir in sorted(self.root.iterdir()):
            if run_tag is not None and state_dir.name != run_tag:
                continue
            info = self.get(self.pod_id_for(state_dir.name))
            if info is not None:
                found.append(info)
        return found

    def terminate(self, pod_id: str) -> None:
        state = self.engine_state(self.run_tag_of(pod_id))
        if state is None:
            return
        if not engine.stop(state):
            raise ProviderError(
                f"process group {state['pgid']} or port {state['port']} is still alive",
                hint=f"kill -9 -{state['pgid']}",
            )

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
        checks.append(ProofCheck("no charges", True, "the local machine bills nothing"))
        return BillingEvidence(checks=checks, still_billing=still)

