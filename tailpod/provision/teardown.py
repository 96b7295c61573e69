"""Proven teardown: terminate (never stop), a bounded wait until the provider no longer lists the
pod, then a billing proof written next to the run's results (`billing-proof.json`); `down`
succeeds only when it is proven. Also `down --all` / `--expired` and the manual stop printed
when tailpod cannot prove a pod gone. Creation is provision/create.py; status and ledger
recovery provision/reconcile.py.
"""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from tailpod.config import Settings
from tailpod.errors import (
    BillingNotProven,
    ConfigError,
    TailpodError,
)
from tailpod.ledger import Ledger, PodRecord, another_homes, ended_at, home_id, operation_stamp
from tailpod.provision import providers as providers_mod
from tailpod.provision.base import (
    BillingEvidence,
    PodInfo,
    ProofCheck,
    Provider,
)
from tailpod.provision.local import provider as local_provider
from tailpod.provision.providers import PROVIDERS, SSH_BOX, cloud_key_envs, provider_class
from tailpod.provision.reconcile import now_iso, providers_for, recover_ledger
from tailpod.provision.tailnet import steps
from tailpod.provision.tailnet.devices import tailnet_hostname
from tailpod.provision.tailnet.steps import tailnet_down_proof
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


def manual_stop(provider: Provider, pod_id: str) -> str:
    """How to stop `pod_id` without tailpod, in the provider's own steps (its class's facts:
    console page, termination route, key variable; provision/base.py manual_stop_steps)."""
    return f"{provider.name} pod {pod_id}: stop it by hand — " + "; ".join(
        provider.manual_stop_steps(pod_id) or [f"the {provider.name} console"])


def _console_url(provider_name: str) -> str | None:
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


def provider_ids_of(record: PodRecord) -> list[str]:
    ids = [str(i) for i in record.extra.provider_ids]
    if record.pod_id and record.pod_id not in ids:
        ids.insert(0, record.pod_id)
    return ids


def note_event(ledger: Ledger, run_tag: str, event: str, **data: Any) -> None:
    with ledger.transaction() as pods:
        if run_tag in pods:
            pods[run_tag].note(event, **data)


def terminate_with_retries(provider: Provider, pod_id: str, policy: LifecyclePolicy) -> None:
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


def wait_gone(provider: Provider, run_tag: str, ids: Iterable[str], policy: LifecyclePolicy,
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
        "created_at": now_iso(record.created_at),
        "checked_at": now_iso(),
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
    ids = provider_ids_of(record)
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
            terminate_with_retries(provider, pod_id, policy)
        except TailpodError as exc:
            extra_checks.append(ProofCheck(f"terminate {pod_id}", False, str(exc)))
    if stored is None:
        save(ledger.put, record)  # a record the ledger lost (damage) is written back
    save(ledger.update, tag, event="down", status="terminating",
         operation=operation_stamp("teardown"))
    waited = time.monotonic()
    gone, remaining = wait_gone(provider, tag, ids, policy, policy.gone_timeout_s)
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
    # A pod proven gone whose side step alone failed (its tailnet device, which bills nothing)
    # gets no line here: it is said below in its own words, never as "STILL BILLING" (issue 38).
    if not evidence.proven and not evidence.still_billing and pod_failed:
        evidence.still_billing.append(
            f"{provider.name}: {tag} ({', '.join(ids) or 'no id'}) is not proven gone — "
            f"retry: tailpod down {tag}")
    if not evidence.proven and pod_failed:
        # Per pod, the stop that needs no tailpod and no answer from it (docs/exit-codes.md).
        evidence.still_billing.extend(manual_stop(provider, pod_id) for pod_id in ids)
    payload = proof_payload(record, provider, ids, evidence)
    if evidence.proven:
        # The proven end: the first proof's, kept when a later `down` proves it again.
        payload["ended_at"] = now_iso(proven_before or gone_at)
    proof_path = save(write_proof, run_dir, payload)
    # The ledger's `proof` note points at the file, or says there is none (a refused write).
    proof_note: dict[str, Any] = (
        {"path": str(proof_path)} if proof_path is not None else
        {"path": None, "not_written": f"the disk refused {run_dir / PROOF_FILE}"})
    if evidence.proven:
        save(ledger.update, tag, event="billing-proven", status="terminated", operation={})
        with contextlib.suppress(OSError), ledger.transaction() as pods:
            if tag in pods:
                pods[tag].extra.ended_at = proven_before or gone_at
                pods[tag].note("proof", **proof_note)
    else:
        save(ledger.update, tag, event="billing-not-proven", status="terminating", operation={})
        save(note_event, ledger, tag, "proof", **proof_note, still_billing=evidence.still_billing)
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
    if not pod_failed and not evidence.still_billing:  # only a side step failed
        raise UnprovenTeardown(
            redact(f"{tag}: billing proven stopped ({provider.name} shows the pod gone), but a "
                   "step of its teardown failed: " + "; ".join(
                       f"{c.name} failed ({c.detail})" for c in side if not c.passed)),
            redact(f"retry: tailpod down {tag} (what was left bills nothing; proof: "
                   f"{proof_path})"),
            evidence,
            proof_path,
        )
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
        for pod_id in provider_ids_of(rec):
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
                 | None = None, home: str | None = None, all_homes: bool = True,
                 others: list[PodInfo] | None = None) -> list[TeardownOutcome]:
    """`down --all`: every tailpod-tagged resource of the accounts, tracked or not. Without
    `all_homes`, a pod whose tag carries another home's id than `home` (a colleague's on a
    shared account) is left alone unless this ledger holds it, and appended to `others`."""
    def select(record: PodRecord | None, info: PodInfo | None) -> bool:
        if all_homes or record is not None or info is None \
                or not another_homes(info.run_tag, home):
            return True
        if others is not None and info not in others:
            others.append(info)
        return False

    return teardown_many(providers, ledger, run_dir_for, select=select,
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
    # A pod proven gone whose side step failed (its tailnet device) has evidence and no line of
    # what still bills (teardown above): its own words, and no "NOT proven" when all are such.
    side_only = [o for o in bad if o.evidence is not None and not o.evidence.still_billing]
    for o in bad:
        if o.evidence and o.evidence.still_billing:
            lines += o.evidence.still_billing
        elif o in side_only:
            lines.append(str(o.error))
        else:
            where = _console_url(o.provider)
            lines.append(f"{o.provider} {o.run_tag}: {o.error}"
                         + (f" — see what bills at {where}" if where else ""))
    if len(side_only) == len(bad):
        raise BillingNotProven(redact(" | ".join(lines)),
                               hint="run `tailpod down --all` again; what was left bills nothing")
    raise BillingNotProven(redact("billing is NOT proven stopped: " + " | ".join(lines)),
                           hint="run `tailpod down --all` again, or stop each pod by hand as "
                                "named above")


# -- settings-level entry points (what the CLI calls) ---------------------------------------------
def run_dir_for(settings: Settings, run_tag: str) -> Path:
    """Where a run's results and its billing proof live."""
    return Path(settings.results_dir) / run_tag


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
        return [tailnet_down_proof(settings, record.run_tag)]
    return extra


def down_remote(settings: Settings, ledger: Ledger, record: PodRecord, *,
                policy: LifecyclePolicy | None = None, **options: Any) -> BillingEvidence:
    """`down RUN_TAG` for a cloud pod; raises UnprovenTeardown (exit 3) when not proven."""
    if record.provider == SSH_BOX:  # its manual stop names the engine record where up found it
        options = {"state_dir": record.extra.pod_state_dir}
    provider = providers_mod.get_provider(record.provider, settings, **options)
    evidence = teardown(provider, ledger, record, run_dir_for(settings, record.run_tag),
                        policy=policy, extra_proofs=_tailnet_proof(settings, record))
    if record.ssh and record.provider != SSH_BOX:  # your own box keeps its pinned host key

        steps.forget_pod_ssh(settings, record.run_tag, record.ssh)
    return evidence


@dataclass
class DownAllPlan:
    """What `down --all` / `down --expired` takes down. `held`: the runs no provider account
    lists (this machine's, with its orphans adopted, and your own boxes'), each downed by its pod
    kind (pods/down.py); `providers`: the cloud accounts whose tagged pods `down_clouds` takes."""

    held: list[PodRecord]
    providers: dict[str, Provider]


def plan_down_many(settings: Settings, ledger: Ledger, *, expired_only: bool = False,
                   **options: Any) -> DownAllPlan:
    """The runs and accounts `down --all` (or `--expired`) takes down; a ConfigError (exit 2)
    before anything is torn down when there is neither a cloud to ask nor a local run.
    `options` go to each cloud provider made (the sandbox's timings in tests)."""
    now = time.time()
    names = {r.provider for r in ledger.active()}
    providers = providers_for(settings, names, **options)
    # The local runner is settled too, whatever clouds are configured (it may hold a GPU).
    local = [r for r in ledger.active() if r.provider == "local" and (
        not expired_only or (r.ttl_expires_at is not None and r.ttl_expires_at <= now))]
    if not expired_only:
        local += _local_orphans(settings, ledger, {r.run_tag for r in local})
    # Your own boxes (no TTL, so not --expired): each engine the ledger holds is stopped and
    # proven, as `down TAG` does; no provider lists them (issue 38 item 7).
    boxes = [] if expired_only else [r for r in ledger.active() if r.provider == SSH_BOX]
    if not providers and not local and not boxes and not any(
            r.provider == "local" for r in ledger.active()):
        raise ConfigError("no cloud provider is configured",
                          hint="set " + " and/or ".join(cloud_key_envs()))
    return DownAllPlan(local + boxes, providers)


def down_clouds(settings: Settings, ledger: Ledger, providers: Mapping[str, Provider], *,
                expired_only: bool = False, policy: LifecyclePolicy | None = None,
                on_recovery: Callable[[str], None] | None = None,
                all_homes: bool = False,
                others: list[PodInfo] | None = None) -> list[TeardownOutcome]:
    """The cloud half of `down --all` / `--expired`: the ledger recovered against the accounts,
    then every tailpod-tagged pod (or every expired record) torn down and proven in one batch.

    `down --all` leaves other homes' pods (their tags carry another home id) alone unless
    `all_homes`, and lists them in `others`; `on_recovery` gets one line for each piece of ledger
    damage this run recovered from."""
    if not providers:
        return []
    for line in recover_ledger(settings, ledger, providers):
        if on_recovery is not None:
            on_recovery(line)

    def run_dir(tag: str) -> Path:
        return run_dir_for(settings, tag)

    if expired_only:
        return teardown_expired(providers, ledger, run_dir, policy=policy)
    return teardown_all(providers, ledger, run_dir, policy=policy,
                        extra_proofs_for=lambda rec: _tailnet_proof(settings, rec),
                        home=home_id(settings.state_dir, settings.home_id, create=False),
                        all_homes=all_homes, others=others)


def _local_orphans(settings: Settings, ledger: Ledger, held: set[str]) -> list[PodRecord]:
    """Run tags the local provider still runs (an engine, a lanes run's proxy or any of its lane
    engines) that no active ledger record holds: adopted so `down --all` stops and proves them.
    (Not marked "orphan-adopted": a local process never joins the tailnet.)"""
    out = []
    for info in local_provider.LocalProvider(settings.home).list_by_tag(None):
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
