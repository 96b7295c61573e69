"""Volumes under the same money safety as pods: ledger first, provider truth always.

A volume is written to the ledger (`intent`) before the create call and named with its `tp-vol-`
name at the provider, so a crash anywhere leaves either a ledger record or a tagged volume that
`reconcile_volumes` finds. After a create error the provider is asked by name: a volume that
exists is recorded (it bills) and reported, never left unseen. A volume is storage kept on
purpose: `down --all` lists it with its monthly price and never deletes it; only `volume rm`, or
`down --volumes` for the volumes a run mounted, deletes, and then proves it gone.
"""

from __future__ import annotations

import re
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from tailpod.errors import BillingNotProven, ConfigError, ProviderError, TailpodError
from tailpod.ledger import RUN_TAG_PREFIX, Ledger, PodRecord, VolumeRecord
from tailpod.provision.base import DataCenterInfo, Provider, SupportsVolumes, VolumeInfo

VOLUME_PREFIX = RUN_TAG_PREFIX + "vol-"
NAME_RE = re.compile(r"^[a-z0-9][a-z0-9-]{0,39}$")
STOCKED = ("LOW", "MEDIUM", "HIGH")
# How long an `intent`/`creating` record the provider does not list is taken for a create still
# in flight (it may yet appear and bill) before it is settled as never created.
CREATE_GRACE_S = 120.0


def volume_tag(name: str) -> str:
    """The `tp-vol-` name a user's volume NAME carries at the provider and in the ledger."""
    raw = name[len(VOLUME_PREFIX):] if name.startswith(VOLUME_PREFIX) else name
    if not NAME_RE.match(raw):
        raise ConfigError(f"volume name {name!r}: use 1-40 lower-case letters, digits or '-'",
                          hint="e.g. tailpod volume create cache1 ...")
    return VOLUME_PREFIX + raw


def short_name(tag: str) -> str:
    return tag[len(VOLUME_PREFIX):] if tag.startswith(VOLUME_PREFIX) else tag


def require_volumes(provider_class: type[Provider], name: str) -> None:
    """Refuse a provider whose class lacks the volume capability: the one check and wording,
    asked by the CLI of the class before any key or host is read, and by `volume_capable`."""
    if not issubclass(provider_class, SupportsVolumes):
        raise ConfigError(f"the {name} provider has no volumes",
                          hint="docs/volumes.md lists the providers that have")


def volume_capable(provider: Provider) -> SupportsVolumes:
    require_volumes(type(provider), provider.name)
    assert isinstance(provider, SupportsVolumes)
    return provider


def _gpu_matches(pref: str, gpu_id: str, name: str) -> bool:
    """A blank preference names no GPU (a GPU the catalog gives no short name has name "")."""
    want = pref.strip().lower()
    return bool(want) and want in (gpu_id.lower(), name.lower())


@dataclass
class Placement:
    """Where a volume (and every pod that mounts it) lives, and which GPUs can run there."""

    data_center: str
    volume_type: str | None
    gpus: list[str]  # the preference list filtered to what the data center has, in order
    dropped: list[str] = field(default_factory=list)  # preferences the data center lacks
    space_gb: float | None = None  # the most a volume there may hold (a vast machine's room)
    gb_month: float | None = None  # $/GB/month there, where the place sets it (vast)
    place: str = "data center"  # the provider's word for it (SupportsVolumes.volume_place)

    def shrink_note(self) -> str | None:
        if not self.dropped:
            return None
        prefix = "" if self.place == "data center" else f"{self.place} "
        return (f"{prefix}{self.data_center} has none of {', '.join(self.dropped)}: the GPU list shrinks "
                f"to {', '.join(self.gpus)}")


def filter_gpus(dc: DataCenterInfo, gpu_preference: list[str]) -> tuple[list[str], list[str]]:
    """(kept, dropped): each preference the data center stocks (its id), in order."""
    kept: list[str] = []
    dropped: list[str] = []
    for pref in gpu_preference:
        hit = next((gid for gid in dc.gpus if _gpu_matches(pref, gid, dc.gpu_names.get(gid, ""))
                    and dc.gpus[gid] in STOCKED), None)
        if hit is None:
            dropped.append(pref)
        elif hit not in kept:
            kept.append(hit)
    return kept, dropped


def choose_data_center(provider: SupportsVolumes, *, data_center: str | None,
                       gpu_preference: list[str], volume_type: str | None,
                       size_gb: int | None = None) -> Placement:
    """The data center for a new volume: the one named (checked), else the first that offers
    the tier, room for `size_gb` where the place states its room (a vast machine), and the
    earliest GPU of the preference list. Refuses before anything is created."""
    if volume_type is not None and volume_type not in provider.volume_types:
        raise ConfigError(f"volume type {volume_type!r}: one of "
                          f"{', '.join(provider.volume_types)}; nothing was created")
    dcs = provider.data_centers()
    with_volumes = [dc for dc in dcs if dc.volume_types
                    and (volume_type is None or volume_type in dc.volume_types)]
    if data_center:
        dc = next((d for d in dcs if d.dc_id.lower() == data_center.lower()), None)
        if dc is None:
            raise ConfigError(f"unknown {provider.volume_place} {data_center!r}; nothing was "
                              "created", hint=f"{provider.volume_place}s with volumes: "
                              + ", ".join(d.dc_id for d in with_volumes))
        if dc not in with_volumes:
            raise ConfigError(f"{dc.dc_id} offers no {volume_type or 'network'} volumes; nothing "
                              "was created", hint="data centers with volumes: "
                              + ", ".join(d.dc_id for d in with_volumes))
        kept, dropped = filter_gpus(dc, gpu_preference)
        if gpu_preference and not kept:
            raise ConfigError(f"{provider.volume_place} {dc.dc_id} has none of the GPUs "
                              f"{', '.join(gpu_preference)} in stock: a volume there could not "
                              "serve them; nothing was created")
        return Placement(dc.dc_id, volume_type, kept, dropped, dc.volume_space_gb,
                         dc.volume_gb_month, provider.volume_place)
    if not gpu_preference:
        raise ConfigError("name a data center (--datacenter) or the GPUs the volume is for "
                          "(--gpu, repeatable); nothing was created")
    best: tuple[int, DataCenterInfo, list[str], list[str]] | None = None
    for dc in with_volumes:
        if size_gb is not None and dc.volume_space_gb is not None \
                and size_gb > dc.volume_space_gb:
            continue
        kept, dropped = filter_gpus(dc, gpu_preference)
        if not kept:
            continue
        rank = min(i for i, p in enumerate(gpu_preference)
                   if any(_gpu_matches(p, k, dc.gpu_names.get(k, "")) for k in kept))
        if best is None or rank < best[0] or (rank == best[0] and len(kept) > len(best[2])):
            best = (rank, dc, kept, dropped)
    if best is None:
        raise ConfigError(f"no data center offers volumes and any of {', '.join(gpu_preference)} "
                          "in stock; nothing was created",
                          hint="add GPU types or name a data center with --datacenter")
    return Placement(best[1].dc_id, volume_type, best[2], best[3], best[1].volume_space_gb,
                     best[1].volume_gb_month, provider.volume_place)


def _find_by_name(provider: SupportsVolumes, tag: str) -> list[VolumeInfo]:
    return [v for v in provider.volume_list() if v.name == tag]


def create_volume_safely(provider: Provider, ledger: Ledger, name: str, size_gb: int,
                         placement: Placement) -> VolumeRecord:
    """Ledger first, then the create; after any error the provider is asked by name."""
    vp = volume_capable(provider)
    tag = volume_tag(name)
    low, high = vp.volume_size_gb
    if not low <= size_gb <= high:
        raise ConfigError(f"--size-gb {size_gb}: a {provider.name} volume is {low}-{high} GB; "
                          "nothing was created")
    if placement.space_gb is not None and size_gb > placement.space_gb:
        raise ConfigError(f"--size-gb {size_gb}: {placement.data_center} has room for "
                          f"{placement.space_gb:g} GB; nothing was created")
    with ledger.volume_transaction() as volumes:
        old = volumes.get(tag)
        if old is not None and old.active:
            raise ConfigError(f"volume {short_name(tag)} is already in the ledger ({old.status})",
                              hint=f"tailpod volume ls, or tailpod volume rm {short_name(tag)}")
        price = vp.volume_price_per_month(size_gb, placement.volume_type)
        if price is None and placement.gb_month is not None:
            price = round(size_gb * placement.gb_month, 4)
        record = VolumeRecord(name=tag, provider=provider.name, size_gb=size_gb,
                              data_center=placement.data_center,
                              volume_type=placement.volume_type, price_per_month=price)
        record.note("intent")
        volumes[tag] = record
    _set(ledger, tag, "creating", "creating")
    try:
        info = vp.volume_create(tag, size_gb, placement.data_center, placement.volume_type)
    except BaseException as exc:
        try:
            found = _find_by_name(vp, tag)
        except TailpodError:
            _set(ledger, tag, "failed", "create-error-unchecked", error=exc.__class__.__name__)
            raise
        if found:
            _adopt(ledger, tag, found[0], "create-error-but-exists")
            if isinstance(exc, TailpodError):
                raise ProviderError(
                    f"{provider.name} answered the create of volume {short_name(tag)} with an "
                    f"error, but it exists ({found[0].volume_id}) and bills: it is in the ledger",
                    hint=f"tailpod volume rm {short_name(tag)} to delete it") from None
            raise
        _set(ledger, tag, "deleted", "create-failed-clean", error=exc.__class__.__name__)
        raise
    return _adopt(ledger, tag, info, "created")


def _set(ledger: Ledger, tag: str, status: str, event: str, **data: Any) -> VolumeRecord:
    with ledger.volume_transaction() as volumes:
        record = volumes[tag]
        record.status = status
        record.updated_at = time.time()
        record.note(event, **data)
        return record


def _adopt(ledger: Ledger, tag: str, info: VolumeInfo, event: str,
           provider: str | None = None) -> VolumeRecord:
    with ledger.volume_transaction() as volumes:
        record = volumes.get(tag)
        if record is None:
            record = VolumeRecord(name=tag, provider=provider or "unknown", size_gb=info.size_gb,
                                  data_center=info.data_center)
            volumes[tag] = record
        record.status = "kept"
        record.volume_id = info.volume_id
        record.size_gb = info.size_gb
        record.data_center = info.data_center
        record.volume_type = info.volume_type
        record.price_per_month = info.price_per_month
        record.updated_at = time.time()
        record.note(event, volume_id=info.volume_id)
        return record


def note_use(ledger: Ledger, tag: str, run_tag: str) -> None:
    with ledger.volume_transaction() as volumes:
        record = volumes.get(tag)
        if record is not None and run_tag not in record.used_by:
            record.used_by.append(run_tag)
            record.note("mounted", run_tag=run_tag)


# -- the provider's truth, joined with the ledger -------------------------------------------------
@dataclass
class VolumeRow:
    name: str
    provider: str
    state: str  # kept | orphan (tagged, not in the ledger) | missing (ledger only) | unknown
    size_gb: int | None
    data_center: str | None
    volume_type: str | None
    price_per_month: float | None
    volume_id: str | None
    used_by: list[str] = field(default_factory=list)
    # kept from a `volume create` that was interrupted after the provider made the volume
    # (adopted from the listing): asked for, so kept, but never confirmed by its create
    create_interrupted: bool = False

    @property
    def on_purpose(self) -> bool:
        return self.state == "kept"

    def line(self) -> str:
        price = (f"${self.price_per_month:.2f}/month" if self.price_per_month is not None
                 else "price unknown")
        where = f"{self.provider} {self.data_center or '?'}"
        if self.state == "kept" and self.create_interrupted:
            return (f"kept, though its create was interrupted: {self.size_gb} GB at {price} — "
                    f"volume {short_name(self.name)} ({where}, {self.volume_id}); it bills until "
                    f"deleted with: tailpod volume rm {short_name(self.name)}")
        if self.state == "kept":
            return (f"kept on purpose: {self.size_gb} GB at {price} — volume "
                    f"{short_name(self.name)} ({where}, {self.volume_id}); delete with: "
                    f"tailpod volume rm {short_name(self.name)}")
        if self.state == "orphan":
            return (f"billing by mistake? {self.size_gb} GB at {price} — {self.name} ({where}, "
                    f"{self.volume_id}) carries a tailpod name but is not in the ledger; delete "
                    f"with: tailpod volume rm {short_name(self.name)} --provider {self.provider}")
        if self.state == "creating":
            return (f"creating: volume {short_name(self.name)} ({where}) — a create in progress "
                    "or interrupted moments ago; it may bill: tailpod volume ls again")
        return (f"{self.state}: volume {short_name(self.name)} ({where}) — the provider could "
                "not be asked; it may bill")

    def to_json(self) -> dict[str, Any]:
        return {"name": short_name(self.name), "tag": self.name, "provider": self.provider,
                "state": self.state, "size_gb": self.size_gb, "data_center": self.data_center,
                "type": self.volume_type, "price_per_month": self.price_per_month,
                "volume_id": self.volume_id, "used_by": self.used_by,
                "on_purpose": self.on_purpose, "create_interrupted": self.create_interrupted}


@dataclass
class VolumeReport:
    rows: list[VolumeRow]
    errors: dict[str, str] = field(default_factory=dict)
    # deletes asked for (`down --volumes`) that failed: each volume still bills (exit 3)
    delete_failed: list[VolumeStillBills] = field(default_factory=list)

    @property
    def kept(self) -> list[VolumeRow]:
        return [r for r in self.rows if r.on_purpose]

    @property
    def by_mistake(self) -> list[VolumeRow]:
        return [r for r in self.rows if not r.on_purpose]

    def monthly(self) -> float:
        return round(sum(r.price_per_month or 0.0 for r in self.rows), 4)

    def to_json(self) -> dict[str, Any]:
        return {"kept_on_purpose": [r.to_json() for r in self.kept],
                "billing_by_mistake": [r.to_json() for r in self.by_mistake],
                "lines": [r.line() for r in self.rows],
                "usd_per_month": self.monthly(), "errors": dict(self.errors),
                "delete_failed": [f.failure for f in self.delete_failed]}


# The ledger event of a record still `intent`/`creating` whose volume the provider lists: its
# create was interrupted after the provider made it (adversary #17), and its rows say so.
CREATE_INTERRUPTED_FOUND = "create-interrupted-found"


def reconcile_volumes(providers: Mapping[str, Provider], ledger: Ledger) -> VolumeReport:
    """Every volume that may bill: the ledger's, and every `tp-vol-` one each provider lists.

    Settles the ledger from the listing (a late create is adopted as kept; a record the provider
    no longer has is marked deleted); deletes nothing."""
    rows: list[VolumeRow] = []
    errors: dict[str, str] = {}
    records = {v.name: v for v in ledger.volumes()}
    asked: set[str] = set()
    for pname, provider in providers.items():
        if not isinstance(provider, SupportsVolumes):
            continue
        try:
            listed = [v for v in provider.volume_list() if v.name.startswith(VOLUME_PREFIX)]
        except TailpodError as exc:
            errors[pname] = exc.message
            continue
        asked.add(pname)
        for info in listed:
            record = records.get(info.name)
            if record is not None and record.provider == pname:
                if record.status in ("intent", "creating"):
                    record = _adopt(ledger, info.name, info, CREATE_INTERRUPTED_FOUND)
                elif record.status != "kept" or record.volume_id != info.volume_id:
                    record = _adopt(ledger, info.name, info, "found-at-provider")
                interrupted = any(e.get("event") == CREATE_INTERRUPTED_FOUND
                                  for e in record.events)
                rows.append(VolumeRow(info.name, pname, "kept", info.size_gb, info.data_center,
                                      info.volume_type, info.price_per_month, info.volume_id,
                                      list(record.used_by), interrupted))
            else:
                rows.append(VolumeRow(info.name, pname, "orphan", info.size_gb, info.data_center,
                                      info.volume_type, info.price_per_month, info.volume_id))
        names = {v.name for v in listed}
        for record in records.values():
            if record.provider != pname or not record.active or record.name in names:
                continue
            if record.status in ("intent", "creating") and \
                    time.time() - record.updated_at < CREATE_GRACE_S:
                # a create may be in flight in another process: not settled yet, may bill
                rows.append(VolumeRow(record.name, pname, "creating", record.size_gb,
                                      record.data_center, record.volume_type,
                                      record.price_per_month, record.volume_id))
                continue
            _set(ledger, record.name, "deleted", "not-listed-by-provider")
    for record in records.values():
        if record.active and record.provider not in asked:
            rows.append(VolumeRow(record.name, record.provider, "unknown", record.size_gb,
                                  record.data_center, record.volume_type, record.price_per_month,
                                  record.volume_id, list(record.used_by)))
    return VolumeReport(rows, errors)


class VolumeStillBills(BillingNotProven):
    """A volume's delete failed or could not be proven: it may still bill (exit 3). `failure`
    is what billing-proof.json keeps of it."""

    def __init__(self, message: str, hint: str, failure: dict[str, Any]) -> None:
        super().__init__(message, hint=hint)
        self.failure = failure


def mounting_pods(ledger: Ledger, record: VolumeRecord | None) -> list[PodRecord]:
    """The pods the ledger holds as active among the runs that mounted the volume."""
    if record is None:
        return []
    return [r for r in ledger.active() if r.run_tag in record.used_by]


def _still_bills(provider: Provider, ledger: Ledger, tag: str, targets: list[str],
                 what: str) -> VolumeStillBills:
    """The words for a volume that may still bill: what failed, the pods the ledger knows mount
    it, and how to delete it by hand (the route with the key as `$KEY_ENV`)."""
    record = ledger.volume(tag)
    if record is not None and record.status == "deleting":
        _set(ledger, tag, "kept", "delete-failed", error=what)  # it is still there: it bills
    pods = mounting_pods(ledger, record)
    mounts = [f"pod {r.pod_id or '(id unknown)'} (run {r.run_tag})" for r in pods]
    name = short_name(tag)
    ids = ", ".join(targets) or "id unknown"
    message = (f"volume {name} ({provider.name}, {ids}) still bills: {what}"
               + (f"; mounted by {', '.join(mounts)}" if mounts else ""))
    steps = []
    if pods:
        steps.append("end the pod first: " + "; ".join(f"tailpod down {r.run_tag}" for r in pods))
    steps.append(f"{'then' if pods else 'retry'}: tailpod volume rm {name}")
    by_hand = [c for c in (volume_capable(provider).volume_delete_by_hand(v) for v in targets)
               if c]
    if by_hand:
        steps.append("or by hand: " + "; ".join(by_hand))
    failure = {"volume": name, "provider": provider.name, "volume_ids": targets,
               "error": what, "mounted_by": mounts, "proven": False, "at": time.time()}
    return VolumeStillBills(message, "; ".join(steps), failure)


def delete_volume_proven(provider: Provider, ledger: Ledger, name: str,
                         *, wait_s: float = 10.0) -> dict[str, Any]:
    """Delete a volume and prove it gone: a direct look-up answers 404 and the listing no longer
    carries its name. Returns the proof (what was asked, what it answered). A delete refused
    (a 5xx, a mounted volume) or not proven raises VolumeStillBills (exit 3)."""
    vp = volume_capable(provider)
    tag = volume_tag(name)
    record = ledger.volume(tag)
    try:
        targets = [v.volume_id for v in _find_by_name(vp, tag)]
    except TailpodError as exc:
        if record is None or not record.active:
            raise
        raise _still_bills(provider, ledger, tag, [record.volume_id] if record.volume_id
                           else [], f"{exc.message}; nothing was deleted") from None
    if record is not None and record.volume_id and record.volume_id not in targets:
        targets.append(record.volume_id)
    if record is None and not targets:
        raise ConfigError(f"no volume {short_name(tag)} in the ledger or at {provider.name}")
    if record is not None:
        _set(ledger, tag, "deleting", "deleting")
    try:
        for volume_id in targets:
            vp.volume_delete(volume_id)
        deadline = time.monotonic() + wait_s
        while True:
            direct = {vid: vp.volume_get(vid) is None for vid in targets}
            listed = _find_by_name(vp, tag)
            if all(direct.values()) and not listed:
                break
            if time.monotonic() > deadline:
                raise _still_bills(provider, ledger, tag, targets,
                                   f"{provider.name} still lists it {wait_s:g} s after the delete")
            time.sleep(0.2)
    except VolumeStillBills:
        raise
    except TailpodError as exc:
        raise _still_bills(provider, ledger, tag, targets, exc.message) from None
    billed = {vid: getattr(vp, "volume_billed", lambda _v: None)(vid) for vid in targets}
    proof = {"volume": short_name(tag), "provider": provider.name, "volume_ids": targets,
             "direct_lookup_gone": direct, "listed_by_name": 0, "billed_usd": billed,
             "proven": True, "at": time.time()}
    if record is not None:
        with ledger.volume_transaction() as volumes:
            volumes[tag].status = "deleted"
            volumes[tag].updated_at = time.time()
            volumes[tag].note("deleted-proven", volume_ids=targets)
    return proof


# -- `up --volume`: placement, mount, caches ---------------------------------------------------
# Where each engine keeps what it downloads or compiles, as the environment variable it reads:
# HF_HOME (huggingface_hub: hub/ under it), VLLM_CACHE_ROOT (vLLM: torch_compile_cache/ and more,
# vllm/envs.py), TRITON_CACHE_DIR (Triton kernels), TORCHINDUCTOR_CACHE_DIR (torch.compile's
# Inductor), FLASHINFER_WORKSPACE_BASE (FlashInfer's JIT cache [unverified name]),
# SGLANG_CACHE_DIR [unverified name]. The weights are shared by every run (the Hub cache is
# keyed by revision already); every compile cache lives under a key of engine + checkpoint
# revision + argv, so a different one never reuses a stale cache.
WEIGHTS_ENV = ("HF_HOME",)
COMPILE_ENV = {"VLLM_CACHE_ROOT": "vllm", "TRITON_CACHE_DIR": "triton",
               "TORCHINDUCTOR_CACHE_DIR": "inductor", "FLASHINFER_WORKSPACE_BASE": "flashinfer",
               "SGLANG_CACHE_DIR": "sglang"}
CACHE_ENV_NAMES = (*WEIGHTS_ENV, *COMPILE_ENV)


def compile_cache_key(engine: str, image: str, model: str, revision: str | None,
                      argv: list[str] | tuple[str, ...]) -> str:
    """16 hex digits over what makes a compiled artefact valid: the engine and its image (its
    version), the checkpoint and its revision, and the engine's arguments."""
    import hashlib
    import json

    blob = json.dumps({"engine": engine, "image": image, "model": model, "revision": revision,
                       "argv": list(argv)}, sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def cache_env(mount_path: str, key: str) -> dict[str, str]:
    root = mount_path.rstrip("/") + "/tailpod"
    env = {"HF_HOME": f"{root}/hf"}
    env.update({name: f"{root}/compile/{key}/{sub}" for name, sub in COMPILE_ENV.items()})
    return env


@dataclass
class VolumeMount:
    """What `up --volume` changes in the pod spec."""

    tag: str
    volume_id: str
    data_center: str
    mount_path: str
    gpus: list[str]
    dropped: list[str]
    size_gb: int
    price_per_month: float | None
    place: str = "data center"  # the provider's word for where it lives (a vast machine)

    def to_json(self) -> dict[str, Any]:
        return {"name": short_name(self.tag), "tag": self.tag, "volume_id": self.volume_id,
                "data_center": self.data_center, "mount_path": self.mount_path,
                "gpus": self.gpus, "dropped": self.dropped, "size_gb": self.size_gb,
                "price_per_month": self.price_per_month}


def prepare_mount(provider: Provider, ledger: Ledger, name: str,
                  gpu_preference: list[str]) -> VolumeMount:
    """Check, before anything is rented, that the volume exists at the provider and that its
    data center has a GPU of the list; the list filtered to that data center."""
    vp = volume_capable(provider)
    tag = volume_tag(name)
    record = ledger.volume(tag)
    if record is None or not record.active or not record.volume_id:
        raise ConfigError(f"no volume {short_name(tag)} in the ledger",
                          hint="tailpod volume ls; tailpod volume create NAME ...")
    if record.provider != provider.name:
        raise ConfigError(f"volume {short_name(tag)} is on {record.provider}, not "
                          f"{provider.name}; nothing was rented")
    info = vp.volume_get(record.volume_id)
    if info is None:
        raise ConfigError(f"{provider.name} no longer has volume {short_name(tag)} "
                          f"({record.volume_id}); nothing was rented",
                          hint="tailpod volume ls settles the ledger")
    dc = next((d for d in vp.data_centers() if d.dc_id == info.data_center), None)
    if dc is None:
        raise ConfigError(f"{provider.name} does not list data center {info.data_center} of "
                          f"volume {short_name(tag)}; nothing was rented")
    kept, dropped = filter_gpus(dc, gpu_preference)
    if not kept:
        raise ConfigError(f"volume {short_name(tag)} is in {vp.volume_place} {dc.dc_id}, which "
                          f"has none of {', '.join(gpu_preference)} in stock; nothing was rented",
                          hint="add a GPU that data center has, or make a volume elsewhere")
    return VolumeMount(tag, info.volume_id, dc.dc_id, vp.volume_mount_path, kept, dropped,
                       info.size_gb, info.price_per_month, vp.volume_place)


# -- what the cold start cost ------------------------------------------------------------------
def to_first_token(cold: dict[str, Any], rows: list[dict[str, Any]],
                   received_at: float) -> dict[str, Any] | None:
    """`cold` (cold_start's record) completed with the first measured token: billed seconds and
    dollars from the create call to it. The rows' times are the pod's clock and `create_at` is
    this machine's, so the first token is placed on this machine's clock as the moment the
    cell's rows arrived (`received_at`) less the time the pod spent after that token (its last
    request's end less its first token). That is later than the truth by the rows' transfer,
    so the bill it gives is never less than the real one. None when the rows hold no token."""
    def sent(r: dict[str, Any]) -> Any:  # a request row's send time: t_start (both loops)
        return r.get("t_start", r.get("sent_at"))

    done = [r for r in rows if r.get("kind") == "request" and r.get("ok")
            and isinstance(sent(r), (int, float)) and isinstance(r.get("ttft_s"), (int, float))]
    start = cold.get("create_at")
    if not done or not isinstance(start, (int, float)):
        return None
    first = min(float(sent(r)) + float(r["ttft_s"]) for r in done)
    end = max(float(sent(r)) + float(r.get("e2e_s") or r["ttft_s"]) for r in done)
    at = received_at - max(0.0, end - first)
    billed = max(0.0, at - float(start))
    price = cold.get("price_per_hr")
    return {**cold, "first_token_at": round(at, 3), "billed_s_to_first_token": round(billed, 3),
            "usd_to_first_token": (round(billed * float(price) / 3600.0, 6)
                                   if isinstance(price, (int, float)) else None)}


def cold_start(events: list[dict[str, Any]], price_per_hr: float | None, ready_at: float,
               facts: dict[str, Any], volume: dict[str, Any] | None) -> dict[str, Any]:
    """Billed seconds and dollars from the create call (the ledger's `creating` event: the pod
    may bill from then) to the engine serving, with the engine's own startup phases and whether
    the compile cache was hit. The first measured token comes later, in the sweep: its row
    adds what the first request cost."""
    start = next((float(e["t"]) for e in events if e.get("event") == "creating"
                  and isinstance(e.get("t"), (int, float))), None)
    billed_s = max(0.0, ready_at - start) if start is not None else None
    usd = (round(billed_s * price_per_hr / 3600.0, 6)
           if billed_s is not None and price_per_hr is not None else None)
    phases = dict(facts.get("startup_phases") or {})
    return {"create_at": start, "ready_at": ready_at,
            "billed_s_to_ready": round(billed_s, 3) if billed_s is not None else None,
            "usd_to_ready": usd, "price_per_hr": price_per_hr, "phases": phases,
            "compile_cache_hit": phases.get("compile_cache_hit"),
            "compile_cache_source": phases.get("compile_cache_source"),
            "volume": (volume or {}).get("name")}
