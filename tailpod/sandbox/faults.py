"""Fault injection for the sandbox cloud: each fault is a small rule the emulators consult.

A fault names a provider ("runpod", "vast" or "*"), an operation ("create", "terminate", "list",
"get", "search", "catalog", "user", "graphql" or "any") and how many times it fires (None = until
cleared). The kinds mirror what users hit on the real services (docs/sandbox.md lists them).
"""

from __future__ import annotations

import threading
from dataclasses import asdict, dataclass, field
from typing import Any

FAULT_KINDS = {
    # create on this GPU type answers the provider's capacity error
    "capacity": "create for `gpu` fails with the provider's no-capacity error",
    # 429 with Retry-After
    "rate_limit": "the operation answers 429 with Retry-After `retry_after` seconds",
    # 5xx without side effects
    "server_error": "the operation answers `status` (5xx) without doing anything",
    # the pod is created (and bills) but the API answers an error
    "error_after_create": "create makes the pod, then answers an error (vast: `carry_id` keeps "
    "new_contract in the error body)",
    # the create answer is delayed after the pod exists (client-side timeout)
    "slow_create": "create makes the pod, then waits `seconds` before answering",
    # terminate answers 5xx and leaves the pod billing
    "terminate_fail": "terminate answers `status` (5xx) and the pod keeps billing",
    # terminate answers success but nothing happens: the case that only a proof catches
    "terminate_noop": "terminate answers success but the pod keeps running and billing",
    # pods need `seconds` before their runtime / SSH endpoint appear
    "slow_start": "new pods take `seconds` before the container is up",
    # destroyed pods keep showing in list/get for `seconds` (eventual consistency)
    "stale_list": "terminated pods stay visible in listings for `seconds`",
    # the same lag for a deleted network volume: only the listing lags, the direct look-up
    # answers 404 at once (what a proof that reads one of the two would miss)
    "stale_volume_list": "a deleted RunPod network volume stays in the volume listing for "
    "`seconds` while its direct look-up already answers 404",
    "stale_volume_get": "a deleted RunPod network volume still answers its direct look-up "
    "for `seconds` while the listing no longer carries it",
    # a third-party observation: RunPod answering RUNNING right after create (docs/providers.md)
    "early_running": "a new RunPod pod reports RUNNING at once, before its container is up",
    # the proof must read the money: a pod the API no longer shows that still bills
    "terminate_unlisted": "terminate answers success and the pod leaves every listing and "
    "lookup, but keeps billing",
    # lets a test act (kill the client) while the provider holds an unanswered create
    # the price the provider states for a pod above the offer it was rented from
    "price_above_offer": "create places the pod at `factor` times the offer's price (it bills "
    "and states that price from the start)",
    "price_rises_running": "the pod states and bills `factor` times its offer's price once its "
    "container is up (the create's read-back still states the offer's)",
    # an API that quotes the credential it refused: what the client must redact, not trust
    "echo_key": "an auth failure (401/403) quotes the key it was presented in its error body",
    # vast-ai/docs cli/reference/show-instance.mdx:24-36: states a boot can fall into
    "vast_state": "a new vast instance reports actual_status `state` (unknown, offline, frozen, "
    "exited) once its container would be up, and stays there (frozen still bills the GPU)",
    # docker logs carries whatever the container printed: an entrypoint that runs `env` (or a
    # shell under `set -x`) prints the keys the provider injected and those the pod was given
    "log_env": "the container log opens with the pod's environment, one NAME=value a line, "
    "the provider's pod-scoped key and every secret passed in the pod's env included",
    # vast-ai/docs guides/reference/faq/rental-types.mdx @ c6246226: a lost bid stops the instance
    "outbid": "a vast bid (spot) instance whose container has been up `seconds` (of `gpu`, if "
    "named) is outbid on the next vast request: stopped, its processes killed, its disk billing",
    # vast-ai/docs guides/instances/choosing/instance-types.mdx:77 @ c6246226: "Resume
    # automatically when priority returns"
    "bid_returns": "a vast bid instance outbid at least `seconds` ago wins its bid back on the next "
    "vast request: running again, its start command (vast's onstart) run again",
    "hold_create": "create waits before doing anything until the test releases it (at most "
    "`seconds`, default 60), then goes on",
}

HOLD_DEFAULT_S = 60.0

OPERATIONS = {"create", "terminate", "list", "get", "search", "catalog", "user", "graphql", "any",
              # RunPod network volumes and the data-center catalog
              "volume_create", "volume_list", "volume_get", "volume_delete", "datacenters"}


@dataclass
class Fault:
    kind: str
    provider: str = "*"
    op: str = "any"
    times: int | None = None
    gpu: str | None = None
    status: int = 500
    retry_after: float = 1.0
    seconds: float = 0.0
    carry_id: bool = True
    factor: float = 2.0
    state: str = ""
    fired: int = field(default=0)

    def __post_init__(self) -> None:
        if self.kind not in FAULT_KINDS:
            raise ValueError(f"unknown fault kind {self.kind!r}; known: {sorted(FAULT_KINDS)}")
        if self.op not in OPERATIONS:
            raise ValueError(f"unknown operation {self.op!r}; known: {sorted(OPERATIONS)}")
        if self.provider not in ("runpod", "vast", "*"):
            raise ValueError("provider must be runpod, vast or *")

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Fault:
        allowed = {
            "kind", "provider", "op", "times", "gpu", "status", "retry_after", "seconds", "carry_id",
            "factor", "state",
        }
        unknown = set(data) - allowed
        if unknown:
            raise ValueError(f"unknown fault fields: {sorted(unknown)}")
        return cls(**data)

    def matches(self, kind: str, provider: str, op: str, gpu: str | None) -> bool:
        if self.kind != kind or self.provider not in ("*", provider):
            return False
        if self.op != "any" and self.op != op:
            return False
        if self.gpu is not None and (gpu is None or self.gpu.lower() != gpu.lower()):
            return False
        return self.times is None or self.fired < self.times


class FaultPlan:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._faults: list[Fault] = []
        # hold_create: id(fault) -> (a create arrived, the test released it)
        self._holds: dict[int, tuple[threading.Event, threading.Event]] = {}

    def add(self, fault: Fault | dict[str, Any]) -> Fault:
        if isinstance(fault, dict):
            fault = Fault.from_json(fault)
        with self._lock:
            self._faults.append(fault)
        return fault

    def clear(self) -> None:
        with self._lock:
            self._faults.clear()
            holds = list(self._holds.values())
        for _arrived, release in holds:
            release.set()  # a cleared plan holds nothing back

    def _hold_events(self, fault: Fault) -> tuple[threading.Event, threading.Event]:
        with self._lock:
            return self._holds.setdefault(id(fault), (threading.Event(), threading.Event()))

    def hold(self, fault: Fault) -> None:
        """Block the calling request (hold_create) until `release`, at most `fault.seconds`."""
        arrived, release = self._hold_events(fault)
        arrived.set()
        release.wait(fault.seconds or HOLD_DEFAULT_S)

    def wait_held(self, fault: Fault, timeout: float) -> bool:
        """True once a request is being held by this fault."""
        return self._hold_events(fault)[0].wait(timeout)

    def release(self, fault: Fault) -> None:
        self._hold_events(fault)[1].set()

    def list(self) -> list[dict[str, Any]]:
        with self._lock:
            return [asdict(f) for f in self._faults]

    def take(self, kind: str, provider: str, op: str, gpu: str | None = None) -> Fault | None:
        """The first live fault of this kind for the call, counted as fired."""
        with self._lock:
            for fault in self._faults:
                if fault.matches(kind, provider, op, gpu):
                    fault.fired += 1
                    return fault
        return None

    def peek(self, kind: str, provider: str, op: str = "any") -> Fault | None:
        """A live fault of this kind, not counted (standing conditions like slow_start)."""
        with self._lock:
            for fault in self._faults:
                if fault.matches(kind, provider, op, None):
                    return fault
        return None
