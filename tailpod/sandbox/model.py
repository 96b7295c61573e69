"""Records the sandbox cloud keeps: accounts, GPU catalogs and pods (shared by both emulators)."""

from __future__ import annotations

import secrets
import string
import time
from dataclasses import dataclass, field
from typing import Any

# Storage prices: RunPod's, USD per GB-month (runpod/docs pods/pricing.mdx and
# pods/storage/types.mdx @ a900806e), and a typical vast rate.
RUNPOD_DISK_RUNNING_GB_MONTH = 0.10
RUNPOD_VOLUME_STOPPED_GB_MONTH = 0.20
HOURS_PER_MONTH = 720.0


@dataclass
class Account:
    provider: str  # "runpod" | "vast"
    key: str
    name: str
    balance: float = 100.0
    restricted: bool = False  # a valid key that lacks access: the API answers 403
    # Set on the view of an account seen through a pod-scoped key (RunPod's injected
    # RUNPOD_API_KEY, vast's CONTAINER_API_KEY): only that pod may be read or terminated.
    scope_pod: str | None = None

    def public(self) -> dict[str, Any]:
        return {
            "provider": self.provider,
            "name": self.name,
            "key_hint": f"{self.key[:4]}…({len(self.key)} chars)",
            "balance_start": self.balance,
            "restricted": self.restricted,
        }


@dataclass
class RunPodGpuType:
    gpu_id: str
    name: str
    memory_gb: int
    secure_price: float
    community_price: float
    max_count: int = 8
    stock: str = "HIGH"  # NONE | LOW | MEDIUM | HIGH
    cuda: str = "12.8"


@dataclass
class VastOffer:
    offer_id: int
    gpu_name: str
    num_gpus: int
    dph_base: float
    storage_cost: float  # USD per GB-month
    reliability: float
    cuda_max_good: float
    inet_down: float
    inet_up: float
    disk_space: float
    geolocation: str
    gpu_ram: int  # MB
    machine_id: int
    host_id: int
    verified: bool = True
    rented: bool = False


def default_runpod_catalog() -> list[RunPodGpuType]:
    return [
        RunPodGpuType("NVIDIA GeForce RTX 4090", "RTX 4090", 24, 0.69, 0.34),
        RunPodGpuType("NVIDIA A40", "A40", 48, 0.40, 0.35),
        RunPodGpuType("NVIDIA RTX A6000", "RTX A6000", 48, 0.49, 0.33),
        RunPodGpuType("NVIDIA L40S", "L40S", 48, 0.86, 0.79),
        RunPodGpuType("NVIDIA A100 80GB PCIe", "A100 PCIe", 80, 1.64, 1.19),
        RunPodGpuType("NVIDIA H100 80GB HBM3", "H100 SXM", 80, 2.99, 2.69),
        RunPodGpuType("NVIDIA H200", "H200 SXM", 141, 3.99, 3.59),
    ]


def default_vast_offers() -> list[VastOffer]:
    rows = [
        ("RTX 4090", 1, 0.35, 0.15, 0.995, 12.8, 24564, "US"),
        ("RTX 4090", 1, 0.42, 0.10, 0.991, 12.4, 24564, "SE"),
        ("RTX 4090", 2, 0.78, 0.15, 0.990, 12.8, 24564, "US"),
        ("RTX 3090", 1, 0.18, 0.08, 0.985, 12.2, 24576, "PL"),
        ("RTX 3090", 1, 0.21, 0.10, 0.970, 12.2, 24576, "CA"),
        ("A100 SXM4", 1, 1.05, 0.20, 0.998, 12.8, 81920, "US"),
        ("H100 SXM", 1, 2.10, 0.25, 0.999, 12.8, 81559, "US"),
        ("H100 SXM", 1, 2.35, 0.20, 0.996, 12.6, 81559, "NL"),
        ("L40S", 1, 0.70, 0.15, 0.993, 12.8, 46068, "DE"),
    ]
    offers = []
    for i, (name, n, dph, storage, rel, cuda, ram, geo) in enumerate(rows):
        offers.append(
            VastOffer(
                offer_id=9100001 + i * 17,
                gpu_name=name,
                num_gpus=n,
                dph_base=dph,
                storage_cost=storage,
                reliability=rel,
                cuda_max_good=cuda,
                inet_down=800.0 + 50 * i,
                inet_up=500.0 + 20 * i,
                disk_space=400.0,
                geolocation=f"Somewhere, {geo}",
                gpu_ram=ram,
                machine_id=41000 + i,
                host_id=7100 + i,
            )
        )
    return offers


def new_runpod_id() -> str:
    alphabet = string.ascii_lowercase + string.digits
    return "".join(secrets.choice(alphabet) for _ in range(14))


@dataclass
class SandboxPod:
    provider: str
    pod_id: str
    name: str  # RunPod pod name / vast label: tailpod puts the run tag here
    account: str  # account name (never the key)
    gpu_type: str
    gpu_count: int
    compute_rate: float  # USD/h for the GPUs while running
    disk_gb: int  # RunPod container disk / vast disk
    image: str
    command: list[str] | str | None
    env: dict[str, str]
    ports: list[str]  # "22/tcp", "8000/http"
    cloud: str = "SECURE"
    data_center: str = "SBX-LOCAL-1"
    cuda: str = "12.8"
    offer_id: int | None = None
    volume_gb: int = 0  # RunPod persistent volume: the part that still bills while stopped
    storage_cost_gb_month: float = RUNPOD_DISK_RUNNING_GB_MONTH
    status: str = "running"  # running | stopped | terminated
    created_at: float = field(default_factory=time.time)
    ready_at: float = field(default_factory=time.time)
    started_at: float | None = None
    terminated_at: float | None = None
    visible_until: float | None = None  # stale_list: listed after terminate until then
    port_map: dict[int, int] = field(default_factory=dict)
    pid: int | None = None
    container_error: str | None = None
    meta: dict[str, Any] = field(default_factory=dict)

    @property
    def key(self) -> str:
        return f"{self.provider}:{self.pod_id}"

    def tcp_ports(self) -> list[int]:
        out = []
        for spec in self.ports:
            port, _, proto = spec.partition("/")
            if proto in ("tcp", "") and port.isdigit():
                out.append(int(port))
        return out

    def is_ready(self, now: float) -> bool:
        return self.status == "running" and now >= self.ready_at

    def running_rate(self) -> float:
        return self.compute_rate + self.disk_rate()

    def disk_rate(self) -> float:
        return (self.disk_gb + self.volume_gb) * self.storage_cost_gb_month / HOURS_PER_MONTH

    def stopped_rate(self) -> float:
        # RunPod wipes the container disk on stop and keeps billing the volume at a higher rate;
        # vast keeps billing the whole disk (runpod/docs pods/pricing.mdx @ a900806e; vast-ai/docs
        # guides/instances/pricing.mdx @ c6246226: storage bills from creation until destroy).
        if self.provider == "runpod":
            return self.volume_gb * RUNPOD_VOLUME_STOPPED_GB_MONTH / HOURS_PER_MONTH
        return self.disk_rate()
