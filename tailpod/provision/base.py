"""The small interface every provider implements, plus explicit optional capabilities.

Shaped after SkyPilot's per-cloud `instance.py` function set and dstack's capability mixins: a
provider module keeps its API quirks to itself and hands back these normalised records.
"""

from __future__ import annotations

import abc
import enum
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, ClassVar

from tailpod.config import env_name
from tailpod.secrets import Secret

# The settings a pod that joins the tailnet needs before anything is rented: the API key mints
# the pod's own auth key, and the auth key is checked (and used where no API key can mint).
TAILNET_KEY_SETTINGS: tuple[str, ...] = ("tailscale_api_key", "tailscale_auth_key")


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
    # A network volume mounted at create (the only time a provider attaches one) and the data
    # centers the pod may be placed in (the volume's own, when one is mounted).
    volume_id: str | None = None
    volume_mount_path: str | None = None
    data_center_ids: list[str] = field(default_factory=list)
    # The image's ENTRYPOINT as its config states it (engines/image.py read_image_facts);
    # None: not read, so the start command must replace whatever entrypoint there is.
    image_entrypoint: tuple[str, ...] | None = None
    min_cuda: str | None = None  # "major.minor" the image is built for: hosts must reach it
    # The epoch second the pod must be gone by (config.ttl_deadline); None: no TTL. The ledger's
    # ttl_expires_at is this value, and a cloud pod's dead-man guard was built from it.
    ttl_at: float | None = None
    # A spot (interruptible) rental and its bid in $/h per machine; None: the provider's current
    # lowest winning bid for the offer (docs/providers.md "Spot").
    spot: bool = False
    bid: float | None = None


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
    # False: the check saw nothing that could tell either way (a meter read within its update
    # delay); it does not block the proof, which then rests on the other checks.
    informative: bool = True


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
    # The provider's facts, declared once on its class: which Settings fields hold its API key and
    # URL (None: a provider with no API), the other settings its pods need, and the console page
    # where a user sees and stops its pods by hand (None: no console, as for this machine).
    key_setting: ClassVar[str | None] = None
    url_setting: ClassVar[str | None] = None
    needs_settings: ClassVar[tuple[str, ...]] = ()
    console_url: ClassVar[str | None] = None
    # The environment variable the user sets for the key: the key setting's own (config.py),
    # filled in for each subclass, never spelled a second time.
    key_env: ClassVar[str | None] = None
    # Set by the lifecycle before create(): called with each provider id the moment an API answer
    # names it, so the ledger holds the id even if create() is interrupted right afterwards.
    on_created: Callable[[str], None] | None = None
    # How the provider rents a spot (interruptible) pod, as its vendor documents it; None: it
    # sells none tailpod can rent, and `no_spot` says why (`up --spot` exits 2 with it).
    spot_route: ClassVar[str | None] = None
    no_spot: ClassVar[str] = ("--spot rents an interruptible cloud pod, which this provider "
                               "does not sell (vast.ai does: --provider vastai)")

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if cls.key_setting:
            cls.key_env = env_name(cls.key_setting)

    @classmethod
    def required_key_envs(cls) -> tuple[str, ...]:
        """The variables that must be set before this provider can rent (check-requirements)."""
        fields = ([cls.key_setting] if cls.key_setting else []) + list(cls.needs_settings)
        return tuple(env_name(f) for f in fields)

    def manual_stop_steps(self, pod_id: str) -> list[str]:
        """How a user stops `pod_id` without tailpod (what `down` prints when it could not prove
        the pod gone); [] when the provider knows no way."""
        return [f"console: {self.console_url}"] if self.console_url else []

    @abc.abstractmethod
    def offers(self, gpu_preference: list[str], gpu_count: int, max_price: float | None) -> list[Offer]:
        """Prices and availability for each GPU in the preference list, in preference order."""

    def spot_prices(self, gpu_types: list[str], gpu_count: int, bid: float | None = None
                    ) -> dict[str, float]:
        """The lowest spot (interruptible) price per pod of each GPU type at `bid` (None: each
        offer's minimum bid), by the names `offers` gives; {} from a provider with no spot route
        (`gpus --spot`, `matrix --spot`)."""
        return {}

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
    def billing_evidence(self, run_tag: str, pod_id: str | None, price_per_hr: float | None,
                         *, known_active_tags: Iterable[str] = ()) -> BillingEvidence:
        """Checks, after terminate, that nothing for this run tag still bills.

        `known_active_tags` are other runs the ledger knows to be up: their pods and their share
        of an account-wide spend rate are not charged to this run. A provider whose proof is not
        account-wide may ignore them."""


# -- capabilities --------------------------------------------------------------------------------
# Each optional capability is a mixin with its contract in prose (dstack's `ComputeWith*` classes
# in dstackai/dstack src/dstack/_internal/core/backends/base/compute.py take the same shape). A
# provider declares one by inheriting it; callers ask `isinstance`, never `hasattr` or the
# signature, and `capabilities()` lists what a provider declares.


@dataclass(frozen=True)
class AccountFacts:
    """Read-only account facts, each None when the provider does not show it (USD, USD/h).

    RunPod refuses a deploy that would push the spend rate over `spend_limit`; `unavailable` says
    why the facts are None when the endpoint that has them is gone but the key still works."""

    balance: float | None
    spend_per_hr: float | None = None
    spend_limit: float | None = None
    unavailable: str | None = None


class SupportsAccount(abc.ABC):
    """The account behind the API key can be read (preflight: is the key good, can it pay)."""

    @abc.abstractmethod
    def account(self) -> AccountFacts:
        """One read-only call. A refused key raises AuthError; a missing fact is None."""


class SupportsSpendRate(abc.ABC):
    """The account's current spend rate can be read: proof that billing stopped, account-wide."""

    @abc.abstractmethod
    def account_spend(self) -> tuple[float | None, float | None]:
        """(spend USD/h, balance USD) now; None for a value the answer lacks."""


class SupportsContainerLog(abc.ABC):
    """The provider serves what the pod's container wrote (diagnosis of a failed boot)."""

    @abc.abstractmethod
    def container_log(self, pod_id: str, tail: int = 200) -> list[str] | None:
        """The last `tail` lines, or None when the provider has no log for the pod."""


class SupportsGpuNames(abc.ABC):
    """The provider can say which GPU names it sells: what a family name (`H100`) resolves
    against and a "did you mean" draws from (provision/gpu_names.py)."""

    @abc.abstractmethod
    def gpu_names(self, gpu_count: int = 1) -> dict[str, str]:
        """Each name `up --gpu` takes -> its other name ("" when none)."""


class SupportsHiddenOffers(abc.ABC):
    """The provider's offer query filters hosts (reliability, disk, CUDA), and it can count what
    those filters hide: `gpus` says so instead of listing less in silence."""

    @abc.abstractmethod
    def filters(self) -> dict[str, Any]:
        """The filters every offer query of this provider applies, by name."""

    @abc.abstractmethod
    def hidden(self, gpu_names: list[str], gpu_count: int) -> dict[str, dict[str, int]]:
        """Per GPU name: {"offers": hidden, <filter>: offers it hid, ...}; GPUs hiding none are
        left out."""


def filter_words(filters: dict[str, Any]) -> dict[str, str]:
    """Each filter of `SupportsHiddenOffers.filters()` as a user reads it ("CUDA >= 12.8")."""
    words = {}
    if filters.get("min_reliability") is not None:
        words["reliability"] = f"reliability >= {filters['min_reliability']:g}"
    if filters.get("disk_gb") is not None:
        words["disk"] = f"disk >= {filters['disk_gb']} GB"
    if filters.get("min_inet_down_mbps") is not None:
        words["download"] = f"download >= {filters['min_inet_down_mbps']:g} Mbps"
    if filters.get("min_cuda"):
        words["cuda"] = f"CUDA >= {filters['min_cuda']}"
    return words


def hidden_words(row: dict[str, int], filters: dict[str, Any]) -> str:
    """"2 offers hidden by CUDA >= 12.8 (2)" for one GPU's row of `hidden()`."""
    words = filter_words(filters)
    n = row.get("offers", 0)
    by = ", ".join(f"{words.get(k, k)} ({v})" for k, v in row.items() if k != "offers")
    return f"{n} offer{'s' if n != 1 else ''} hidden by {by}"


class SupportsPodScopedTermination(abc.ABC):
    """The provider injects a pod id and a pod-scoped key into the pod, with which the pod can
    terminate itself: the on-pod dead-man switch (tailpod/agent/bootstrap/deadman.py) and its
    stage-0 guard (tailpod/agent/bootstrap/guard.py)
    walk `TERMINATE_ROUTES[pod_termination]` there."""

    pod_termination: ClassVar[str]  # the provider's key in tailpod/agent/bootstrap/terminate.py


@dataclass(frozen=True)
class DataCenterInfo:
    """One data center: the volume tiers it offers and each GPU's stock there (id -> level)."""

    dc_id: str
    name: str
    volume_types: tuple[str, ...]
    gpus: dict[str, str] = field(default_factory=dict)
    gpu_names: dict[str, str] = field(default_factory=dict)  # id -> the catalog's short name
    # Where a volume's room and price are the place's own (a vast machine): the GB a new volume
    # may have there and its $/GB/month; None where the provider's class facts say it.
    volume_space_gb: float | None = None
    volume_gb_month: float | None = None


@dataclass
class VolumeInfo:
    """A storage volume as the provider reports it; `price_per_month` None when unknown."""

    volume_id: str
    name: str
    size_gb: int
    data_center: str
    volume_type: str | None
    price_per_month: float | None = None
    detail: dict[str, Any] = field(default_factory=dict)


class SupportsVolumes(abc.ABC):
    """Storage that outlives a pod, attached at pod create only, billed until deleted.

    The provider owns the facts: the size range, the tiers, the mount path, the price. A volume
    is named with its `tp-` name so the orphan sweep finds it without the ledger; `volume_delete`
    is idempotent (a volume already gone is success); `volume_get` answers None once it is gone.
    """

    volume_size_gb: ClassVar[tuple[int, int]]
    volume_types: ClassVar[tuple[str, ...]]
    volume_mount_path: ClassVar[str]
    # What a volume's place is called in messages: a vast volume lives on one machine.
    volume_place: ClassVar[str] = "data center"

    @abc.abstractmethod
    def data_centers(self) -> list[DataCenterInfo]:
        """Every data center with its volume tiers and GPU stock (one read)."""

    @abc.abstractmethod
    def volume_price_per_month(self, size_gb: int, volume_type: str | None) -> float | None:
        """USD per month the volume costs while it exists; None when the provider publishes none."""

    @abc.abstractmethod
    def volume_create(self, name: str, size_gb: int, data_center: str,
                      volume_type: str | None = None) -> VolumeInfo:
        """Create one volume. On any error the caller looks the name up (it may exist)."""

    @abc.abstractmethod
    def volume_list(self) -> list[VolumeInfo]:
        """Every volume of the account (tailpod's carry a `tp-` name)."""

    @abc.abstractmethod
    def volume_get(self, volume_id: str) -> VolumeInfo | None:
        """The volume, or None once the provider says it is gone."""

    @abc.abstractmethod
    def volume_delete(self, volume_id: str) -> None:
        """Delete it. Idempotent."""

    def volume_delete_by_hand(self, volume_id: str) -> str | None:
        """The API call that deletes `volume_id` (the route `volume_delete` takes), with the key
        as `$KEY_ENV`, never its value: what a failed delete prints. None when unknown."""
        return None


CAPABILITIES: dict[str, type] = {
    "account": SupportsAccount,
    "spend-rate": SupportsSpendRate,
    "container-log": SupportsContainerLog,
    "pod-scoped-termination": SupportsPodScopedTermination,
    "volumes": SupportsVolumes,
    "gpu-names": SupportsGpuNames,
    "hidden-offers": SupportsHiddenOffers,
}


def capabilities(provider: Provider | type[Provider]) -> list[str]:
    """What a provider (or its class) declares, by name, in CAPABILITIES order."""
    cls = provider if isinstance(provider, type) else type(provider)
    return [name for name, mixin in CAPABILITIES.items() if issubclass(cls, mixin)]
