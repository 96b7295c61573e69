"""The pieces every preflight check shares: statuses, outcomes, the planned run and the context.

A check is a function `Context -> Outcome`. What several checks need (the provider adapter, the
account, the offers, the checkpoint report) is a *fact*: computed once, on first demand, by
whichever check thread asks first, and shared. The check that owns a fact reports its failure;
every other check that needs it is skipped, naming the owner, so one wrong key is one failure.
"""

from __future__ import annotations

import enum
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tailpod.config import Settings
from tailpod.engines.base import EngineConfig
from tailpod.errors import TailpodError
from tailpod.secrets import redact


class Status(str, enum.Enum):
    PASS = "pass"
    WARN = "warn"
    FAIL = "fail"
    SKIP = "skip"


_SEVERITY = {Status.SKIP: 0, Status.PASS: 1, Status.WARN: 2, Status.FAIL: 3}


class CheckSkipped(Exception):
    """A check cannot run because an input it needs is missing; the reason says which."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


@dataclass(frozen=True)
class Outcome:
    """What a check function returns. `data` is JSON-safe and never holds a secret."""

    status: Status
    detail: str
    fix: str = ""
    data: dict[str, Any] = field(default_factory=dict)


@dataclass
class Findings:
    """Several observations of one check; the worst one sets the check's status."""

    items: list[tuple[Status, str, str]] = field(default_factory=list)

    def ok(self, text: str) -> None:
        self.items.append((Status.PASS, text, ""))

    def warn(self, text: str, fix: str = "") -> None:
        self.items.append((Status.WARN, text, fix))

    def fail(self, text: str, fix: str = "") -> None:
        self.items.append((Status.FAIL, text, fix))

    @property
    def status(self) -> Status:
        if not self.items:
            return Status.PASS
        return max((s for s, _, _ in self.items), key=_SEVERITY.__getitem__)

    def outcome(self, data: dict[str, Any] | None = None) -> Outcome:
        status = self.status
        # Problems first: a table cell shows its start, and the start should be what is wrong.
        ordered = sorted(self.items, key=lambda item: -_SEVERITY[item[0]])
        detail = "; ".join(text for _, text, _ in ordered if text)
        fixes: list[str] = []
        for item_status, _, fix in ordered:
            if fix and item_status in (Status.WARN, Status.FAIL) and fix not in fixes:
                fixes.append(fix)
        return Outcome(status, detail, "; ".join(fixes), data or {})


@dataclass(frozen=True)
class Plan:
    """The run being checked, beyond what Settings holds (provider, model, GPUs, image, cap)."""

    hours: float | None = None  # expected duration; None: the TTL (the longest a pod may live)
    context_length: int = 4096  # tokens one request may use: sizes the minimum KV budget
    allow_unpinned: bool = False
    allow_nonephemeral: bool = False
    use_tailnet: bool = True  # False (--no-tailnet): the pod joins no tailnet; nothing to check
    env_file: Path | None = None  # the .env the settings came from; None: TAILPOD_ENV_FILE/.env
    # The engine arms the run will start (`up`'s, `check-requirements --spec-k`): each is checked
    # against the checkpoint and engine (engines/checkpoint.py arm_refusal). Empty: none said, so
    # a checkpoint without an MTP head is a warning, not a failure.
    arms: tuple[EngineConfig, ...] = ()

    def duration_h(self, settings: Settings) -> float:
        return self.hours if self.hours is not None else settings.ttl_hours


@dataclass(frozen=True)
class Fact:
    """A shared input: `produce(ctx)` runs at most once per preflight run."""

    name: str
    what: str  # "the provider account" (for skip reasons)
    owner: str  # the check that reports this fact's failure
    produce: Callable[[Context], Any]


class Context:
    """What a check sees: settings, the plan, provider options and the shared facts."""

    def __init__(
        self,
        settings: Settings,
        plan: Plan,
        facts: Mapping[str, Fact],
        *,
        provider_options: Mapping[str, Any] | None = None,
        settings_problems: list[TailpodError] | None = None,
    ) -> None:
        self.settings = settings
        self.plan = plan
        self.provider_options = dict(provider_options or {})
        self.settings_problems = list(settings_problems or [])
        self._facts = dict(facts)
        self._locks = {name: threading.Lock() for name in self._facts}
        self._values: dict[str, Any] = {}
        self._errors: dict[str, BaseException] = {}

    def fact(self, name: str) -> Any:
        """The fact's value; its producer's exception (re-raised) when it could not be had."""
        spec = self._facts[name]
        with self._locks[name]:
            if name not in self._values and name not in self._errors:
                try:
                    self._values[name] = spec.produce(self)
                except Exception as exc:  # kept, so every asker sees the same failure
                    self._errors[name] = exc
        if name in self._errors:
            raise self._errors[name]
        return self._values[name]

    def need(self, name: str) -> Any:
        """The fact's value, or CheckSkipped naming the check that reports why it is missing."""
        spec = self._facts[name]
        try:
            return self.fact(name)
        except CheckSkipped:
            raise  # the root cause, not the chain of facts that led to it
        except Exception:
            # The owner's row carries the error itself; repeating it here would only add noise.
            raise CheckSkipped(f"needs {spec.what}, which failed (see {spec.owner})") from None

    def optional(self, name: str) -> tuple[Any, str | None]:
        """(value, None) or (None, why it is missing) without raising."""
        try:
            return self.need(name), None
        except CheckSkipped as exc:
            return None, exc.reason


def short(exc: BaseException, limit: int = 160) -> str:
    """One redacted line for an exception (TailpodError: its message without the hint)."""
    text = exc.message if isinstance(exc, TailpodError) else str(exc) or exc.__class__.__name__
    text = redact(" ".join(text.split()))
    return text if len(text) <= limit else text[: limit - 1] + "…"


@dataclass(frozen=True)
class Check:
    name: str
    title: str
    run: Callable[[Context], Outcome]
    timeout_s: float = 20.0  # from the start of the run: checks that wait on facts get longer


def dollars(value: float | None) -> str:
    return "unknown" if value is None else f"${value:,.2f}"
