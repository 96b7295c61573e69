"""The sandbox cloud's shared state: accounts, catalogs, pods, the meter and the fault plan.

Both emulators (RunPod, vast.ai) are thin HTTP front-ends over this object; it owns every state
change so the meter can never disagree with what the APIs report.
"""

from __future__ import annotations

import dataclasses
import secrets
import shutil
import threading
import time
from pathlib import Path
from typing import Any

from tailpod.sandbox.faults import FaultPlan
from tailpod.sandbox.meter import BillingMeter
from tailpod.sandbox.model import (
    HOURS_PER_MONTH,
    Account,
    RunPodGpuType,
    SandboxPod,
    VastOffer,
    default_runpod_catalog,
    default_vast_offers,
)
from tailpod.sandbox.podhost import PodHost, ProcessPodHost, container_argv

DEFAULT_RUNPOD_KEY = "rp_sandbox_key_0001"
# The sandbox's own figures for RunPod network volumes: standard is the documented $0.07/GB/month
# (runpod/docs storage/network-volumes.mdx); high-performance "varies by data center"
# (storage/high-performance-storage.mdx), so its figure here is the sandbox's.
RUNPOD_VOLUME_GB_MONTH = {"STANDARD": 0.07, "HIGH_PERFORMANCE": 0.14}


def default_runpod_data_centers() -> list[dict[str, Any]]:
    """Data centers shaped like v2 `DataCenter`: the volume tiers each offers and the GPU ids it
    has (None: every GPU of the catalog). Pods with no data center named land in the first one
    that has their GPU."""
    return [
        {"id": "SBX-LOCAL-1", "name": "Sandbox Local 1", "region": "NORTH_AMERICA",
         "networkVolumeTypes": ["STANDARD", "HIGH_PERFORMANCE"], "gpus": None},
        {"id": "EU-RO-1", "name": "Europe Romania 1", "region": "EUROPE",
         "networkVolumeTypes": ["STANDARD"],
         "gpus": ["NVIDIA GeForce RTX 4090", "NVIDIA A40", "NVIDIA RTX A6000"]},
        {"id": "US-CA-2", "name": "US California 2", "region": "NORTH_AMERICA",
         "networkVolumeTypes": [], "gpus": ["NVIDIA H100 80GB HBM3", "NVIDIA H200"]},
    ]


@dataclasses.dataclass
class SandboxVolume:
    """A network volume: a directory under the sandbox's workdir that every pod mounting it
    shares, on the meter from create to delete."""

    volume_id: str
    name: str
    account: str
    size_gb: int
    data_center: str
    volume_type: str
    host_dir: Path
    created_at: float = dataclasses.field(default_factory=time.time)
    deleted_at: float | None = None
    provider: str = "runpod"  # or "vast": a local volume tied to `machine_id`
    machine_id: int | None = None
    gb_month: float | None = None  # vast: the machine's storage_cost ($/GB/month)
    listed_until: float | None = None  # fault stale_volume_list: still listed after delete
    found_until: float | None = None  # fault stale_volume_get: still found by id after delete

    def rate(self) -> float:
        if self.gb_month is not None:  # vast: size x storage_cost over the sandbox's 720 h month
            return self.size_gb * self.gb_month / 720.0
        if self.volume_type == "STANDARD":  # $0.07/GB/month for the first TB, $0.05 beyond
            first = min(self.size_gb, 1024)
            monthly = first * 0.07 + (self.size_gb - first) * 0.05
        else:
            monthly = self.size_gb * RUNPOD_VOLUME_GB_MONTH[self.volume_type]
        return monthly / HOURS_PER_MONTH
DEFAULT_VAST_KEY = "vast_sandbox_key_0001"


class AuthFailure(Exception):
    def __init__(self, status: int) -> None:
        super().__init__(status)
        self.status = status


class SandboxCloud:
    def __init__(
        self,
        workdir: Path,
        *,
        start_delay_s: float = 0.3,
        pod_host: PodHost | None = None,
        run_commands: bool = True,
        provisioning_s: float | None = None,
        crash_error_after: int = 3,
    ) -> None:
        self.lock = threading.RLock()
        self.meter = BillingMeter()
        self.faults = FaultPlan()
        self.workdir = Path(workdir)
        self.start_delay_s = start_delay_s
        # RunPod's documented states (v2 PodStatus): PROVISIONING for `provisioning_s` (default
        # half the start delay), STARTING until the container is up, then RUNNING; ERROR once
        # the container has exited non-zero `crash_error_after` times.
        self.provisioning_s = start_delay_s / 2 if provisioning_s is None else provisioning_s
        self.crash_error_after = crash_error_after
        # Whether REST refuses the keys injected into pods (undocumented either way): the
        # dead-man switch must still terminate its pod through another route.
        self.refuse_pod_key_on_rest = False
        # Whether RunPod v2 `args` decodes the JSON start form `{"entrypoint", "cmd"}`
        # (undocumented either way): False shlex-splits it onto the image's ENTRYPOINT.
        self.runpod_json_start_form = True
        # RunPod `GET /v2/pods` answers in pages of this many pods (None: one answer, as v2 documents).
        self.runpod_list_page_size: int | None = None
        self.host: PodHost = pod_host or ProcessPodHost(self.workdir, run_commands=run_commands)
        self.accounts: dict[tuple[str, str], Account] = {}
        self.runpod_catalog: dict[str, RunPodGpuType] = {
            g.gpu_id: g for g in default_runpod_catalog()
        }
        self.vast_offers: dict[int, VastOffer] = {o.offer_id: o for o in default_vast_offers()}
        self.pods: dict[str, SandboxPod] = {}  # key "provider:id"
        self.runpod_data_centers: list[dict[str, Any]] = default_runpod_data_centers()
        self.volumes: dict[str, SandboxVolume] = {}  # RunPod network and vast local volumes
        self._next_vast_volume_id = 20118481
        # vast local volumes: whether a volume name must be "alphanumeric with underscores, max
        # 64" as the guide says (vast-ai/docs guides/instances/storage/volumes.mdx @ c624622)
        # or anything goes; whether the create answer names the volume (`volume_name`
        # "V.<id>", rent_volume.yaml) or says only `success`. Neither is settled by vast's text.
        self.vast_volume_names_strict = True
        self.vast_volume_answer_names_id = True
        self._timers: dict[str, threading.Timer] = {}
        self._next_vast_id = 31000001
        # (provider, pod-scoped key) -> pod id: the keys providers inject into their pods
        self.pod_keys: dict[tuple[str, str], str] = {}
        # RunPod retires GraphQL in early 2027: when set, POST /graphql answers 404 as a removed
        # route would, and only REST v2 is left (tailpod must still prove billing stopped).
        self.graphql_retired = False
        self.closed = False

    SETTINGS = ("refuse_pod_key_on_rest", "runpod_json_start_form", "graphql_retired",
                "meter_lag_s", "vast_volume_names_strict", "vast_volume_answer_names_id")

    @property
    def meter_lag_s(self) -> float:
        """How often the vendors' meters (RunPod billing history, vast `credit`) update: 0 = at
        once; neither vendor documents it."""
        return self.meter.lag_s

    @meter_lag_s.setter
    def meter_lag_s(self, value: float) -> None:
        self.meter.lag_s = float(value)

    def settings(self) -> dict[str, Any]:
        """The behaviours no vendor text settles, as the admin API shows and sets them."""
        return {name: getattr(self, name) for name in self.SETTINGS}

    def apply_settings(self, values: dict[str, Any]) -> dict[str, Any]:
        unknown = sorted(set(values) - set(self.SETTINGS))
        if unknown:
            raise ValueError(f"unknown setting(s) {', '.join(unknown)}; known: "
                             + ", ".join(self.SETTINGS))
        for name, value in values.items():
            if name == "meter_lag_s":
                if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
                    raise ValueError("meter_lag_s must be a number of seconds >= 0")
            elif not isinstance(value, bool):
                raise ValueError(f"{name} must be true or false")
            setattr(self, name, value)
        return self.settings()

    # -- accounts ---------------------------------------------------------------------------------
    def set_account(
        self, provider: str, key: str, balance: float = 100.0, restricted: bool = False,
        name: str | None = None,
    ) -> Account:
        if provider not in ("runpod", "vast"):
            raise ValueError("provider must be runpod or vast")
        if len(key) < 8:
            raise ValueError("sandbox API keys must be at least 8 characters")
        with self.lock:
            existing = self.accounts.get((provider, key))
            account = Account(
                provider, key, name or (existing.name if existing else f"{provider}-acct-"
                                        f"{len(self.accounts) + 1}"), balance, restricted
            )
            self.accounts[(provider, key)] = account
            return account

    def remove_account(self, provider: str, key: str) -> None:
        with self.lock:
            self.accounts.pop((provider, key), None)

    def authenticate(self, provider: str, key: str | None) -> Account:
        if not key:
            raise AuthFailure(401)
        with self.lock:
            account = self.accounts.get((provider, key))
            if account is None and (provider, key) in self.pod_keys:
                account = self._pod_scoped_view(provider, self.pod_keys[(provider, key)])
        if account is None:
            raise AuthFailure(401)
        if account.restricted:
            raise AuthFailure(403)
        return account

    def _pod_scoped_view(self, provider: str, pod_id: str) -> Account | None:
        """The owning account as a pod-scoped key sees it (caller holds the lock)."""
        pod = self.pods.get(f"{provider}:{pod_id}")
        if pod is None:
            return None
        owner = next((a for a in self.accounts.values()
                      if a.provider == provider and a.name == pod.account), None)
        return dataclasses.replace(owner, scope_pod=pod_id) if owner else None

    def issue_pod_key(self, pod: SandboxPod) -> str:
        """A key valid only for this pod, like the ones RunPod and vast inject into containers."""
        prefix = "rpa_pod_" if pod.provider == "runpod" else "vast_inst_"
        key = prefix + secrets.token_urlsafe(24)
        with self.lock:
            self.pod_keys[(pod.provider, key)] = pod.pod_id
        pod.meta["pod_key"] = key
        return key

    @staticmethod
    def scope_allows(account: Account, pod_id: str | None) -> bool:
        """A pod-scoped key may touch its own pod only, and nothing account-wide."""
        return account.scope_pod is None or (pod_id is not None and pod_id == account.scope_pod)

    def balance(self, account: Account) -> float:
        return account.balance - self.meter.accrued(provider=account.provider, account=account.name)

    def spend_rate(self, account: Account) -> float:
        return self.meter.spend_rate(account.provider, account.name)

    # -- pods -------------------------------------------------------------------------------------
    def new_vast_id(self) -> int:
        with self.lock:
            self._next_vast_id += 7
            return self._next_vast_id

    def add_pod(self, pod: SandboxPod) -> SandboxPod:
        """Register a new pod: billing starts now, the container comes up after the start delay."""
        held = self.faults.take("hold_create", pod.provider, "create")
        if held:
            self.faults.hold(held)
        slow = self.faults.peek("slow_start", pod.provider, "create")
        delay = slow.seconds if slow else self.start_delay_s
        dearer = self.faults.take("price_above_offer", pod.provider, "create")
        if dearer:
            pod.compute_rate = round(pod.compute_rate * dearer.factor, 6)
        now = time.time()
        pod.created_at = now
        pod.ready_at = now + delay
        pod.meta["provisioned_at"] = now + min(self.provisioning_s, delay)
        if self.faults.take("early_running", pod.provider, "create"):
            pod.meta["early_running"] = True
        if "pod_key" not in pod.meta:
            self.issue_pod_key(pod)
        with self.lock:
            pod.port_map = self.host.allocate_ports(pod)
            self.pods[pod.key] = pod
            if pod.provider == "runpod":
                self.meter.open(pod.provider, pod.pod_id, pod.name, pod.account,
                                pod.running_rate(), "gpu+disk")
            else:
                # vast bills storage from creation; the GPU only once the instance is running.
                self.meter.open(pod.provider, pod.pod_id, pod.name, pod.account,
                                pod.disk_rate(), "disk (loading)")
            timer = threading.Timer(delay, self._bring_up, args=(pod.key,))
            timer.daemon = True
            self._timers[pod.key] = timer
            timer.start()
        return pod

    # -- network volumes (RunPod) ----------------------------------------------------------------
    def data_center_gpus(self, dc: dict[str, Any]) -> list[str]:
        return list(self.runpod_catalog) if dc.get("gpus") is None else list(dc["gpus"])

    def create_volume(self, account: Account, name: str, size_gb: int, data_center: str,
                      volume_type: str) -> SandboxVolume:
        volume_id = secrets.token_hex(5)
        host_dir = self.workdir / "volumes" / volume_id
        host_dir.mkdir(parents=True, exist_ok=True)
        volume = SandboxVolume(volume_id, name, account.name, size_gb, data_center, volume_type,
                               host_dir)
        with self.lock:
            self.volumes[volume_id] = volume
            self.meter.open("runpod", volume_id, name, account.name, volume.rate(),
                            f"network volume {volume_type}")
        return volume

    def create_vast_volume(self, account: Account, name: str, size_gb: int, machine_id: int,
                           gb_month: float) -> SandboxVolume:
        with self.lock:
            volume_id = str(self._next_vast_volume_id)
            self._next_vast_volume_id += 1
        host_dir = self.workdir / "volumes" / f"vast-{volume_id}"
        host_dir.mkdir(parents=True, exist_ok=True)
        volume = SandboxVolume(volume_id, name, account.name, size_gb, str(machine_id), "local",
                               host_dir, provider="vast", machine_id=machine_id,
                               gb_month=gb_month)
        with self.lock:
            self.volumes[volume_id] = volume
            self.meter.open("vast", volume_id, name, account.name, volume.rate(),
                            "local volume")
        return volume

    def volumes_of(self, account: Account) -> list[SandboxVolume]:
        provider = "vast" if account.provider == "vast" else "runpod"
        with self.lock:
            return [v for v in self.volumes.values() if v.account == account.name
                    and v.deleted_at is None and v.provider == provider]

    def volumes_listed(self, account: Account) -> list[SandboxVolume]:
        """What the account's volume listing shows: its volumes, and deleted ones whose
        `stale_volume_list` lag has not run out (a direct look-up of those answers 404)."""
        now = time.time()
        with self.lock:
            lagging = [v for v in self.volumes.values() if v.account == account.name
                       and v.deleted_at is not None and (v.listed_until or 0.0) > now]
        return self.volumes_of(account) + lagging

    def volume_found(self, account: Account, volume_id: str) -> SandboxVolume | None:
        """What a direct look-up by id finds: a live volume, or a deleted one whose
        `stale_volume_get` lag has not run out."""
        now = time.time()
        with self.lock:
            return next((v for v in self.volumes.values() if v.account == account.name
                         and v.volume_id == volume_id and (v.deleted_at is None
                                                           or (v.found_until or 0.0) > now)),
                        None)

    def resize_volume(self, volume: SandboxVolume, size_gb: int) -> None:
        with self.lock:
            volume.size_gb = size_gb
            self.meter.set_rate("runpod", volume.volume_id, volume.rate(),
                                f"network volume {volume.volume_type}")

    def delete_volume(self, volume: SandboxVolume) -> None:
        stale = self.faults.take("stale_volume_list", volume.provider, "volume_delete")
        stale_get = self.faults.take("stale_volume_get", volume.provider, "volume_delete")
        with self.lock:
            volume.deleted_at = time.time()
            if stale:
                volume.listed_until = volume.deleted_at + stale.seconds
            if stale_get:
                volume.found_until = volume.deleted_at + stale_get.seconds
            self.meter.close(volume.provider, volume.volume_id)
        shutil.rmtree(volume.host_dir, ignore_errors=True)

    def volume_in_use(self, volume: SandboxVolume) -> bool:
        with self.lock:
            return any(p.status != "terminated" and p.meta.get("volume_id") == volume.volume_id
                       and p.provider == volume.provider for p in self.pods.values())

    def _mount_volume(self, pod: SandboxPod) -> None:
        """Stand in for the bind mount a container runtime would make: the pod's view of the
        mount path is its directory's `<path>` link to the volume's directory, and every env
        value under the mount path is rewritten to the host directory (a process pod shares the
        host's root, so an absolute /workspace would be the host's)."""
        volume = self.volumes.get(str(pod.meta.get("volume_id") or ""))
        pod_dir = getattr(self.host, "pod_dir", None)
        if volume is None or pod_dir is None:
            return
        mount = str(pod.meta.get("volume_path") or "/workspace").rstrip("/") or "/workspace"
        link = Path(pod_dir(pod)) / mount.lstrip("/")
        link.parent.mkdir(parents=True, exist_ok=True)
        if not link.exists():
            link.symlink_to(volume.host_dir, target_is_directory=True)
        for key, value in list(pod.env.items()):
            if value == mount or value.startswith(mount + "/"):
                pod.env[key] = str(volume.host_dir) + value[len(mount):]
        pod.env.setdefault("TAILPOD_SANDBOX_VOLUME_DIR", str(volume.host_dir))

    def _bring_up(self, key: str) -> None:
        with self.lock:
            pod = self.pods.get(key)
            self._timers.pop(key, None)
            if pod is None or pod.status != "running" or self.closed:
                return
            # whether the entrypoint will reject its arguments is known before the container is
            # said to be up: a status read between the two would else call a crash-looping
            # container RUNNING (seen under load); the host composes the same argv again
            container_argv(pod)
            pod.started_at = time.time()
            rises = self.faults.take("price_rises_running", pod.provider, "create")
            if rises:
                pod.compute_rate = round(pod.compute_rate * rises.factor, 6)
                if pod.provider == "runpod":
                    self.meter.set_rate(pod.provider, pod.pod_id, pod.running_rate(), "gpu+disk")
            if pod.provider == "vast":
                self.meter.set_rate(pod.provider, pod.pod_id, pod.running_rate(), "gpu+disk")
            self._mount_volume(pod)
        self.host.start(pod)
        if pod.status != "running":  # terminated or stopped while the container was starting
            self.host.stop(pod)

    def container_log(self, pod: SandboxPod, limit_bytes: int = 1 << 20) -> list[str]:
        """The lines the pod's container wrote (stdout and stderr), as `docker logs` shows them;
        with the `log_env` fault, first the container's environment as `env` prints it."""
        env_of = getattr(self.host, "env", None)
        head = ([f"{k}={v}" for k, v in sorted(env_of(pod).items())]
                if env_of is not None and self.faults.peek("log_env", pod.provider) else [])
        pod_dir = getattr(self.host, "pod_dir", None)
        if pod_dir is None:
            return head
        path = Path(pod_dir(pod)) / "container.log"
        try:
            with open(path, "rb") as fh:
                fh.seek(max(0, path.stat().st_size - limit_bytes))
                text = fh.read().decode("utf-8", errors="replace")
        except OSError:
            return head
        return head + text.splitlines()

    def find(self, provider: str, pod_id: str, account: Account | None = None,
             include_gone: bool = False) -> SandboxPod | None:
        with self.lock:
            pod = self.pods.get(f"{provider}:{pod_id}")
        if pod is None or (account is not None and pod.account != account.name):
            return None
        if pod.status == "terminated" and not include_gone and not self.stale_visible(pod):
            return None
        return pod

    def stale_visible(self, pod: SandboxPod) -> bool:
        return pod.visible_until is not None and time.time() < pod.visible_until

    def pods_of(self, provider: str, account: Account) -> list[SandboxPod]:
        with self.lock:
            pods = [p for p in self.pods.values() if p.provider == provider
                    and p.account == account.name]
        return [p for p in pods if p.status != "terminated" or self.stale_visible(p)]

    def terminate(self, pod: SandboxPod, *, keep_billing: bool = False) -> None:
        """End the pod; `keep_billing` (fault terminate_unlisted) hides it but leaves its meter
        running, as a provider whose bookkeeping lost a pod would."""
        with self.lock:
            if pod.status == "terminated":
                return
            stale = self.faults.take("stale_list", pod.provider, "terminate")
            pod.status = "terminated"
            pod.terminated_at = time.time()
            if stale:
                pod.visible_until = pod.terminated_at + stale.seconds
            timer = self._timers.pop(pod.key, None)
            if timer:
                timer.cancel()
            if not keep_billing:
                self.meter.close(pod.provider, pod.pod_id)
            if pod.offer_id is not None and pod.offer_id in self.vast_offers:
                self.vast_offers[pod.offer_id].rented = False
        self.host.stop(pod)

    def stop(self, pod: SandboxPod) -> None:
        with self.lock:
            if pod.status != "running":
                return
            pod.status = "stopped"
            timer = self._timers.pop(pod.key, None)
            if timer:
                timer.cancel()
            self.meter.set_rate(pod.provider, pod.pod_id, pod.stopped_rate(), "disk (stopped)")
        self.host.stop(pod)

    def start(self, pod: SandboxPod) -> None:
        with self.lock:
            if pod.status != "stopped":
                return
            pod.status = "running"
            pod.ready_at = time.time() + self.start_delay_s
            pod.started_at = None
            rate, what = (
                (pod.running_rate(), "gpu+disk") if pod.provider == "runpod"
                else (pod.disk_rate(), "disk (loading)")
            )
            self.meter.set_rate(pod.provider, pod.pod_id, rate, what)
            timer = threading.Timer(self.start_delay_s, self._bring_up, args=(pod.key,))
            timer.daemon = True
            self._timers[pod.key] = timer
            timer.start()

    def reset(self) -> None:
        """Destroy every pod (their meters close) and clear faults: a clean cloud."""
        with self.lock:
            pods = [p for p in self.pods.values() if p.status != "terminated"]
        for pod in pods:
            self.terminate(pod)
        with self.lock:
            volumes = [v for v in self.volumes.values() if v.deleted_at is None]
        for volume in volumes:
            self.delete_volume(volume)
        with self.lock:
            for pod in self.pods.values():
                pod.visible_until = None
        self.faults.clear()

    def shutdown(self) -> None:
        self.closed = True
        with self.lock:
            timers = list(self._timers.values())
            self._timers.clear()
            pods = list(self.pods.values())
        for timer in timers:
            timer.cancel()
        # Every pod is stopped even when one's stop fails (its processes would outlive the
        # sandbox, in the way of the next one's ports); the first failure is raised after.
        failures: list[Exception] = []
        for pod in pods:
            try:
                self.host.stop(pod)
            except Exception as exc:  # noqa: BLE001 - re-raised below, once all are stopped
                failures.append(exc)
        if failures:
            raise failures[0]

    def pods_public(self) -> list[dict[str, Any]]:
        with self.lock:
            pods = list(self.pods.values())
        return [
            {
                "provider": p.provider,
                "id": p.pod_id,
                "name": p.name,
                "status": p.status,
                "gpu": p.gpu_type,
                "gpu_count": p.gpu_count,
                "rate_per_hr": round(self.meter.rate(p.provider, p.pod_id), 6),
                "ready": p.is_ready(time.time()),
                "port_map": {str(k): v for k, v in p.port_map.items()},
                "pid": p.pid,
                "command": p.command,
                "container_error": p.container_error,
            }
            for p in pods
        ]
