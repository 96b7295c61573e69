"""The one pod protocol every caller uses: the CLI, the sweep's hosts, the card matrix and the demo.

A pod kind says how a pod is brought up, how its engine is switched to another arm, how tailpod
reaches it and how it goes down; callers ask `pods.kinds.kind_for(provider)` and never choose by
hand. Every kind keeps the ledger's rules: the pod is in the ledger before it exists and `down`
proves it gone (tailpod/provision/create.py, teardown.py).
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal, Protocol

from tailpod.agent_client.driver import ArmStart, PodAgent
from tailpod.config import Settings
from tailpod.engines.base import EngineAdapter, EngineConfig
from tailpod.errors import ConfigError, TailpodError
from tailpod.ledger import Ledger, PodRecord
from tailpod.pods.engine_log import EngineLog
from tailpod.pods.lanes import LaneSpec
from tailpod.provision.base import BillingEvidence, PodInfo
from tailpod.provision.teardown import LifecyclePolicy, down_remote

Progress = Callable[[float, str], None]


@dataclass(frozen=True)
class UpOptions:
    """What `up` may relax or keep; each kind reads what applies to it."""

    allow_unpinned: bool = False
    allow_nonephemeral: bool = False
    use_tailnet: bool = True
    keep_on_failure: bool = False
    volume: str | None = None  # a network volume to mount (cloud pods only)


@dataclass(frozen=True)
class LanesOptions:
    """`up --lanes`: the lanes (spec:K first, then plain), the spec lane's admission limit, and
    each lane's KV budget; `on_cpu`: the lanes serve on this machine's CPU."""

    specs: tuple[LaneSpec, ...]
    admission_limit: int
    on_cpu: bool = False
    kv_gib: float | None = None
    mem_fraction: float | None = None


def refuse_volume(options: UpOptions) -> None:
    """A network volume is a provider's: a machine tailpod does not rent mounts none."""
    if options.volume:
        raise ConfigError("--volume is for cloud pods", hint="--provider runpod")


@dataclass
class UpResult:
    record: PodRecord
    info: PodInfo | None = None  # the provider's view at RUNNING (None: no provider to ask)


class PodKind(Protocol):
    name: str
    # What stands when an arm switch leaves no engine (pods/arm_switch.py), in the error's words.
    no_engine_left: str

    def engine_adapter(self, engine: str) -> EngineAdapter:
        """The adapter for `engine`, or a ConfigError when this kind cannot serve it."""
        ...

    def serves_on_cpu(self, adapter: EngineAdapter) -> bool:
        """True when `adapter` would run on this machine's CPU (small context, eager mode)."""
        ...

    def refuse(self, options: UpOptions) -> None:
        """A ConfigError (exit 2) for an option this kind cannot honour, before the ledger, a
        connection or a rental."""
        ...

    def starts_engine_when_none_held(self, settings: Settings, ledger: Ledger) -> bool:
        """Whether a verb that needs an engine and names no pod (`eval kl --provider local`)
        may start one of this kind itself: only where the engine would be a child of this
        machine (nothing rents) and the ledger holds no active run of `settings.provider`."""
        ...

    def deploy_lanes_where(self) -> Literal["here", "pod"]:
        """Where `benchmark --deploy` serves a lanes deployment: "here" (this machine's lanes,
        pods/lanes.py) or "pod" (a rented pod's, through the sweep's agent: pods/cloud_lanes.py);
        a ConfigError (exit 2) for a kind that serves neither."""
        ...

    def up(self, settings: Settings, cfg: EngineConfig, ledger: Ledger, progress: Progress,
           options: UpOptions) -> UpResult:
        """Rent or claim the machine and start the engine with `cfg`; the ledger knows the pod
        throughout."""
        ...

    def up_lanes(self, settings: Settings, cfg: EngineConfig, ledger: Ledger, lanes: LanesOptions,
                 progress: Progress, options: UpOptions) -> UpResult:
        """Two engines behind HAProxy (pods/lanes.py), started as `up` starts one; a kind that
        cannot serve lanes refuses with a ConfigError before anything is recorded."""
        ...

    def relaunch(self, settings: Settings, record: PodRecord, cfg: EngineConfig, ledger: Ledger,
                 progress: Progress, agent: PodAgent | None = None) -> ArmStart:
        """Restart the pod's engine with another arm; its startup facts land in the ledger.
        `agent`: the caller's open session to a pod reached over SSH (the sweep keeps one for
        the whole run); None opens one for this call. A kind whose engine is here ignores it."""
        ...

    def heartbeat(self, settings: Settings, record: PodRecord) -> dict[str, Any] | None:
        """Beat the pod's dead-man switch and return its status; None when it has none."""
        ...

    def engine_healthy(self, settings: Settings, record: PodRecord) -> bool | None:
        """Whether the engine answers its health check; None when tailpod cannot tell from here
        (a cloud pod's engine listens on the pod's 127.0.0.1 only)."""
        ...

    def pod_session(self, settings: Settings, record: PodRecord, wait_s: float,
                    say: Callable[[str], None] | None = None) -> PodAgent | None:
        """The agent session a caller keeps for its whole work on the pod (the sweep's probes,
        heartbeats and relaunches go through it), opened within `wait_s`; None when the engine
        is a child of this machine and needs none (its agent runs here as a child process)."""
        ...

    def engine_log(self, settings: Settings, record: PodRecord,
                   say: Callable[[str], None]) -> EngineLog:
        """The pod's engine log where this kind's engine writes it (pods/engine_log.py); close
        it when done. `say` hears a connection's progress."""
        ...

    def settle(self, settings: Settings, ledger: Ledger, record: PodRecord) -> PodRecord:
        """The kind's step before any teardown: a lanes run's final counts, its lanes stopped
        (each proven, or left to the teardown with the reason); any other record as it is."""
        ...

    def down(self, settings: Settings, ledger: Ledger, record: PodRecord,
             policy: LifecyclePolicy | None = None) -> BillingEvidence:
        """`settle`, then stop or terminate and prove it (raises unless proven); `policy`: the
        teardown's waits and deadline (default: its own schedule)."""
        ...


def settle_then_teardown(kind: PodKind, settings: Settings, ledger: Ledger, record: PodRecord,
                         policy: LifecyclePolicy | None = None) -> BillingEvidence:
    """Every kind's `down`, so `down TAG`, `down --all`, `--expired` and every caller that ends a
    pod end it one way: the kind's settle, then the proven teardown (provision/teardown.py
    `down_remote`: terminate, wait until gone, the billing proof; raises unless proven).

    A settle that fails (a lane engine that would not stop) is kept in the ledger as
    `before_teardown_error` and the teardown runs all the same: it stops every process or pod of
    the tag, and its proof says whether it did."""
    try:
        record = kind.settle(settings, ledger, record)
    except TailpodError as exc:
        # a record the ledger lost cannot take the note; the teardown writes it back
        with contextlib.suppress(TailpodError, OSError):
            record = ledger.update(record.run_tag, event="before-teardown-failed",
                                   extra=dataclasses.replace(record.extra,
                                                             before_teardown_error=exc.message))
    return down_remote(settings, ledger, record, policy=policy)
