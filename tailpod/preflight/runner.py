"""Run every preflight check at once, each in its own thread with its own deadline.

Threads are daemons: a check stuck on an unresponsive API is reported as timed out and abandoned,
never waited for. Every text that leaves a check passes through `redact`, so no key reaches the
table or the JSON.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from tailpod.config import Settings
from tailpod.errors import TailpodError
from tailpod.preflight import (
    cloud,
    envfile,
    first_contact,
    fit,
    image,
    model,
    network,
    ssh,
    tailnet,
    tools,
)
from tailpod.preflight.base import (
    Check,
    CheckSkipped,
    Context,
    Fact,
    Outcome,
    Plan,
    Status,
    short,
)
from tailpod.provision.apiclient import TransientApiError
from tailpod.secrets import redact

CHECKS: tuple[Check, ...] = (
    Check("env", ".env and settings", envfile.check_settings, timeout_s=5.0),
    Check("network", "network (hosts the run calls)", network.check_network, timeout_s=6.0),
    Check("provider", "provider key and account", cloud.check_provider, timeout_s=25.0),
    Check("hf", "Hugging Face access", model.check_hf, timeout_s=25.0),
    Check("checkpoint", "checkpoint (MTP, quantization)", model.check_checkpoint, timeout_s=40.0),
    Check("fit", "weights + KV fit the GPU", fit.check_fit, timeout_s=45.0),
    Check("image", "image pinned to a digest", image.check_image, timeout_s=25.0),
    Check("tailscale", "Tailscale token and auth key", tailnet.check_tailnet, timeout_s=20.0),
    Check("ssh", "SSH key", ssh.check_ssh, timeout_s=10.0),
    Check("offers", "GPU capacity within the cap", cloud.check_offers, timeout_s=30.0),
    Check("cost", "cost of the planned run", cloud.check_cost, timeout_s=30.0),
    Check("tools", "local tools", tools.check_tools, timeout_s=20.0),
    Check("first-contact", "RunPod first contact (start form, pod key)",
          first_contact.check_first_contact, timeout_s=5.0),
)
FACTS: dict[str, Fact] = {f.name: f for f in (*cloud.FACTS, *model.FACTS)}

# The dependency graph: check -> the host roles (preflight/network.py) it calls. The network
# check runs first; a check whose host does not answer is skipped with that reason, not run
# into its own time-out. (Checks that share a fact already skip when its owner fails:
# base.Context.need.)
NEEDS: dict[str, tuple[str, ...]] = {
    "provider": ("provider",),
    "offers": ("provider",),
    "cost": ("provider",),
    "first-contact": ("provider",),
    "hf": ("hf",),
    "checkpoint": ("hf",),
    "fit": ("hf",),
    "image": ("registry",),
    "tailscale": ("tailscale",),
}
ROOT = "network"


@dataclass
class CheckResult:
    name: str
    title: str
    status: Status
    detail: str
    fix: str = ""
    elapsed_s: float = 0.0
    data: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "title": self.title, "status": self.status.value,
                "detail": self.detail, "fix": self.fix, "elapsed_s": round(self.elapsed_s, 3),
                "data": self.data}


@dataclass
class PreflightReport:
    results: list[CheckResult]
    elapsed_s: float

    @property
    def ok(self) -> bool:
        return not any(r.status is Status.FAIL for r in self.results)

    def counts(self) -> dict[str, int]:
        return {s.value: sum(1 for r in self.results if r.status is s) for s in Status}

    def by_name(self) -> dict[str, CheckResult]:
        return {r.name: r for r in self.results}

    def to_json(self) -> dict[str, Any]:
        return {"ok": self.ok, "elapsed_s": round(self.elapsed_s, 3), "counts": self.counts(),
                "checks": [r.to_json() for r in self.results]}


def _outcome_of(check: Check, ctx: Context) -> Outcome:
    try:
        return check.run(ctx)
    except CheckSkipped as exc:
        return Outcome(Status.SKIP, exc.reason)
    except TransientApiError as exc:
        # A rate limit or an outage says nothing about the settings: `up` tells it apart.
        return Outcome(Status.FAIL, exc.message, "transient: run it again later",
                       {"transient": True, "retry_after_s": exc.retry_after})
    except TailpodError as exc:
        return Outcome(Status.FAIL, exc.message, exc.hint or "")
    except Exception as exc:  # a bug or an unexpected answer: one line, never a traceback
        return Outcome(Status.FAIL, f"unexpected {exc.__class__.__name__}: {short(exc)}")


class _Slot:
    def __init__(self, check: Check) -> None:
        self.check = check
        self.done = threading.Event()
        self.result: CheckResult | None = None
        self.skip_reason: str | None = None  # set before run(): a host it needs is unreachable

    def run(self, ctx: Context) -> None:
        started = time.monotonic()
        if self.skip_reason is not None:
            outcome = Outcome(Status.SKIP, self.skip_reason)
        else:
            outcome = _outcome_of(self.check, ctx)
        self.result = CheckResult(
            self.check.name, self.check.title, outcome.status, redact(outcome.detail),
            redact(outcome.fix), time.monotonic() - started, _scrub(outcome.data))
        self.done.set()


def _scrub(data: Any) -> Any:
    if isinstance(data, str):
        return redact(data)
    if isinstance(data, Mapping):
        return {str(k): _scrub(v) for k, v in data.items()}
    if isinstance(data, (list, tuple)):
        return [_scrub(v) for v in data]
    return data


def _report_when_done(slot: _Slot, on_result: Callable[[CheckResult], None]) -> None:
    slot.done.wait()
    if slot.result is not None:
        with contextlib.suppress(Exception):  # a progress display must not stop the preflight
            on_result(slot.result)


def run_preflight(
    settings: Settings,
    plan: Plan | None = None,
    *,
    checks: Sequence[Check] = CHECKS,
    provider_options: Mapping[str, Any] | None = None,
    settings_problems: Sequence[TailpodError] = (),
    timeout_s: float | None = None,
    on_result: Callable[[CheckResult], None] | None = None,
) -> PreflightReport:
    """Run `checks` concurrently, the network first; nothing is created anywhere. `timeout_s`
    caps every check; `on_result` hears of each check as it finishes (progress)."""
    ctx = Context(settings, plan or Plan(), FACTS, provider_options=provider_options,
                  settings_problems=list(settings_problems))
    started = time.monotonic()
    slots = [_Slot(check) for check in checks]

    def start(slot: _Slot) -> None:
        threading.Thread(target=slot.run, args=(ctx,), name=f"preflight-{slot.check.name}",
                         daemon=True).start()

    root = next((s for s in slots if s.check.name == ROOT), None)
    if root is not None:
        start(root)
        # what needs no host starts at once; what needs one waits for the root's answer
        for slot in slots:
            if slot is not root and not NEEDS.get(slot.check.name):
                start(slot)
        limit = root.check.timeout_s if timeout_s is None else min(timeout_s,
                                                                   root.check.timeout_s)
        root.done.wait(limit)
        unreachable = dict((root.result.data.get("unreachable") or {}) if root.result else {})
        for slot in slots:
            needs = NEEDS.get(slot.check.name)
            if slot is root or not needs:
                continue
            down = [unreachable[role] for role in needs if role in unreachable]
            if down:
                slot.skip_reason = f"not tried: {down[0]} (see network)"
            start(slot)
    else:
        for slot in slots:
            start(slot)
    if on_result is not None:
        for slot in slots:
            threading.Thread(target=_report_when_done, args=(slot, on_result),
                             daemon=True).start()
    results: list[CheckResult] = []
    for slot in slots:
        limit = slot.check.timeout_s if timeout_s is None else min(timeout_s,
                                                                   slot.check.timeout_s)
        slot.done.wait(max(0.0, started + limit - time.monotonic()))
        if slot.result is not None:
            results.append(slot.result)
            continue
        results.append(CheckResult(
            slot.check.name, slot.check.title, Status.FAIL,
            f"did not finish within {limit:g} s (an API that does not answer?)",
            "check the network and the service's status page, then run it again",
            time.monotonic() - started))
    return PreflightReport(results, time.monotonic() - started)
