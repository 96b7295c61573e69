"""Money-safe creation of remote pods: the ledger first, strays destroyed on any failure.

The rules, each learned from a public incident (e.g. dstackai/dstack #1551: an instance marked
terminated kept billing; skypilot-org/skypilot #4392 and #4431: leaks when create times out or
races the status update; uda-lab/yomotsusaka #124: three orphan RunPod pods after a client
time-out):
- intent is in the ledger before any provider call, and every provider id is written the moment
  an API answer names it, so a crash or Ctrl-C can never leave a pod nobody knows about;
- after any error, timeout or interrupt during create, the run tag is looked up at the provider
  and whatever carries it is destroyed (or stays in the ledger as still billing);
- every pod carries a TTL in the ledger (the spec's, provision/base.py PodSpec.ttl_at) that
  `status` flags and `down --expired` enforces.
Teardown and its proof are provision/teardown.py; status and ledger recovery provision/reconcile.py.
"""

from __future__ import annotations

import time
from typing import Any

from tailpod.config import Settings, ttl_deadline
from tailpod.errors import (
    AuthError,
    BillingNotProven,
    ConfigError,
    Interrupted,
    TailpodError,
)
from tailpod.ledger import Ledger, PodRecord, operation_stamp
from tailpod.provision import providers as providers_mod
from tailpod.provision.base import (
    PodInfo,
    PodSpec,
    PodState,
    Provider,
)
from tailpod.provision.providers import CLOUD_PROVIDERS, canonical_name
from tailpod.provision.teardown import (
    LifecyclePolicy,
    note_event,
    provider_ids_of,
    terminate_with_retries,
    wait_gone,
)
from tailpod.secrets import redact


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
    record.extra.spot = True if spec.spot else None
    record.extra.bid = spec.bid if spec.spot else None
    record.note("intent", gpus=list(spec.gpu_preference), max_price=spec.max_price,
                **({"spot": True, "bid": spec.bid} if spec.spot else {}))
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
        if remaining:
            # Exit 3, like every outcome where something may still bill (docs/exit-codes.md),
            # a Ctrl-C included: "may still bill" outranks "interrupted".
            cause = ("interrupted" if isinstance(exc, KeyboardInterrupt)
                     else redact(str(exc)) or exc.__class__.__name__)
            raise BillingNotProven(
                f"creating {spec.run_tag} failed ({cause}) "
                f"and resources may still bill: {', '.join(remaining)}",
                hint=f"run `tailpod down {spec.run_tag}`",
            ) from exc
        if isinstance(exc, KeyboardInterrupt):
            raise Interrupted(
                f"the create of {spec.run_tag} was swept: the provider lists nothing of it"
            ) from None
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
        if spec.spot:  # the bid really sent (the offer's lowest winning bid when none was given)
            rec.extra.bid = info.detail.get("bid", spec.bid)
        rec.updated_at = time.time()
        rec.note("created", pod_id=info.pod_id, gpu=info.gpu_type, price_per_hr=info.price_per_hr,
                 fallback_from=info.detail.get("fallback_from"))
    return info


def _sweep_failed_create(provider: Provider, ledger: Ledger, run_tag: str,
                         policy: LifecyclePolicy, exc: BaseException) -> list[str]:
    """Destroy whatever the failed create left; the ids that may still bill (empty = clean)."""
    record = ledger.get(run_tag)
    ids = set(provider_ids_of(record)) if record else set()
    listing_ok = True
    try:
        ids |= {p.pod_id for p in provider.list_by_tag(run_tag)}
    except TailpodError:
        listing_ok = False
    failed: list[str] = []
    for pod_id in sorted(ids):
        try:
            terminate_with_retries(provider, pod_id, policy)
        except TailpodError:
            failed.append(pod_id)
    gone, still = wait_gone(provider, run_tag, ids, policy, policy.sweep_timeout_s)
    remaining = sorted(set(failed) | set(still))
    # A rejected key or a refused configuration fails before any create call is sent; with no
    # provider id recorded either, nothing can exist even if the key cannot list.
    could_have_created = bool(ids) or not isinstance(exc, (AuthError, ConfigError))
    if not listing_ok and could_have_created:
        remaining.append(f"(the {provider.name} listing failed: strays cannot be ruled out)")
    reason = redact(str(exc)) or exc.__class__.__name__
    if gone and not remaining:
        ledger.update(run_tag, event="create-failed-clean", status="terminated", operation={})
        note_event(ledger, run_tag, "create-failed", reason=reason, destroyed=sorted(ids))
    else:
        ledger.update(run_tag, event="create-failed-strays", status="failed", operation={})
        note_event(ledger, run_tag, "create-failed", reason=reason, may_bill=remaining)
    return remaining


def up_remote(settings: Settings, ledger: Ledger, spec: PodSpec, *,
              policy: LifecyclePolicy | None = None, tailnet: dict[str, Any] | None = None,
              **options: Any) -> tuple[PodRecord, PodInfo]:
    """Rent one pod on `settings.provider` with the ledger, TTL and price cap rules applied.
    `tailnet` is in the record from its first write (the pod's device and minted key), so a
    crash during the create leaves a record whose `down` deletes the device."""
    name = canonical_name(settings.provider)
    if name not in CLOUD_PROVIDERS:
        raise ConfigError(f"{settings.provider!r} is not a cloud provider")
    if spec.max_price is None:
        spec.max_price = settings.max_price
    if settings.spot and not spec.spot:
        spec.spot, spec.bid = True, settings.bid
    if spec.ttl_at is None:  # a spec built without one (up_cloud's has it): the settings' TTL
        spec.ttl_at = ttl_deadline(settings.ttl_hours, time.time())
    provider = providers_mod.get_provider(name, settings, **options)
    record = PodRecord(run_tag=spec.run_tag, provider=name, tailnet=dict(tailnet or {}))
    info = create_pod_safely(provider, spec, ledger, record, policy=policy)
    return ledger.get(spec.run_tag) or record, info
