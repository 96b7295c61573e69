"""The small interface every provider implements, plus explicit optional capabilities.

Shaped after SkyPilot's per-cloud `instance.py` function set and dstack's capability mixins: a
provider module keeps its API quirks to itself and hands back these normalised records.
"""

from __future__ import annotations

import abc
import enum
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, ClassVar

from tailpod.secrets import Secret


class PodState(str, enum.Enum):
    PENDING = "pending"  # accepted, not yet running (provisioning, pulling, starting)
    RUNNING = "running"
    STOPPED = "stopped"  # GPU released, disk still bills
    TERMINATED = "terminated"
    ERROR = "error"
    UNKNOWN = "unknown"  # the provider said something we do not map; never read it as "gone"


@dataclass(frozen=True)
class Offer:
    provider: str
    gpu_type: str
    gpu_count: int
    price_per_hr: float | None
    available: bool
    offer_id: str | None = None
    gpu_memory_gb: float | None = None
    detail: dict[str, Any] = field(default_factory=dict)


@dataclass
class PodSpec:
    run_tag: str
    gpu_preference: list[str]
    image: str
    start_command: list[str]
    gpu_count: int = 1
    max_price: float | None = None
    env: dict[str, str | Secret] = field(default_factory=dict)
    disk_gb: int = 80
    ports: list[int] = field(default_factory=lambda: [22])
    ssh_public_key: str | None = None


@dataclass
class PodInfo:
    pod_id: str
    run_tag: str | None
    state: PodState
    gpu_type: str | None = None
    gpu_count: int | None = None
    price_per_hr: float | None = None
    ssh_host: str | None = None
    ssh_port: int | None = None
    endpoint: str | None = None
    detail: dict[str, Any] = field(default_factory=dict)


@dataclass
class ProofCheck:
    name: str
    passed: bool
    detail: str


@dataclass
class BillingEvidence:
    """What the provider says about billing for a run tag after terminate."""

    checks: list[ProofCheck]
    still_billing: list[str] = field(default_factory=list)  # human lines: what, and how to kill it

    @property
    def proven(self) -> bool:
        return all(c.passed for c in self.checks) and not self.still_billing


class Provider(abc.ABC):
    name: ClassVar[str]
    # Resources the provider tags with the run tag are matched by this prefix for `down --all`.
    tag_prefix: ClassVar[str] = "tp-"
    # Set by the lifecycle before create(): called with each provider id the moment an API answer
    # names it, so the ledger holds the id even if create() is interrupted right afterwards.
    on_created: Callable[[str], None] | None = None

    @abc.abstractmethod
    def offers(self, gpu_preference: list[str], gpu_count: int, max_price: float | None) -> list[Offer]:
        """Prices and availability for each GPU in the preference list, in preference order."""

    @abc.abstractmethod
    def create(self, spec: PodSpec) -> PodInfo:
        """Create one pod. On any error the caller looks the run tag up and destroys strays."""

    @abc.abstractmethod
    def get(self, pod_id: str) -> PodInfo | None:
        """The pod, or None once the provider says it is gone."""

    @abc.abstractmethod
    def list_by_tag(self, run_tag: str | None = None) -> list[PodInfo]:
        """Pods carrying `run_tag`; with None, every pod carrying any tailpod tag."""

    @abc.abstractmethod
    def terminate(self, pod_id: str) -> None:
        """Destroy the pod. Idempotent: a pod that is already gone is success."""

    @abc.abstractmethod
    def billing_evidence(self, run_tag: str, pod_id: str | None, price_per_hr: float | None) -> BillingEvidence:
        """Checks, after terminate, that nothing for this run tag still bills."""


class SupportsStop(abc.ABC):
    """Stop keeps the disk (which still bills) and releases the GPU; resume may land on no GPU."""

    @abc.abstractmethod
    def stop(self, pod_id: str) -> None: ...

    @abc.abstractmethod
    def resume(self, pod_id: str) -> None: ...


class SupportsInterruptible(abc.ABC):
    """Spot/bid capacity. A provider without it refuses `--interruptible` up front."""

    @abc.abstractmethod
    def create_interruptible(self, spec: PodSpec, bid_per_gpu: float) -> PodInfo: ...


def capabilities(provider: Provider) -> list[str]:
    caps = []
    if isinstance(provider, SupportsStop):
        caps.append("stop")
    if isinstance(provider, SupportsInterruptible):
        caps.append("interruptible")
    return caps
