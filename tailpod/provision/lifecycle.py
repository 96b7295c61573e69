"""Money-safe orchestration of remote pods: what `up`, `down` and `status` call.

The rules, each learned from a public incident (e.g. dstackai/dstack #1551: an instance marked
terminated kept billing; skypilot-org/skypilot #4392 and #4431: leaks when create times out or
races the status update; uda-lab/yomotsusaka #124: three orphan RunPod pods after a client
time-out):
- intent is in the ledger before any provider call, and every provider id is written the moment
  an API answer names it, so a crash or Ctrl-C can never leave a pod nobody knows about;
- after any error, timeout or interrupt during create, the run tag is looked up at the provider
  and whatever carries it is destroyed (or stays in the ledger as still billing);
- teardown is terminate (never stop), a bounded wait until the provider no longer lists the pod,
  then a billing proof written next to the run's results; `down` succeeds only when it is proven;
- every pod carries a TTL in the ledger that `status` flags and `down --expired` enforces.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import asdict, dataclass, field, replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from tailpod.config import Settings, ttl_deadline
from tailpod.errors import (
    AuthError,
    BillingNotProven,
    ConfigError,
    TailpodError,
)
from tailpod.ledger import Ledger, PodRecord, ended_at, interrupted_step, operation_stamp
from tailpod.provision.base import (
    BillingEvidence,
    PodInfo,
    PodSpec,
    PodState,
    ProofCheck,
    Provider,
)
from tailpod.secrets import redact

PROOF_FILE = "billing-proof.json"
PROOF_SCHEMA = "tailpod.billing-proof/1"


@dataclass(frozen=True)
class LifecyclePolicy:
    """Bounded waits and retries of the orchestration (providers keep their own HTTP retries)."""

    terminate_attempts: int = 5
    terminate_retry_s: float = 5.0
    gone_timeout_s: float = 180.0
    poll_interval_s: float = 3.0
    reterminate_every: int = 3  # polls between re-sending terminate while a pod is still listed
    sweep_timeout_s: float = 60.0
    # `down --timeout`: a time.monotonic() after which no wait or retry starts (a provider call
    # already in flight still finishes its own bounded retries).
    deadline: float | None = None
    progress: Callable[[str], None] | None = None  # one line per retry and per ~10 s of waiting
    progress_every_s: float = 10.0

    def within(self, timeout_s: float | None) -> LifecyclePolicy:
        """This policy with every wait ending `timeout_s` from now (None: unchanged)."""
        if timeout_s is None:
            return self
        return replace(self, deadline=time.monotonic() + timeout_s)

    def left(self, wanted_s: float) -> float:
        """`wanted_s`, shortened to what the deadline leaves (never below 0)."""
        if self.deadline is None:
            return wanted_s
        return max(0.0, min(wanted_s, self.deadline - time.monotonic()))

    def say(self, line: str) -> None:
        if self.progress is not None:
            self.progress(redact(line))

    @classmethod
    def fast(cls) -> LifecyclePolicy:
        return cls(terminate_attempts=3, terminate_retry_s=0.02, gone_timeout_s=1.2,
                   poll_interval_s=0.05, reterminate_every=4, sweep_timeout_s=1.2)


def manual_stop(provider: Provider, pod_id: str) -> str:
    """How to stop `pod_id` without tailpod, in the provider's own steps (its class's facts:
    console page, termination route, key variable; provision/base.py manual_stop_steps)."""
    return f"{provider.name} pod {pod_id}: stop it by hand — " + "; ".join(
        provider.manual_stop_steps(pod_id) or [f"the {provider.name} console"])


def _console_url(provider_name: str) -> str | None:
    from tailpod.provision.providers import PROVIDERS, provider_class

    return provider_class(provider_name).console_url if provider_name in PROVIDERS else None


class UnprovenTeardown(BillingNotProven):
    """`down` could not prove billing stopped; carries the evidence and the proof file path."""

    def __init__(self, message: str, hint: str | None, evidence: BillingEvidence,
                 proof_path: Path | None) -> None:
        super().__init__(message, hint)
        self.evidence = evidence
        self.proof_path = proof_path


class LedgerUnwritable(UnprovenTeardown):
    """The disk refused the ledger or the proof (full, read-only): what tailpod proved cannot be
    kept, so nobody may rely on it. Exit 3, one line, never a traceback."""


def _now_iso(t: float | None = None) -> str:
    return datetime.fromtimestamp(t if t is not None else time.time(), timezone.utc).isoformat(
        timespec="seconds")


def _provider_ids(record: PodRecord) -> list[str]:
    ids = [str(i) for i in record.extra.provider_ids]
    if record.pod_id and record.pod_id not in ids:
        ids.insert(0, record.pod_id)
    return ids


def _record_provider_id(ledger: Ledger, run_tag: str, pod_id: str) -> None:
    with ledger.transaction() as pods:
        record = pods[run_tag]
        if pod_id not in record.extra.provider_ids:
            record.extra.provider_ids.append(pod_id)
        if record.pod_id is None:
            record.pod_id = pod_id
        record.status = "creating"
        record.updated_at = time.time()
        record.note("provider-id", pod_id=pod_id)


# -- create ---------------------------------------------------------------------------------------
def create_pod_safely(
    provider: Provider,
    spec: PodSpec,
    ledger: Ledger,
    record: PodRecord,
    *,
    policy: LifecyclePolicy | None = None,
) -> PodInfo:
    """Create one pod with the ledger written first and strays destroyed on any failure.

    On success the record holds the pod id, the GPU really assigned, its $/h and the TTL (the
    spec's ttl_at, computed once by whoever built the spec: config.ttl_deadline); when a
    capacity fallback changed the card, `info.detail["fallback_from"]` names the card asked for.
    """
    policy = policy or LifecyclePolicy()
    if not [g for g in spec.gpu_preference if g and g.strip()]:
        raise ConfigError("the GPU preference list is empty; nothing was created",
                          hint="name at least one GPU (--gpu or TAILPOD_GPUS)")
    if spec.max_price is not None and spec.max_price <= 0:
        raise ConfigError(f"the price cap must be positive, got {spec.max_price}")
    if record.run_tag != spec.run_tag:
        raise ConfigError("the ledger record and the pod spec name different run tags")
    record.provider = provider.name
    record.status = "intent"
    record.gpu_count = spec.gpu_count
    record.image = spec.image
    record.ttl_expires_at = spec.ttl_at
    record.extra.gpu_preference = list(spec.gpu_preference)
    record.extra.max_price = spec.max_price
    record.note("intent", gpus=list(spec.gpu_preference), max_price=spec.max_price)
    record.operation = operation_stamp("create")  # the caller moves it on, or clears it
    try:
        ledger.put(record)
    except OSError as exc:
        # No intent on disk, no rental: a pod the ledger cannot hold is a pod nobody knows of.
        raise TailpodError(
            f"the ledger cannot be written ({exc.strerror or exc}); nothing was rented",
            hint=f"free space under {ledger.home} (or fix its permissions), then run `up` again",
        ) from None

    provider.on_created = lambda pod_id: _record_provider_id(ledger, spec.run_tag, pod_id)
    try:
        ledger.update(spec.run_tag, event="creating", status="creating")
        info = provider.create(spec)
    except BaseException as exc:
        provider.on_created = None
        remaining = _sweep_failed_create(provider, ledger, spec.run_tag, policy, exc)
        if remaining and not isinstance(exc, KeyboardInterrupt):
            # Exit 3, like every outcome where something may still bill (docs/exit-codes.md).
            raise BillingNotProven(
                f"creating {spec.run_tag} failed ({redact(str(exc)) or exc.__class__.__name__}) "
                f"and resources may still bill: {', '.join(remaining)}",
                hint=f"run `tailpod down {spec.run_tag}`",
            ) from exc
        raise
    finally:
        provider.on_created = None

    with ledger.transaction() as pods:
        rec = pods[spec.run_tag]
        rec.pod_id = info.pod_id
        if info.pod_id not in rec.extra.provider_ids:
            rec.extra.provider_ids.append(info.pod_id)
        rec.gpu = info.gpu_type
        rec.gpu_count = info.gpu_count or spec.gpu_count
        rec.price_per_hr = info.price_per_hr
        rec.status = "running" if info.state is PodState.RUNNING else "creating"
        if info.ssh_host and info.ssh_port:
            rec.ssh.update({"host": info.ssh_host, "port": info.ssh_port})
        if "fallback_from" in info.detail:
            rec.extra.fallback_from = info.detail["fallback_from"]
            rec.extra.fallback_reasons = list(info.detail.get("fallback_reasons", []))
        rec.updated_at = time.time()
        rec.note("created", pod_id=info.pod_id, gpu=info.gpu_type, price_per_hr=info.price_per_hr,
                 fallback_from=info.detail.get("fallback_from"))
    return info


def _sweep_failed_create(provider: Provider, ledger: Ledger, run_tag: str,
                         policy: LifecyclePolicy, exc: BaseException) -> list[str]:
    """Destroy whatever the failed create left; the ids that may still bill (empty = clean)."""
    record = ledger.get(run_tag)
    ids = set(_provider_ids(record)) if record else set()
    listing_ok = True
    try:
        ids |= {p.pod_id for p in provider.list_by_tag(run_tag)}
    except TailpodError:
        listing_ok = False
    failed: list[str] = []
    for pod_id in sorted(ids):
        try:
            _terminate_with_retries(provider, pod_id, policy)
        except TailpodError:
            failed.append(pod_id)
    gone, still = _wait_gone(provider, run_tag, ids, policy, policy.sweep_timeout_s)
    remaining = sorted(set(failed) | set(still))
    # A rejected key or a refused configuration fails before any create call is sent; with no
    # provider id recorded either, nothing can exist even if the key cannot list.
    could_have_created = bool(ids) or not isinstance(exc, (AuthError, ConfigError))
    if not listing_ok and could_have_created:
        remaining.append(f"(the {provider.name} listing failed: strays cannot be ruled out)")
    reason = redact(str(exc)) or exc.__class__.__name__
    if gone and not remaining:
        ledger.update(run_tag, event="create-failed-clean", status="terminated", operation={})
        _note(ledger, run_tag, "create-failed", reason=reason, destroyed=sorted(ids))
    else:
        ledger.update(run_tag, event="create-failed-strays", status="failed", operation={})
        _note(ledger, run_tag, "create-failed", reason=reason, may_bill=remaining)
    return remaining


def _note(ledger: Ledger, run_tag: str, event: str, **data: Any) -> None:
    with ledger.transaction() as pods:
        if run_tag in pods:
            pods[run_tag].note(event, **data)


# -- teardown -------------------------------------------------------------------------------------
def _terminate_with_retries(provider: Provider, pod_id: str, policy: LifecyclePolicy) -> None:
    last: TailpodError | None = None
    attempts = max(1, policy.terminate_attempts)
    for attempt in range(attempts):
        try:
            provider.terminate(pod_id)
            return
        except TailpodError as exc:
            last = exc
            pause = policy.left(policy.terminate_retry_s * (attempt + 1))
            if attempt + 1 == attempts or pause <= 0:
                if policy.deadline is not None and pause <= 0:
                    policy.say(f"terminate {pod_id} failed ({exc}); --timeout reached, "
                               "no more retries")
                break
            policy.say(f"terminate {pod_id} failed ({exc}); attempt {attempt + 2}/{attempts} "
                       f"in {pause:.0f} s")
            time.sleep(pause)
    if last is None:
        raise AssertionError("unreachable: the loop returns or records the error")
    raise last


def _still_there(provider: Provider, run_tag: str, ids: Iterable[str]) -> list[str]:
    listed = {p.pod_id for p in provider.list_by_tag(run_tag)}
    for pod_id in ids:
        if pod_id not in listed and provider.get(pod_id) is not None:
            listed.add(pod_id)
    return sorted(listed)


def _wait_gone(provider: Provider, run_tag: str, ids: Iterable[str], policy: LifecyclePolicy,
               timeout_s: float) -> tuple[bool, list[str]]:
    """Poll until nothing tagged or named is visible; re-send terminate now and then."""
    ids = set(ids)
    started = time.monotonic()
    limit = policy.left(timeout_s)
    deadline = started + limit
    next_report = started + policy.progress_every_s
    polls = 0
    still: list[str] = sorted(ids)
    while True:
        try:
            still = _still_there(provider, run_tag, ids)
            if not still:
                return True, []
        except TailpodError:
            pass  # an unreachable API proves nothing: keep waiting
        now = time.monotonic()
        if now >= deadline:
            return False, still
        if now >= next_report:
            next_report = now + policy.progress_every_s
            policy.say(f"waiting for {provider.name} to stop listing {', '.join(still)} "
                       f"({now - started:.0f} s of at most {limit:.0f} s; terminate is re-sent)")
        polls += 1
        if polls % max(1, policy.reterminate_every) == 0:
            for pod_id in still:
                with contextlib.suppress(TailpodError):
                    provider.terminate(pod_id)
        time.sleep(min(policy.poll_interval_s, max(0.0, deadline - time.monotonic())))


def _evidence(provider: Provider, run_tag: str, pod_id: str | None, price: float | None,
              known_active: set[str]) -> BillingEvidence:
    return provider.billing_evidence(run_tag, pod_id, price, known_active_tags=known_active)


def proof_payload(record: PodRecord, provider: Provider, ids: list[str],
                  evidence: BillingEvidence) -> dict[str, Any]:
    return {
        "schema": PROOF_SCHEMA,
        "run_tag": record.run_tag,
        "provider": provider.name,
        "pod_ids": ids,
        "gpu": record.gpu,
        "price_per_hr": record.price_per_hr,
        "created_at": _now_iso(record.created_at),
        "checked_at": _now_iso(),
        "proven": evidence.proven,
        "checks": [asdict(c) for c in evidence.checks],
        "still_billing": list(evidence.still_billing),
    }


def write_proof(run_dir: Path, payload: dict[str, Any]) -> Path:
    run_dir.mkdir(parents=True, exist_ok=True)
    path = run_dir / PROOF_FILE
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(redact(json.dumps(payload, indent=2, sort_keys=True)) + "\n", encoding="utf-8")
    tmp.replace(path)
    return path


def teardown(
    provider: Provider,
    ledger: Ledger,
    record: PodRecord,
    run_dir: Path,
    *,
    policy: LifecyclePolicy | None = None,
    known_active_tags: Iterable[str] | None = None,
    extra_proofs: Callable[[], list[ProofCheck]] | None = None,
) -> BillingEvidence:
    """Terminate everything of `record.run_tag`, wait until gone, prove billing stopped.

    `extra_proofs` adds checks that belong to the same teardown (the pod's tailnet device).

    Writes `run_dir/billing-proof.json` either way. Returns the evidence when proven; raises
    `UnprovenTeardown` (a BillingNotProven, exit code 3) naming what still bills and how to kill
    it otherwise. Idempotent: a second call re-checks and re-proves.
    """
    policy = policy or LifecyclePolicy()
    tag = record.run_tag
    disk: list[str] = []

    def save(write: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """A ledger or proof write; a disk that refuses it is remembered, never fatal here."""
        try:
            return write(*args, **kwargs)
        except OSError as exc:
            disk.append(f"{exc.strerror or exc.__class__.__name__} ({exc.filename or 'ledger'})")
            return None

    stored = ledger.get(tag)
    record = stored or record
    proven_before = ended_at(record) if record.status == "terminated" else None
    ids = _provider_ids(record)
    extra_checks: list[ProofCheck] = []
    still: list[str] = []
    notes: list[str] = []
    # Terminate first, record after: nothing that needs the disk comes before the terminates.
    try:
        for p in provider.list_by_tag(tag):
            if p.pod_id not in ids:
                ids.append(p.pod_id)
    except TailpodError as exc:
        # Not fatal: the wait below and the proof list by tag again and catch any stray.
        notes.append(f"first listing failed ({exc})")
    for pod_id in ids:
        try:
            _terminate_with_retries(provider, pod_id, policy)
        except TailpodError as exc:
            extra_checks.append(ProofCheck(f"terminate {pod_id}", False, str(exc)))
    if stored is None:
        save(ledger.put, record)  # a record the ledger lost (damage) is written back
    save(ledger.update, tag, event="down", status="terminating",
         operation=operation_stamp("teardown"))
    waited = time.monotonic()
    gone, remaining = _wait_gone(provider, tag, ids, policy, policy.gone_timeout_s)
    gone_at = time.time()
    waited = time.monotonic() - waited
    cut_short = policy.deadline is not None and waited < policy.gone_timeout_s
    gone_detail = (
        "the provider no longer lists or answers for "
        + (", ".join(ids) if ids else f"anything tagged {tag}") if gone else
        f"still visible after {waited:.0f} s"
        + (" (the --timeout ran out)" if cut_short else "") + f": {', '.join(remaining)}"
    )
    extra_checks.append(ProofCheck("gone-from-provider", gone,
                                   "; ".join([gone_detail, *notes])))
    if extra_proofs is not None:
        try:
            side = extra_proofs()
        except TailpodError as exc:
            side = [ProofCheck("extra-proof", False, str(exc))]
    else:
        side = []
    if known_active_tags is None:
        known = {r.run_tag for r in ledger.active()
                 if r.run_tag != tag and r.provider == provider.name}
    else:
        known = set(known_active_tags) - {tag}
    try:
        evidence = _evidence(provider, tag, record.pod_id or (ids[0] if ids else None),
                             record.price_per_hr, known)
    except TailpodError as exc:
        evidence = BillingEvidence(
            checks=[ProofCheck("provider-evidence", False, f"could not read evidence: {exc}")],
            still_billing=[f"{provider.name}: cannot verify {tag} ({exc}) — retry: "
                           f"tailpod down {tag}"],
        )
    # Our own checks first, then the provider's; a failed terminate with nothing else listed
    # still makes the proof fail.
    evidence = BillingEvidence(checks=extra_checks + evidence.checks,
                               still_billing=evidence.still_billing + still)
    # Checks of the same teardown that are not the pod's (its tailnet device) come last, so each
    # failure names its own cause: a pod proven gone is not blamed for a device left behind.
    evidence = BillingEvidence(checks=evidence.checks + side,
                               still_billing=list(evidence.still_billing))
    side_ids = {id(c) for c in side}
    pod_failed = any(not c.passed for c in evidence.checks if id(c) not in side_ids)
    if not evidence.proven and not evidence.still_billing:
        if pod_failed:
            evidence.still_billing.append(
                f"{provider.name}: {tag} ({', '.join(ids) or 'no id'}) is not proven gone — "
                f"retry: tailpod down {tag}")
        else:
            evidence.still_billing += [
                f"{tag}: {c.name} failed ({c.detail}); {provider.name} shows the pod gone — "
                f"retry: tailpod down {tag}" for c in side if not c.passed]
    if not evidence.proven and pod_failed:
        # Per pod, the stop that needs no tailpod and no answer from it (docs/exit-codes.md).
        evidence.still_billing.extend(manual_stop(provider, pod_id) for pod_id in ids)
    payload = proof_payload(record, provider, ids, evidence)
    if evidence.proven:
        # The proven end: the first proof's, kept when a later `down` proves it again.
        payload["ended_at"] = _now_iso(proven_before or gone_at)
    proof_path = save(write_proof, run_dir, payload)
    if evidence.proven:
        save(ledger.update, tag, event="billing-proven", status="terminated", operation={})
        with contextlib.suppress(OSError), ledger.transaction() as pods:
            if tag in pods:
                pods[tag].extra.ended_at = proven_before or gone_at
                pods[tag].note("proof", path=str(proof_path))
    else:
        save(ledger.update, tag, event="billing-not-proven", status="terminating", operation={})
        save(_note, ledger, tag, "proof", path=str(proof_path),
             still_billing=evidence.still_billing)
    if disk:
        said = ("billing proven stopped at the provider" if evidence.proven else
                "billing is NOT proven stopped: " + " | ".join(evidence.still_billing))
        raise LedgerUnwritable(
            redact(f"{tag}: terminate sent, {said}; but the disk refused the ledger or the "
                   f"proof ({'; '.join(sorted(set(disk)))}), so nothing of it is recorded"),
            f"free space under {ledger.home} and {run_dir.parent}, then run "
            f"`tailpod down {tag}` again to prove and record it",
            evidence, None)
    if evidence.proven:
        return evidence
    raise UnprovenTeardown(
        redact(f"billing is NOT proven stopped for {tag}: " + " | ".join(evidence.still_billing)),
        redact(f"kill it with `tailpod down {tag}` or by hand as above (proof: {proof_path})"),
        evidence,
        proof_path,
    )


@dataclass
class TeardownOutcome:
    run_tag: str
    provider: str
    evidence: BillingEvidence | None
    error: str | None = None
    proof_path: str | None = None

    @property
    def proven(self) -> bool:
        return self.evidence is not None and self.evidence.proven and self.error is None


def teardown_many(
    providers: Mapping[str, Provider],
    ledger: Ledger,
    run_dir_for: Callable[[str], Path],
    *,
    select: Callable[[PodRecord | None, PodInfo | None], bool],
    policy: LifecyclePolicy | None = None,
    extra_proofs_for: Callable[[PodRecord], Callable[[], list[ProofCheck]] | None] | None = None,
) -> list[TeardownOutcome]:
    """Tear down every run tag `select` picks among ledger records and provider-tagged pods.

    All selected pods are terminated first, then each tag is proven, with the batch's other tags
    counted as known so one slow disappearance does not fail its neighbours' proofs.
    """
    policy = policy or LifecyclePolicy()
    batch: dict[str, tuple[Provider, PodRecord]] = {}
    errors: list[TeardownOutcome] = []
    records = {r.run_tag: r for r in ledger.all()}
    for name, provider in providers.items():
        try:
            tagged = provider.list_by_tag(None)
        except TailpodError as exc:
            errors.append(TeardownOutcome("*", name, None, f"listing failed: {exc}"))
            tagged = []
        for info in tagged:
            tag = info.run_tag or ""
            if not tag:
                continue
            rec = records.get(tag)
            if select(rec, info) and tag not in batch:
                if rec is None:
                    rec = PodRecord(run_tag=tag, provider=name, status="terminating",
                                    pod_id=info.pod_id, gpu=info.gpu_type,
                                    price_per_hr=info.price_per_hr)
                    rec.note("orphan-adopted", pod_id=info.pod_id)
                    ledger.put(rec)
                batch[tag] = (provider, rec)
        for rec in records.values():
            if rec.provider == name and rec.active and rec.run_tag not in batch \
                    and select(rec, None):
                batch[rec.run_tag] = (provider, rec)
    for _tag, (provider, rec) in batch.items():
        for pod_id in _provider_ids(rec):
            with contextlib.suppress(TailpodError):  # teardown() retries and reports it
                provider.terminate(pod_id)
    outcomes = list(errors)
    # Known = this batch plus every other run the ledger tracks as live (those bill on purpose).
    tags = set(batch) | {r.run_tag for r in ledger.active()}
    for tag, (provider, rec) in batch.items():
        try:
            evidence = teardown(provider, ledger, rec, run_dir_for(tag), policy=policy,
                                known_active_tags=tags - {tag},
                                extra_proofs=extra_proofs_for(rec) if extra_proofs_for else None)
            outcomes.append(TeardownOutcome(tag, provider.name, evidence,
                                            proof_path=str(run_dir_for(tag) / PROOF_FILE)))
        except UnprovenTeardown as exc:
            outcomes.append(TeardownOutcome(tag, provider.name, exc.evidence, exc.message,
                                            str(exc.proof_path) if exc.proof_path else None))
        except TailpodError as exc:
            outcomes.append(TeardownOutcome(tag, provider.name, None, exc.message))
    return outcomes


def teardown_all(providers: Mapping[str, Provider], ledger: Ledger,
                 run_dir_for: Callable[[str], Path], *,
                 policy: LifecyclePolicy | None = None,
                 extra_proofs_for: Callable[[PodRecord], Callable[[], list[ProofCheck]] | None]
                 | None = None) -> list[TeardownOutcome]:
    """`down --all`: every tailpod-tagged resource of the accounts, tracked or not."""
    return teardown_many(providers, ledger, run_dir_for, select=lambda _r, _i: True,
                         policy=policy, extra_proofs_for=extra_proofs_for)


def teardown_expired(providers: Mapping[str, Provider], ledger: Ledger,
                     run_dir_for: Callable[[str], Path], *, now: float | None = None,
                     policy: LifecyclePolicy | None = None) -> list[TeardownOutcome]:
    """`down --expired`: every ledger record whose TTL has passed."""
    t = time.time() if now is None else now

    def expired(record: PodRecord | None, _info: PodInfo | None) -> bool:
        return bool(record and record.ttl_expires_at is not None and record.ttl_expires_at <= t)

    return teardown_many(providers, ledger, run_dir_for, select=expired, policy=policy)


def raise_if_unproven(outcomes: list[TeardownOutcome]) -> None:
    bad = [o for o in outcomes if not o.proven]
    if not bad:
        return
    lines = []
    for o in bad:
        if o.evidence and o.evidence.still_billing:
            lines += o.evidence.still_billing
        else:
            where = _console_url(o.provider)
            lines.append(f"{o.provider} {o.run_tag}: {o.error}"
                         + (f" — see what bills at {where}" if where else ""))
    raise BillingNotProven(redact("billing is NOT proven stopped: " + " | ".join(lines)),
                           hint="run `tailpod down --all` again, or stop each pod by hand as "
                                "named above")


# -- status ---------------------------------------------------------------------------------------
@dataclass
class StatusRow:
    run_tag: str
    provider: str
    pod_id: str | None
    ledger_status: str | None  # None: not in the ledger (an orphan)
    provider_state: str | None  # "gone": not at the provider (a ghost); None: not checked
    gpu: str | None
    gpu_count: int | None
    price_per_hr: float | None
    uptime_s: float | None
    spend_usd: float | None
    ttl_expires_at: float | None
    fallback_from: str | None = None
    flags: list[str] = field(default_factory=list)
    settle: str | None = None  # the one command that settles a row that needs attention
    owner: str | None = None  # who ran the operation in progress ("pid N on HOST")


@dataclass
class StatusReport:
    rows: list[StatusRow]
    errors: list[str]
    checked_at: float
    ledger_notices: list[str] = field(default_factory=list)  # damage found, what was done

    @property
    def orphans(self) -> list[StatusRow]:
        return [r for r in self.rows if "orphan" in r.flags]

    @property
    def ghosts(self) -> list[StatusRow]:
        return [r for r in self.rows if "ghost" in r.flags]

    @property
    def expired(self) -> list[StatusRow]:
        return [r for r in self.rows if "expired" in r.flags]

    def to_json(self) -> dict[str, Any]:
        return {"checked_at": _now_iso(self.checked_at), "rows": [asdict(r) for r in self.rows],
                "errors": list(self.errors), "ledger_notices": list(self.ledger_notices),
                # A provider that did not answer makes the rate unknown, never 0.
                "rate_per_hr_now": None if self.errors else round(
                    sum(r.price_per_hr or 0.0 for r in self.rows
                        if r.provider_state == "running"), 6),
                "rate_unknown_reason": ("could not ask " + "; ".join(self.errors))
                if self.errors else None}


def gone_reason(record: PodRecord, now: float) -> str:
    """Why a pod the ledger holds as live is no longer at its provider, as far as tailpod knows:
    its dead-man switch (armed by `up`) ends it at its TTL or after the heartbeat timeout; a pod
    with no switch was deleted by hand or by the provider."""
    deadman = record.extra.deadman
    if not isinstance(deadman, dict):
        return "ended outside tailpod (deleted by hand or by the provider)"
    ttl_at = deadman.get("ttl_at")
    if isinstance(ttl_at, (int, float)) and 0 < ttl_at <= now:  # 0: armed with no TTL
        return "ended, most likely by its dead-man switch at its TTL"
    timeout = deadman.get("heartbeat_timeout_s")
    after = f" {float(timeout) / 60:.0f} min" if isinstance(timeout, (int, float)) else ""
    return (f"ended, most likely by its dead-man switch (no heartbeat for{after or ' its timeout'}),"
            " or deleted outside tailpod")


def reconcile(providers: Mapping[str, Provider], ledger: Ledger, *,
              now: float | None = None) -> StatusReport:
    """Join the ledger with what each provider reports; flag orphans, ghosts and expired TTLs."""
    t = time.time() if now is None else now
    errors: list[str] = []
    listed: dict[str, list[PodInfo] | None] = {}
    for name, provider in providers.items():
        try:
            listed[name] = provider.list_by_tag(None)
        except TailpodError as exc:
            listed[name] = None
            errors.append(f"{name}: {exc}")
    rows: list[StatusRow] = []
    records = ledger.all()
    by_tag = {r.run_tag: r for r in records}
    for rec in records:
        if not rec.active:
            continue
        flags: list[str] = []
        state: str | None = None
        info: PodInfo | None = None
        pods = listed.get(rec.provider)
        if rec.provider not in listed:
            flags.append("provider not checked")
        elif pods is None:
            flags.append("provider unreachable")
        else:
            matches = [p for p in pods if p.run_tag == rec.run_tag]
            if matches:
                info = matches[0]
            elif rec.pod_id and rec.provider in providers:
                try:
                    info = providers[rec.provider].get(rec.pod_id)
                except TailpodError as exc:
                    flags.append(f"lookup failed: {exc}")
            if info is None and not any("lookup failed" in f for f in flags):
                # The ledger says live, the provider holds no such pod: it ended outside tailpod.
                flags += ["ghost", gone_reason(rec, t)]
                state = "gone"
        if info is not None:
            state = info.state.value
        if rec.ttl_expires_at is not None and rec.ttl_expires_at <= t:
            flags.append("expired")
        step = interrupted_step(rec)
        if step:
            flags.append(f"interrupted during {step}")
        price = (info.price_per_hr if info and info.price_per_hr is not None
                 else rec.price_per_hr)
        uptime = max(0.0, t - rec.created_at)
        rows.append(StatusRow(
            run_tag=rec.run_tag, provider=rec.provider, pod_id=rec.pod_id or
            (info.pod_id if info else None), ledger_status=rec.status, provider_state=state,
            gpu=(info.gpu_type if info and info.gpu_type else rec.gpu),
            gpu_count=(info.gpu_count if info and info.gpu_count else rec.gpu_count),
            price_per_hr=price, uptime_s=uptime,
            spend_usd=round(price * uptime / 3600.0, 4) if price is not None else None,
            ttl_expires_at=rec.ttl_expires_at, fallback_from=rec.extra.fallback_from,
            flags=flags, settle=f"tailpod down {rec.run_tag}" if step or "expired" in flags
            or "ghost" in flags else None,
            owner=f"pid {rec.operation.get('pid')} on {rec.operation.get('host')}"
            if rec.operation else None,
        ))
    for name, pods in listed.items():
        for info in pods or []:
            known = by_tag.get(info.run_tag or "")
            if known is not None and known.active:
                continue
            flags = ["orphan"] if known is None else ["orphan", "ledger says terminated"]
            created = info.detail.get("created_at")
            up: float | None = t - float(created) if isinstance(created, (int, float)) else None
            rows.append(StatusRow(
                run_tag=info.run_tag or "?", provider=name, pod_id=info.pod_id,
                ledger_status=known.status if known else None, provider_state=info.state.value,
                gpu=info.gpu_type, gpu_count=info.gpu_count, price_per_hr=info.price_per_hr,
                uptime_s=up,
                spend_usd=round(info.price_per_hr * up / 3600.0, 4)
                if info.price_per_hr is not None and up is not None else None,
                ttl_expires_at=None, flags=flags, settle=f"tailpod down {info.run_tag}"
                if info.run_tag else "tailpod down --all",
            ))
    return StatusReport(rows=rows, errors=errors, checked_at=t)


# -- recovery from a damaged ledger: the providers are the truth ----------------------------------
_LEDGER_STATUS = {PodState.RUNNING: "running", PodState.STOPPED: "stopped"}


def describe_recovery(notice: Mapping[str, Any]) -> str:
    """One line for a recovery notice the ledger keeps: what was damaged, kept, restored."""
    damaged = ", ".join(f"{name} ({why})" for name, why in notice.get("damaged", {}).items())
    kept = ", ".join(notice.get("set_aside", []))
    line = f"the ledger was damaged at {_now_iso(notice.get('t'))}: {damaged}"
    if kept:
        line += f"; kept as {kept}"
    if notice.get("restored_from"):
        line += f"; restored from {notice['restored_from']} (nothing lost)"
    else:
        line += "; no readable copy was left, so the ledger is rebuilt from the providers"
    settled = notice.get("settled")
    if isinstance(settled, Mapping) and settled.get("summary"):
        line += f"; {settled['summary']}"
    return line


def adopt_from_providers(providers: Mapping[str, Provider], ledger: Ledger,
                         tailnet_lists: Callable[[str], bool] | None = None,
                         ) -> tuple[list[str], list[str]]:
    """Write a record for every tailpod-tagged pod a provider lists that the ledger lacks.

    Returns (adopted run tags, listing errors). `tailnet_lists(tag)` says whether the tailnet
    still has the pod's device, so that `down` deletes and checks it too."""
    adopted: list[str] = []
    errors: list[str] = []
    for name, provider in providers.items():
        try:
            listed = provider.list_by_tag(None)
        except TailpodError as exc:
            errors.append(f"{name}: {exc}")
            continue
        for info in listed:
            tag = info.run_tag or ""
            known = ledger.get(tag) if tag else None
            if not tag or (known is not None and known.active):
                continue
            rec = PodRecord(run_tag=tag, provider=name, pod_id=info.pod_id,
                            status=_LEDGER_STATUS.get(info.state, "creating"),
                            gpu=info.gpu_type, gpu_count=info.gpu_count or 1,
                            price_per_hr=info.price_per_hr)
            rec.extra.provider_ids = [info.pod_id]
            if tailnet_lists is not None and tailnet_lists(tag):
                rec.tailnet = {"enabled": True}
            rec.note("recovered-from-provider", pod_id=info.pod_id, state=info.state.value)
            ledger.put(rec)
            adopted.append(tag)
    return adopted, errors


def _tailnet_lister(settings: Settings) -> Callable[[str], bool] | None:
    if not settings.tailscale_api_key:
        return None
    from tailpod.provision.tailnet.devices import find_devices, tailnet_hostname
    from tailpod.provision.tailnet.steps import api_from_settings

    def lists(tag: str) -> bool:
        try:
            with api_from_settings(settings) as api:
                return bool(find_devices(api, tailnet_hostname(tag)))
        except TailpodError:
            return True  # cannot tell: let `down` try to delete it and say what it found
    return lists


def recover_ledger(settings: Settings, ledger: Ledger,
                   providers: Mapping[str, Provider]) -> list[str]:
    """Settle the ledger's pending damage notices against the providers; lines for the user.

    A notice whose good copy was restored lost nothing and is settled once the providers answer;
    one with no readable copy gets every tagged pod the providers list adopted first."""
    pending = ledger.pending_recovery()
    if not pending:
        return []
    lines = [describe_recovery(n) for n in pending]
    errors: list[str] = []
    summary = "checked against " + (", ".join(providers) or "no provider")
    if any(not n.get("restored_from") for n in pending):
        adopted, errors = adopt_from_providers(providers, ledger, _tailnet_lister(settings))
        summary = ("rebuilt from " + (", ".join(providers) or "no provider") + ": "
                   + (f"{len(adopted)} pod(s) found and written back ({', '.join(adopted)})"
                      if adopted else "no tailpod-tagged pod is listed"))
        lines.append(summary)
    if errors or not providers:
        lines.append("not every provider answered, so the recovery is not settled yet: "
                     + "; ".join(errors or ["no cloud provider is configured"]))
        return lines
    ledger.settle_recovery(summary)
    return lines


def find_at_providers(settings: Settings, ledger: Ledger, run_tag: str,
                      **options: Any) -> PodRecord | None:
    """`down TAG` for a tag the ledger does not hold (damage, another machine's ledger): what
    the configured providers list under it, adopted into the ledger; None when nothing is."""
    providers = _providers_for(settings, (), **options)
    for name, provider in providers.items():
        pods = provider.list_by_tag(run_tag)
        if pods:
            lister = _tailnet_lister(settings)
            rec = PodRecord(run_tag=run_tag, provider=name, status="terminating",
                            pod_id=pods[0].pod_id, gpu=pods[0].gpu_type,
                            price_per_hr=pods[0].price_per_hr,
                            tailnet={"enabled": True} if lister and lister(run_tag) else {})
            rec.extra.provider_ids = [p.pod_id for p in pods]
            rec.note("recovered-from-provider", pod_id=pods[0].pod_id)
            ledger.put(rec)
            return rec
    return None


# -- settings-level entry points (what the CLI calls) ---------------------------------------------
def run_dir_for(settings: Settings, run_tag: str) -> Path:
    """Where a run's results and its billing proof live."""
    return Path(settings.results_dir) / run_tag


def _providers_for(settings: Settings, names: Iterable[str], **options: Any) -> dict[str, Provider]:
    from tailpod.provision.providers import CLOUD_PROVIDERS, get_provider, remote_providers

    out = remote_providers(settings, **options)
    for name in names:
        if name not in out and name in CLOUD_PROVIDERS:
            out[name] = get_provider(name, settings, **options)
    return out


def up_remote(settings: Settings, ledger: Ledger, spec: PodSpec, *,
              policy: LifecyclePolicy | None = None, **options: Any) -> tuple[PodRecord, PodInfo]:
    """Rent one pod on `settings.provider` with the ledger, TTL and price cap rules applied."""
    from tailpod.provision.providers import CLOUD_PROVIDERS, canonical_name, get_provider

    name = canonical_name(settings.provider)
    if name not in CLOUD_PROVIDERS:
        raise ConfigError(f"{settings.provider!r} is not a cloud provider")
    if spec.max_price is None:
        spec.max_price = settings.max_price
    if spec.ttl_at is None:  # a spec built without one (up_cloud's has it): the settings' TTL
        spec.ttl_at = ttl_deadline(settings.ttl_hours, time.time())
    provider = get_provider(name, settings, **options)
    record = PodRecord(run_tag=spec.run_tag, provider=name)
    info = create_pod_safely(provider, spec, ledger, record, policy=policy)
    return ledger.get(spec.run_tag) or record, info


ORPHAN_DEVICE_CHECK = "orphan's tailnet device"


def _is_orphan(record: PodRecord) -> bool:
    """A record `down --all` adopted from a provider listing: nothing says whether it joined."""
    return not record.tailnet and any(e.get("event") == "orphan-adopted" for e in record.events)


def _tailnet_proof(settings: Settings,
                   record: PodRecord) -> Callable[[], list[ProofCheck]] | None:
    if _is_orphan(record):
        # The ledger never saw this pod join, so its device (tailpod-<tag>) is looked for and
        # deleted when the tailnet API can be asked, and the proof says so when it cannot.
        def orphan() -> list[ProofCheck]:
            from tailpod.provision.tailnet.devices import tailnet_hostname
            from tailpod.provision.tailnet.steps import tailnet_down_proof

            if not settings.tailscale_api_key:
                return [ProofCheck(ORPHAN_DEVICE_CHECK, True, (
                    f"not checked: TAILSCALE_API_KEY is unset, so a device "
                    f"{tailnet_hostname(record.run_tag)} (if this orphan joined the tailnet) "
                    "could not be looked for or deleted; it does not bill"))]
            return [tailnet_down_proof(settings, record.run_tag)]
        return orphan
    if not record.tailnet.get("enabled"):
        return None

    def extra() -> list[ProofCheck]:
        # Ephemeral nodes vanish on no fixed schedule: delete the device, then list again.
        from tailpod.provision.tailnet.steps import tailnet_down_proof

        return [tailnet_down_proof(settings, record.run_tag)]
    return extra


def down_remote(settings: Settings, ledger: Ledger, record: PodRecord, *,
                policy: LifecyclePolicy | None = None, **options: Any) -> BillingEvidence:
    """`down RUN_TAG` for a cloud pod; raises UnprovenTeardown (exit 3) when not proven."""
    from tailpod.provision.providers import SSH_BOX, get_provider

    provider = get_provider(record.provider, settings, **options)
    evidence = teardown(provider, ledger, record, run_dir_for(settings, record.run_tag),
                        policy=policy, extra_proofs=_tailnet_proof(settings, record))
    if record.ssh and record.provider != SSH_BOX:  # your own box keeps its pinned host key
        from tailpod.provision.tailnet.steps import forget_pod_ssh

        forget_pod_ssh(settings, record.run_tag, record.ssh)
    return evidence


def down_many(settings: Settings, ledger: Ledger, *, expired_only: bool = False,
              policy: LifecyclePolicy | None = None,
              on_recovery: Callable[[str], None] | None = None,
              before_local: Callable[[PodRecord], PodRecord] | None = None,
              **options: Any) -> list[TeardownOutcome]:
    """`down --all` (every tailpod-tagged resource of the accounts) or `down --expired`.

    `on_recovery` gets one line for each piece of ledger damage this run recovered from;
    `before_local` sees each local record before its teardown (`down TAG`'s own step for a lanes
    run: the final counts, the lanes stopped)."""
    now = time.time()
    names = {r.provider for r in ledger.active()}
    providers = _providers_for(settings, names, **options)
    # The local runner is settled too, whatever clouds are configured (it may hold a GPU).
    local = [r for r in ledger.active() if r.provider == "local" and (
        not expired_only or (r.ttl_expires_at is not None and r.ttl_expires_at <= now))]
    if not expired_only:
        local += _local_orphans(settings, ledger, {r.run_tag for r in local})
    if not providers and not local and not any(r.provider == "local" for r in ledger.active()):
        from tailpod.provision.providers import cloud_key_envs

        raise ConfigError("no cloud provider is configured",
                          hint="set " + " and/or ".join(cloud_key_envs()))
    outcomes = [_down_one(settings, ledger, rec, policy, before_local, **options)
                for rec in local]
    if not providers:
        return outcomes
    for line in recover_ledger(settings, ledger, providers):
        if on_recovery is not None:
            on_recovery(line)

    def run_dir(tag: str) -> Path:
        return run_dir_for(settings, tag)

    if expired_only:
        return outcomes + teardown_expired(providers, ledger, run_dir, policy=policy)
    return outcomes + teardown_all(providers, ledger, run_dir, policy=policy,
                                   extra_proofs_for=lambda rec: _tailnet_proof(settings, rec))


def _local_orphans(settings: Settings, ledger: Ledger, held: set[str]) -> list[PodRecord]:
    """Run tags the local provider still runs (an engine, a lanes run's proxy or any of its lane
    engines) that no active ledger record holds: adopted so `down --all` stops and proves them.
    (Not marked "orphan-adopted": a local process never joins the tailnet.)"""
    from tailpod.provision.local.provider import LocalProvider

    out = []
    for info in LocalProvider(settings.home).list_by_tag(None):
        tag = info.run_tag
        if not tag or tag in held:
            continue
        if ledger.get(tag) is None:
            ledger.put(PodRecord(run_tag=tag, provider="local", status="terminating",
                                 pod_id=info.pod_id, gpu=info.gpu_type, price_per_hr=0.0))
        rec = ledger.update(tag, event="local-orphan-adopted", status="terminating",
                            pod_id=info.pod_id)
        out.append(rec)
    return out


def _down_one(settings: Settings, ledger: Ledger, record: PodRecord,
              policy: LifecyclePolicy | None,
              before: Callable[[PodRecord], PodRecord] | None = None,
              **options: Any) -> TeardownOutcome:
    """`down_remote` of one record as a TeardownOutcome (never raises a TailpodError)."""
    proof = str(run_dir_for(settings, record.run_tag) / PROOF_FILE)
    try:
        if before is not None:  # its failure is this record's outcome; the teardown still runs
            try:
                record = before(record)
            except TailpodError as exc:
                ledger.update(record.run_tag, event="before-teardown-failed",
                              extra=dataclasses.replace(record.extra, before_teardown_error=exc.message))
        evidence = down_remote(settings, ledger, record, policy=policy, **options)
        return TeardownOutcome(record.run_tag, record.provider, evidence, proof_path=proof)
    except UnprovenTeardown as exc:
        return TeardownOutcome(record.run_tag, record.provider, exc.evidence, exc.message,
                               str(exc.proof_path) if exc.proof_path else None)
    except TailpodError as exc:
        return TeardownOutcome(record.run_tag, record.provider, None, exc.message)


def status_remote(settings: Settings, ledger: Ledger, **options: Any) -> StatusReport:
    """Ledger joined with every configured cloud provider's listing (orphans, ghosts, TTLs)."""
    names = {r.provider for r in ledger.active()}
    providers: dict[str, Provider] = {}
    errors: list[str] = []
    try:
        providers = _providers_for(settings, names, **options)
    except TailpodError as exc:
        errors.append(str(exc))
    notices = recover_ledger(settings, ledger, providers) if providers else [
        describe_recovery(n) for n in ledger.pending_recovery()]
    report = reconcile(providers, ledger)
    report.errors = errors + report.errors
    report.ledger_notices = notices
    report.rows = [r for r in report.rows if r.provider != "local"]  # the local CLI shows those
    return report
