"""What the providers say against what the ledger holds: `status` (orphans, ghosts, expired TTLs)
and the recovery of a damaged ledger, where the providers are the truth. Creation is
provision/create.py; teardown and its proof provision/teardown.py.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from typing import Any

from tailpod.config import Settings
from tailpod.errors import (
    TailpodError,
)
from tailpod.ledger import (
    Ledger,
    LifeState,
    PodRecord,
    another_homes,
    home_id,
    interrupted_step,
    matrix_settle,
    matrix_status,
    tag_home,
)
from tailpod.provision.base import (
    PodInfo,
    PodState,
    Provider,
)


def now_iso(t: float | None = None) -> str:
    return datetime.fromtimestamp(t if t is not None else time.time(), timezone.utc).isoformat(
        timespec="seconds")


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
        return {"checked_at": now_iso(self.checked_at), "rows": [asdict(r) for r in self.rows],
                "errors": list(self.errors), "ledger_notices": list(self.ledger_notices),
                # A provider that did not answer makes the rate unknown, never 0.
                "rate_per_hr_now": None if self.errors else round(
                    sum(r.price_per_hr or 0.0 for r in self.rows
                        if r.provider_state == "running" or preempted_flag(r.flags)), 6),
                "rate_unknown_reason": ("could not ask " + "; ".join(self.errors))
                if self.errors else None}


def preempted_flag(flags: Iterable[str]) -> str | None:
    """The `preempted …` flag among a row's flags, if any."""
    return next((f for f in flags if f.startswith("preempted")), None)


def note_preemption(ledger: Ledger, record: PodRecord, info: PodInfo, now: float
                    ) -> tuple[str, float | None, float]:
    """The flag for a spot pod its provider preempted (PodInfo.detail["preempted"]), the rate it
    bills now (its storage) and when it was seen. vast states no time for a lost bid, so the time
    is when tailpod first saw it, written to the ledger once (event `preempted`) so every later
    status agrees."""
    seen = next((e.get("t") for e in record.events if e.get("event") == "preempted"), None)
    if not isinstance(seen, (int, float)):
        seen = now
        with contextlib.suppress(TailpodError, OSError):  # status reports; the flag says it
            written = ledger.update(record.run_tag, event="preempted")
            # the time the ledger keeps, so this status and every later one say the same second
            seen = next((e["t"] for e in reversed(written.events)
                         if e.get("event") == "preempted"), now)
    storage = info.detail.get("storage_per_hr")
    rate = float(storage) if isinstance(storage, (int, float)) else None
    bills = (f"storage still bills ${rate:.4f}/h" if rate is not None
             else "its storage still bills (rate unknown)")
    when = datetime.fromtimestamp(float(seen), timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")
    return f"preempted at {when} (first seen), {bills}", rate, float(seen)


def spot_preemption(settings: Settings, ledger: Ledger, record: PodRecord) -> str | None:
    """note_preemption's flag for `record` when it is a spot pod its provider says preempted
    ("preempted at … (first seen), storage still bills $…/h"); None for any other pod, or when
    the provider cannot be asked (the caller's own error then stands)."""
    from tailpod.provision.providers import get_provider

    if not record.extra.spot or not record.pod_id:
        return None
    try:
        info = get_provider(record.provider, settings).get(record.pod_id)
    except TailpodError:
        return None
    if info is None or not info.detail.get("preempted"):
        return None
    return note_preemption(ledger, record, info, time.time())[0]


def gone_reason(record: PodRecord, now: float) -> str:
    """Why a pod the ledger holds as live is no longer at its provider, as far as tailpod knows:
    its dead-man switch (armed by `up`) ends it at its TTL or after the heartbeat timeout; a pod
    with no switch was deleted by hand or by the provider. A pod in `terminating` was ended by
    tailpod's own teardown, whose proof did not finish (adversary-2026-12 #5: such a pod read
    "ended outside tailpod")."""
    if record.status == LifeState.TERMINATING:
        return (f"ended by tailpod's own teardown, whose proof did not finish: "
                f"`tailpod down {record.run_tag}` settles it")
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
              now: float | None = None, home: str | None = None) -> StatusReport:
    """Join the ledger with what each provider reports; flag orphans, ghosts and expired TTLs.

    A listed pod the ledger lacks whose tag carries another home's id than `home` is flagged
    as that home's, not as an orphan: on a shared account it is a colleague's run."""
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
        bills_now: float | None = None
        seen = t
        if info is not None and info.detail.get("preempted"):
            flag, bills_now, seen = note_preemption(ledger, rec, info, t)
            flags.append(flag)
        if rec.ttl_expires_at is not None and rec.ttl_expires_at <= t:
            flags.append("expired")
        step = interrupted_step(rec)
        if step:
            flags.append(f"interrupted during {step}")
        matrix = matrix_status(rec)
        if matrix is not None and matrix["interrupted"]:
            flags.append(f"interrupted matrix {matrix['id']}")
        owner = rec.operation or (rec.extra.matrix or {}).get("owner") if matrix else rec.operation
        price = (info.price_per_hr if info and info.price_per_hr is not None
                 else rec.price_per_hr)
        spend = round(price * max(0.0, t - rec.created_at) / 3600.0, 4) \
            if price is not None else None
        if bills_now is not None:  # a preempted spot pod bills its storage alone
            # Its rate until tailpod saw the preemption, its storage since: an upper bound, as
            # the bid was lost at some moment before it was seen.
            ran = rec.price_per_hr if rec.price_per_hr is not None else price
            spend = round(((ran or 0.0) * max(0.0, seen - rec.created_at)
                           + bills_now * max(0.0, t - seen)) / 3600.0, 4)
            price = bills_now
        uptime = max(0.0, t - rec.created_at)
        rows.append(StatusRow(
            run_tag=rec.run_tag, provider=rec.provider, pod_id=rec.pod_id or
            (info.pod_id if info else None), ledger_status=rec.status, provider_state=state,
            gpu=(info.gpu_type if info and info.gpu_type else rec.gpu),
            gpu_count=(info.gpu_count if info and info.gpu_count else rec.gpu_count),
            price_per_hr=price, uptime_s=uptime, spend_usd=spend,
            ttl_expires_at=rec.ttl_expires_at, fallback_from=rec.extra.fallback_from,
            flags=flags, settle=matrix_settle(rec, matrix["id"])
            if matrix is not None and matrix["interrupted"] else f"tailpod down {rec.run_tag}"
            if step or "expired" in flags or "ghost" in flags or preempted_flag(flags) else None,
            owner=f"pid {owner.get('pid')} on {owner.get('host')}" if owner else None,
        ))
    for name, pods in listed.items():
        for info in pods or []:
            known = by_tag.get(info.run_tag or "")
            if known is not None and known.active:
                continue
            theirs = known is None and another_homes(info.run_tag, home)
            flags = ([f"other home ({tag_home(info.run_tag)}): not this home's run"] if theirs
                     else ["orphan"] if known is None else ["orphan", "ledger says terminated"])
            created = info.detail.get("created_at")
            up: float | None = t - float(created) if isinstance(created, (int, float)) else None
            rows.append(StatusRow(
                run_tag=info.run_tag or "?", provider=name, pod_id=info.pod_id,
                ledger_status=known.status if known else None, provider_state=info.state.value,
                gpu=info.gpu_type, gpu_count=info.gpu_count, price_per_hr=info.price_per_hr,
                uptime_s=up,
                spend_usd=round(info.price_per_hr * up / 3600.0, 4)
                if info.price_per_hr is not None and up is not None else None,
                ttl_expires_at=None, flags=flags, settle=None if theirs
                else f"tailpod down {info.run_tag}" if info.run_tag else "tailpod down --all",
            ))
    return StatusReport(rows=rows, errors=errors, checked_at=t)


# -- recovery from a damaged ledger: the providers are the truth ----------------------------------
_LEDGER_STATUS = {PodState.RUNNING: "running", PodState.STOPPED: "stopped"}


def describe_recovery(notice: Mapping[str, Any]) -> str:
    """One line for a recovery notice the ledger keeps: what was damaged, kept, restored."""
    damaged = ", ".join(f"{name} ({why})" for name, why in notice.get("damaged", {}).items())
    kept = ", ".join(notice.get("set_aside", []))
    line = f"the ledger was damaged at {now_iso(notice.get('t'))}: {damaged}"
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


def listed_since(info: PodInfo, otherwise: float) -> float:
    """When a listed pod was created, where its adapter gives it as epoch seconds (vast.ai's
    `start_date`, RunPod's `createdAt` read by `runpod.provider.created_epoch`); `otherwise` when
    not. An adopted record's uptime and spend count from it, so a pod found after damage is not
    read as just started."""
    created = info.detail.get("created_at")
    return float(created) if isinstance(created, (int, float)) else otherwise


def adopt_from_providers(providers: Mapping[str, Provider], ledger: Ledger,
                         tailnet_lists: Callable[[str], bool] | None = None,
                         home: str | None = None) -> tuple[list[str], list[str]]:
    """Write a record for every tailpod-tagged pod a provider lists that the ledger lacks,
    but another home's (its tag carries a home id other than `home`).

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
            tag = info.run_tag
            if not tag or another_homes(tag, home):
                continue  # untagged: not tailpod's; another home's: its ledger holds it
            known = ledger.get(tag)
            if known is not None and known.active:
                continue
            rec = PodRecord(run_tag=tag, provider=name, pod_id=info.pod_id,
                            status=_LEDGER_STATUS.get(info.state, "creating"),
                            gpu=info.gpu_type, gpu_count=info.gpu_count or 1,
                            price_per_hr=info.price_per_hr)
            rec.extra.provider_ids = [info.pod_id]
            rec.created_at = listed_since(info, rec.created_at)
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
        adopted, errors = adopt_from_providers(
            providers, ledger, _tailnet_lister(settings),
            home_id(settings.state_dir, settings.home_id, create=False))
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
    the configured providers list under it, adopted into the ledger; None when every provider
    answered and none lists it. A provider that could not be asked, with the tag found nowhere
    else, raises (naming each failure), never None."""
    providers = providers_for(settings, (), **options)
    failed: list[tuple[str, TailpodError]] = []
    for name, provider in providers.items():
        try:
            pods = provider.list_by_tag(run_tag)
        except TailpodError as exc:
            # One provider that cannot answer must neither hide the pod at another (whose billing
            # `down` can then stop) nor let "not found" be said: the tag may be where it failed.
            failed.append((name, exc))
            continue
        if pods:
            lister = _tailnet_lister(settings)
            rec = PodRecord(run_tag=run_tag, provider=name, status="terminating",
                            pod_id=pods[0].pod_id, gpu=pods[0].gpu_type,
                            price_per_hr=pods[0].price_per_hr,
                            tailnet={"enabled": True} if lister and lister(run_tag) else {})
            rec.extra.provider_ids = [p.pod_id for p in pods]
            rec.created_at = listed_since(pods[0], rec.created_at)
            rec.note("recovered-from-provider", pod_id=pods[0].pod_id)
            ledger.put(rec)
            return rec
    if failed:
        # The first failure's kind (a transient one exits 75, docs/exit-codes.md), every one named.
        raise type(failed[0][1])("could not ask " + "; ".join(f"{n}: {e}" for n, e in failed)
                                 + f", so whether {run_tag} is at a provider is unknown")
    return None


def providers_for(settings: Settings, names: Iterable[str], *, errors: list[str] | None = None,
                  **options: Any) -> dict[str, Provider]:
    """Every cloud with a key, and each of `names` (the ledger's) that is a cloud. With `errors`,
    a named cloud that cannot be made (its key not set) is left out and said there as
    "<name>: <why>", the form a failed listing takes; without, it raises."""
    from tailpod.provision.providers import CLOUD_PROVIDERS, get_provider, remote_providers

    out = remote_providers(settings, **options)
    for name in names:
        if name not in out and name in CLOUD_PROVIDERS:
            try:
                out[name] = get_provider(name, settings, **options)
            except TailpodError as exc:
                if errors is None:
                    raise
                errors.append(f"{name}: {exc}")
    return out


def status_remote(settings: Settings, ledger: Ledger, **options: Any) -> StatusReport:
    """Ledger joined with every configured cloud provider's listing (orphans, ghosts, TTLs)."""
    names = {r.provider for r in ledger.active()}
    providers: dict[str, Provider] = {}
    errors: list[str] = []
    try:
        providers = providers_for(settings, sorted(names), errors=errors, **options)
    except TailpodError as exc:
        errors.append(str(exc))
    notices = recover_ledger(settings, ledger, providers) if providers else [
        describe_recovery(n) for n in ledger.pending_recovery()]
    report = reconcile(providers, ledger,
                       home=home_id(settings.state_dir, settings.home_id, create=False))
    report.errors = errors + report.errors
    report.ledger_notices = notices
    report.rows = [r for r in report.rows if r.provider != "local"]  # the local CLI shows those
    return report
