"""The local ledger: every pod tailpod asked a provider for, written down before the request.

One JSON file under the state directory, rewritten atomically (temp file, fsync, rename) under an
exclusive `flock`, so two tailpod processes cannot lose each other's writes and a crash at any point
leaves either the old or the new file, never half of one.

Damage from outside (a truncated copy, a full disk, random bytes, a deleted file) must never lose
which pods exist, so every write goes to two files: the last-known-good copy
(`ledger.last-good.json`) first, then `ledger.json`; each carries a generation number. A read takes
the newer readable one. A damaged file is set aside under a name that keeps it
(`ledger.damaged-<UTC time>.json`), the good copy is restored, and a recovery notice stays in the
ledger until a command that asked the providers has settled it (`status`, `down`). When neither
file can be read, the ledger restarts empty with a notice that says so; `down --all` then rebuilds
it from what the providers list under tailpod's `tp-` tags.

A record of an operation in progress (`up`'s create, SSH wait and engine start; `down`) names its
owner: pid, host and the process's start time, so `status` can tell a running `up` from one that was
killed and name the command that settles what it left.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import fcntl
import json
import os
import re
import secrets
import socket
import stat
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tailpod.config import HOME_ID_PATTERN
from tailpod.errors import BillingNotProven, ConfigError, TailpodError
from tailpod.secrets import redact

LEDGER_VERSION = 1
LEDGER_FILE = "ledger.json"
LAST_GOOD_FILE = "ledger.last-good.json"

# A record's life: intent is written before the create call; it becomes `creating` once the provider
# may hold a resource, `running` when serving, `terminating` while down runs, and `terminated` only
# once the provider no longer lists it.
class LifeState:
    """A pod's states, named once: the record's `status` values, and the states `status` reads
    from the record's events, its journal (pods/journal.py `last_change`)."""

    INTENT = "intent"
    CREATING = "creating"
    RUNNING = "running"
    STOPPED = "stopped"
    TERMINATING = "terminating"
    FAILED = "failed"
    TERMINATED = "terminated"
    NO_ENGINE = "no engine"  # running, but a failed arm switch left no engine (pods/arm_switch.py)
    INTERRUPTED = "interrupted"  # the command that owned a step is gone (interrupted_step)


ACTIVE_STATES = (LifeState.INTENT, LifeState.CREATING, LifeState.RUNNING, LifeState.STOPPED,
                 LifeState.TERMINATING, LifeState.FAILED)


# Every pod, volume and tailnet device tailpod makes is named with this prefix, so the orphan sweep
# finds it at the provider even when the ledger is lost.
RUN_TAG_PREFIX = "tp-"


HOME_ID_FILE = "home-id"
# tp-[<home id>-]<UTC yyyymmdd-hhmmss>-<6 hex>: the home id is absent from tags written before
# homes had one (they stay this home's, as then: docs/providers.md "A team on one account").
_RUN_TAG = re.compile(r"^tp-(?:(?P<home>[a-z0-9]{2,12})-)?\d{8}-\d{6}-[0-9a-f]{6}$")


def home_id(home: Path, override: str = "", *, create: bool = True) -> str | None:
    """This home's identity in its run tags, so a provider listing shared by a team tells whose
    pod each is: `override` (TAILPOD_HOME_ID) when given, else the one stored in the home,
    generated once (`create`). None when the home has none and `create` is off."""
    if override:
        if not HOME_ID_PATTERN.match(override):
            raise ConfigError(f"TAILPOD_HOME_ID must be 2 to 12 lowercase letters or digits, "
                              f"got {override!r}")
        return override
    path = Path(home) / HOME_ID_FILE
    with contextlib.suppress(FileNotFoundError, NotADirectoryError):
        stored = path.read_text(encoding="utf-8").strip()
        if HOME_ID_PATTERN.match(stored):
            return stored
        raise ConfigError(f"{path} does not hold a home id ({stored[:20]!r})",
                          hint=f"remove {path} to have a new one generated")
    if not create:
        return None
    Path(home).mkdir(parents=True, exist_ok=True, mode=0o700)
    made = secrets.token_hex(3)
    # Written whole under a name of its own, then linked in: the link fails if the file exists
    # (two first commands at once keep the one linked first), and no reader ever sees it empty
    # (an O_EXCL create then a write let a parallel matrix card read '' between the two).
    tmp = path.with_name(f".{HOME_ID_FILE}.{os.getpid()}.{secrets.token_hex(4)}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(made + "\n")
        try:
            os.link(tmp, path)
        except FileExistsError:
            return home_id(home, create=False)
    finally:
        tmp.unlink(missing_ok=True)
    return made


def new_run_tag(home: str | None = None) -> str:
    """A new run tag, carrying `home` (this home's id, `home_id`) when given."""
    return (RUN_TAG_PREFIX + (f"{home}-" if home else "")
            + time.strftime("%Y%m%d-%H%M%S", time.gmtime()) + "-" + secrets.token_hex(3))


def tag_home(run_tag: str | None) -> str | None:
    """The home id a run tag carries; None for a tag without one (older, or not tailpod's)."""
    match = _RUN_TAG.match(run_tag or "")
    return match.group("home") if match else None


def another_homes(run_tag: str | None, home: str | None) -> bool:
    """True when the tag carries a home id other than `home` (this home's, None if it has
    none): that pod is another home's on a shared account, not this home's orphan."""
    theirs = tag_home(run_tag)
    return theirs is not None and theirs != home


def _process_start(pid: int) -> str | None:
    """The kernel's start time of `pid` (clock ticks since boot), to tell a reused pid apart."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # Field 22, counted after the command name, which is in parentheses and may hold spaces.
    fields = stat[stat.rfind(")") + 2:].split()
    return fields[19] if len(fields) > 19 else None


def operation_stamp(step: str) -> dict[str, Any]:
    """Who runs the operation now in progress on a pod, and at which step."""
    pid = os.getpid()
    return {"step": step, "pid": pid, "host": socket.gethostname(),
            "proc_start": _process_start(pid), "since": time.time()}


def operation_owner_alive(operation: dict[str, Any]) -> bool | None:
    """True/False when the owner's host is this one; None when it cannot be told from here."""
    if not operation or operation.get("host") != socket.gethostname():
        return None
    try:
        pid = int(operation["pid"])
    except (KeyError, TypeError, ValueError):
        return None
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass  # someone else's process: alive, but check it is the same one below
    started = operation.get("proc_start")
    return started is None or _process_start(pid) == started


def interrupted_step(record: PodRecord) -> str | None:
    """The step an operation was in when its owner died; None if none is known to have died."""
    if record.operation and operation_owner_alive(record.operation) is False:
        return str(record.operation.get("step") or "an operation")
    return None


def matrix_status(record: PodRecord) -> dict[str, Any] | None:
    """The matrix that rented the pod, and whether it was interrupted: the pod may still bill
    while the matrix process that owned it is gone (SIGKILL, a crash); None for a pod no
    matrix rented."""
    matrix = record.extra.matrix
    if not isinstance(matrix, dict) or not matrix.get("id"):
        return None
    owner = matrix.get("owner")
    gone = isinstance(owner, dict) and operation_owner_alive(owner) is False
    return {"id": str(matrix["id"]), "card": matrix.get("card"),
            "interrupted": bool(record.active and gone)}


def matrix_settle(record: PodRecord, matrix_id: str) -> str:
    """The commands that settle a pod of an interrupted matrix (docs/matrix.md, Resume)."""
    return (f"tailpod matrix --run-id {matrix_id} --budget USD (the resume settles or adopts "
            f"it first), or tailpod down {record.run_tag}")


@dataclass
class PodExtra:
    """What tailpod learns about a pod beyond its core columns, one typed field per fact.

    On disk it stays the JSON object `extra` has always been (the same keys, so ledgers written
    before read the same and `up --json` prints the same document): `from_json` reads each known
    key into its field and keeps any other key in `other`, `to_json` writes the fields that are
    set back under their keys. The nested values (startup facts, arms, volumes, lanes) keep the
    shapes their writers give them (agent_client/driver.py, provision/volumes.py, pods/lanes.py).
    """

    # the create (provision/create.py)
    provider_ids: list[str] = field(default_factory=list)  # every provider id a create named
    gpu_preference: list[str] | None = None
    max_price: float | None = None
    fallback_from: str | None = None  # the card asked for, when a capacity fallback changed it
    fallback_reasons: list[str] | None = None
    spot: bool | None = None  # True: an interruptible (spot) rental; None: on-demand
    bid: float | None = None  # the spot bid, $/h per machine, as sent to the provider
    # the boot (pods/cloud.py)
    image: dict[str, Any] | None = None  # {"ref", "digest"}
    provider_facts: dict[str, Any] | None = None
    boot_failure: dict[str, Any] | None = None
    volume: dict[str, Any] | None = None  # the mounted network volume (provision/volumes.py)
    deadman: dict[str, Any] | None = None  # {"ttl_at" (0 = none), "pid", "heartbeat_timeout_s"}
    # the engine
    startup: dict[str, Any] | None = None  # StartupFacts.to_json() of the arm serving now
    startup_s: float | None = None
    arms: dict[str, dict[str, Any]] = field(default_factory=dict)  # label → ArmStart's record
    argv: list[str] | None = None  # the local engine's argv
    launch_warnings: list[str] | None = None
    mtp_ignore_patch: dict[str, Any] | None = None
    # a failed arm switch whose restore failed too (pods/arm_switch.py): {"arm", "error",
    # "restore", "at"}; None once an engine serves again
    no_engine: dict[str, Any] | None = None
    pod_state_dir: str | None = None
    cold_start: dict[str, Any] | None = None
    machine: dict[str, Any] | None = None
    engine_version: str | None = None
    llama_server: str | None = None  # the llama.cpp binary `up` checked, for relaunches
    llama_server_version: str | None = None
    # the card matrix that rented it (measure/matrix_run.py): {"id", "card", "owner"}, written
    # with the intent record, so a killed matrix's pods are known to its resume and to `status`
    matrix: dict[str, Any] | None = None
    # where the numbers come from
    emulated: bool | None = None
    api_endpoint: str | None = None
    box: str | None = None  # your own box's address as given (--host)
    # what a pod no `up` asked for was rented for ("first-contact check": the CPU probe of
    # provision/runpod/first_contact.py), shown by `status` in place of an engine
    purpose: str | None = None
    # lanes (pods/lanes.py): the proxy's record holds both lanes
    lanes: dict[str, Any] = field(default_factory=dict)  # {}: not a lanes run
    lanes_down: Any = None
    lanes_counts: dict[str, Any] | None = None  # the lanes' final request counts (lanes.json)
    deploy_lanes: dict[str, Any] | None = None  # the lanes `benchmark --deploy` ran, once down
    before_teardown_error: str | None = None  # a lanes settle that failed before down
    # the end
    ended_at: float | None = None  # when billing was proven stopped (ended_at() below)
    other: dict[str, Any] = field(default_factory=dict)  # keys this version does not know
    # The keys the record was read with: written back even when null or empty, so a ledger
    # written before reads, and writes, the same document.
    read_keys: frozenset[str] = field(default=frozenset(), repr=False, compare=False)

    @classmethod
    def from_json(cls, data: dict[str, Any] | None) -> PodExtra:
        data = dict(data or {})
        fields = {k: data.pop(k) for k in list(data) if k in _EXTRA_KEYS}
        return cls(**fields, other=data, read_keys=frozenset(fields))

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for name in _EXTRA_KEYS:
            value = getattr(self, name)
            if name in self.read_keys or value not in (None, [], {}):
                out[name] = value
        return {**out, **self.other}


_EXTRA_KEYS = tuple(f.name for f in dataclasses.fields(PodExtra)
                    if f.name not in ("other", "read_keys"))


@dataclass
class PodRecord:
    run_tag: str
    provider: str
    status: str = "intent"
    pod_id: str | None = None
    created_at: float = field(default_factory=time.time)
    updated_at: float = field(default_factory=time.time)
    endpoint: str | None = None
    engine: dict[str, Any] = field(default_factory=dict)
    gpu: str | None = None
    gpu_count: int = 1
    price_per_hr: float | None = None
    ttl_expires_at: float | None = None
    image: str | None = None
    ssh: dict[str, Any] = field(default_factory=dict)
    tailnet: dict[str, Any] = field(default_factory=dict)
    extra: PodExtra = field(default_factory=PodExtra)  # a dict given here is read as on disk
    events: list[dict[str, Any]] = field(default_factory=list)
    # The operation in progress on this pod and who runs it (see `operation_stamp`); {} when idle.
    operation: dict[str, Any] = field(default_factory=dict)

    def __setattr__(self, name: str, value: Any) -> None:
        if name == "extra" and not isinstance(value, PodExtra):
            value = PodExtra.from_json(value)  # the on-disk form (a dict), as old writers give it
        super().__setattr__(name, value)

    @property
    def active(self) -> bool:
        return self.status in ACTIVE_STATES

    def note(self, event: str, **data: Any) -> None:
        self.events.append({"t": time.time(), "event": event, **data})

    def to_json(self) -> dict[str, Any]:
        out = dataclasses.asdict(dataclasses.replace(self, extra=PodExtra()))
        out["extra"] = copy.deepcopy(self.extra.to_json())  # copied, as asdict copies the rest
        return out

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> PodRecord:
        known = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in known})


def ended_at(record: PodRecord) -> float | None:
    """When a pod proven down stopped billing (its first proof's end); None while it may bill.

    Its uptime and spend stop there: a terminated pod's numbers never grow afterwards."""
    if record.status != "terminated":
        return None
    stored = record.extra.ended_at
    if isinstance(stored, (int, float)):
        return float(stored)
    for event in record.events:  # records proven before `ended_at` was kept
        if event.get("event") in ("billing-proven", "create-failed-clean") and isinstance(
                event.get("t"), (int, float)):
            return float(event["t"])
    return record.updated_at


# A volume's life: `intent` before the create call, `creating` while it may exist unseen, `kept`
# once the provider lists it (it bills until deleted), `deleting`, then `deleted` once the provider
# no longer lists it. Every state but `deleted` may bill.
VOLUME_ACTIVE_STATES = ("intent", "creating", "kept", "deleting", "failed")


@dataclass
class VolumeRecord:
    """A storage volume tailpod asked for; `name` is its `tp-` name at the provider."""

    name: str
    provider: str
    size_gb: int
    data_center: str
    volume_type: str | None = None
    status: str = "intent"
    volume_id: str | None = None
    price_per_month: float | None = None
    created_at: float = field(default_factory=time.time)
    updated_at: float = field(default_factory=time.time)
    used_by: list[str] = field(default_factory=list)  # run tags that mounted it
    events: list[dict[str, Any]] = field(default_factory=list)

    @property
    def active(self) -> bool:
        return self.status in VOLUME_ACTIVE_STATES

    def note(self, event: str, **data: Any) -> None:
        self.events.append({"t": time.time(), "event": event, **data})

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> VolumeRecord:
        known = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in known})


class _Damaged(Exception):
    """A ledger file that exists but cannot be read back as a ledger."""


@dataclass
class _Snapshot:
    pods: dict[str, PodRecord]
    generation: int = 0
    recovery: list[dict[str, Any]] = field(default_factory=list)
    volumes: dict[str, VolumeRecord] = field(default_factory=dict)


class Ledger:
    def __init__(self, home: Path) -> None:
        self.home = Path(home)
        self.path = self.home / LEDGER_FILE
        self.last_good_path = self.home / LAST_GOOD_FILE
        self._lock_path = self.home / "ledger.lock"
        self._state = _Snapshot({})

    def _check_home(self) -> None:
        """Refuse a home, lock or ledger that another user could have written or planted, as
        OpenSSH refuses such a ~/.ssh: the ledger decides what tailpod believes is billing."""
        st = os.stat(self.home)
        if st.st_uid != os.getuid() or st.st_mode & 0o022:
            said = (f"TAILPOD_HOME {self.home} can be written by other users (mode "
                    f"{stat.S_IMODE(st.st_mode):o}, owner uid {st.st_uid}); its ledger is not "
                    "trusted")
            hint = f"chmod 700 {self.home} (and make sure you own it)"
            billing = self._untrusted_says_billing()
            if billing:  # may bill, and nothing can be checked on its word: exit 3, named
                raise BillingNotProven(
                    f"{said}, and it names what may bill: {'; '.join(billing)}; nothing was "
                    "stopped or checked", hint=f"{hint}, then tailpod status or tailpod down")
            raise ConfigError(said, hint=hint)
        for path in (self.path, self.last_good_path, self._lock_path):
            try:
                st = os.lstat(path)
            except FileNotFoundError:
                continue
            if stat.S_ISLNK(st.st_mode):
                raise ConfigError(f"{path} is a symbolic link; tailpod does not follow it",
                                  hint=f"remove it (rm {path}) if you did not make it")
            if st.st_uid != os.getuid() or st.st_mode & 0o022:
                raise ConfigError(
                    f"{path} can be written by other users (mode {stat.S_IMODE(st.st_mode):o}, "
                    f"owner uid {st.st_uid}); it is not trusted",
                    hint=f"chmod 600 {path} (and make sure you own it)")

    def _untrusted_says_billing(self) -> list[str]:
        """What the untrusted ledger names as active (pods and volumes that may bill), read
        without the lock and never acted on: words for the user, not a decision (issue 38)."""
        if os.path.islink(self.path):
            return []
        try:
            snap = self._parse(self.path)
        except _Damaged:
            return []
        if snap is None:
            return []
        pods = [f"{r.provider} pod {r.pod_id or '(id unknown)'} of run {r.run_tag} ({r.status})"
                for r in snap.pods.values() if r.active]
        volumes = [f"{v.provider} volume {v.volume_id or v.name} ({v.status})"
                   for v in snap.volumes.values() if v.active]
        return pods + volumes

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        self.home.mkdir(parents=True, exist_ok=True, mode=0o700)
        self._check_home()
        fd = os.open(self._lock_path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600)
        with os.fdopen(fd, "a+") as lock:
            fcntl.flock(lock.fileno(), fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(lock.fileno(), fcntl.LOCK_UN)

    @staticmethod
    def _parse(path: Path) -> _Snapshot | None:
        """The file's content; None when it does not exist; _Damaged when it is not a ledger."""
        try:
            raw = json.loads(path.read_bytes().decode("utf-8"))
            pods = {str(tag): PodRecord.from_json(rec) for tag, rec in raw["pods"].items()}
            if any(rec.run_tag != tag for tag, rec in pods.items()):
                raise ValueError("a record's run tag differs from its key")
            recovery = [dict(n) for n in raw.get("recovery", [])]
            volumes = {str(n): VolumeRecord.from_json(rec)
                       for n, rec in (raw.get("volumes") or {}).items()}
            return _Snapshot(pods, int(raw.get("generation", 0)), recovery, volumes)
        except FileNotFoundError:
            return None
        except (OSError, ValueError, TypeError, KeyError, AttributeError) as exc:
            # UnicodeDecodeError and JSONDecodeError are ValueErrors; a wrong shape is the rest.
            raise _Damaged(exc.__class__.__name__) from None

    def _set_aside(self, path: Path, stamp: str) -> Path:
        aside = self.home / f"{path.stem}.damaged-{stamp}.json"
        n = 1
        while aside.exists():
            n += 1
            aside = self.home / f"{path.stem}.damaged-{stamp}-{n}.json"
        os.replace(path, aside)
        return aside

    def _read(self) -> dict[str, PodRecord]:
        """Under the lock: the newest readable copy; damage is set aside, repaired and noted."""
        found: dict[Path, _Snapshot | None] = {}
        damaged: dict[Path, str] = {}
        for path in (self.path, self.last_good_path):
            try:
                found[path] = self._parse(path)
            except _Damaged as exc:
                damaged[path] = str(exc)
        good = [snap for snap in found.values() if snap is not None]
        best = max(good, key=lambda snap: snap.generation) if good else _Snapshot({})
        main_missing = self.path not in damaged and found.get(self.path) is None
        if not damaged and not (main_missing and good):
            self._state = best
            return best.pods
        # Something is wrong: keep what is damaged, restore the good copy, say what happened.
        stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
        notice: dict[str, Any] = {"t": time.time(), "damaged": {}, "set_aside": []}
        for path, reason in damaged.items():
            notice["damaged"][path.name] = reason
            notice["set_aside"].append(str(self._set_aside(path, stamp)))
        if main_missing:
            notice["damaged"][self.path.name] = "missing"
        if good:
            notice["restored_from"] = (LAST_GOOD_FILE if found.get(self.last_good_path) is best
                                       else LEDGER_FILE)
            notice["generation"] = best.generation
        else:
            notice["restored_from"] = None  # nothing readable: rebuild from the providers
        best.recovery.append(notice)
        self._state = best
        self._write(best.pods)
        return best.pods

    def _write(self, pods: dict[str, PodRecord]) -> None:
        self._state.generation += 1
        payload = {"version": LEDGER_VERSION, "generation": self._state.generation,
                   "recovery": self._state.recovery,
                   "pods": {t: r.to_json() for t, r in pods.items()},
                   "volumes": {n: v.to_json() for n, v in self._state.volumes.items()}}
        # The copy first: a crash between the two renames leaves two readable generations.
        for path in (self.last_good_path, self.path):
            self._write_file(path, payload)

    def _write_file(self, path: Path, payload: dict[str, Any]) -> None:
        fd, tmp = tempfile.mkstemp(dir=self.home, prefix=".ledger.", suffix=".tmp")
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as fh:
                # Scrubbed: an engine's startup line kept as a fact can carry a credential.
                fh.write(redact(json.dumps(payload, indent=1, sort_keys=True)))
                fh.flush()
                os.fsync(fh.fileno())
            os.chmod(tmp, 0o600)
            os.replace(tmp, path)
            dir_fd = os.open(self.home, os.O_RDONLY)
            try:
                os.fsync(dir_fd)
            finally:
                os.close(dir_fd)
        except BaseException:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)
            raise

    @contextlib.contextmanager
    def transaction(self) -> Iterator[dict[str, PodRecord]]:
        """Read-modify-write under the lock; changes are saved only if the block succeeds."""
        with self._locked():
            pods = self._read()
            yield pods
            self._write(pods)

    @contextlib.contextmanager
    def volume_transaction(self) -> Iterator[dict[str, VolumeRecord]]:
        """Read-modify-write of the volume records under the lock (kept apart from the pods, so
        no pod path can mistake a volume for a pod and terminate or adopt it)."""
        with self._locked():
            pods = self._read()
            yield self._state.volumes
            self._write(pods)

    def volumes(self) -> list[VolumeRecord]:
        with self._locked():
            self._read()
            return sorted(self._state.volumes.values(), key=lambda v: v.created_at)

    def volume(self, name: str) -> VolumeRecord | None:
        with self._locked():
            self._read()
            return self._state.volumes.get(name)

    def pending_recovery(self) -> list[dict[str, Any]]:
        """Damage found and repaired that no provider check has settled yet (oldest first)."""
        with self._locked():
            self._read()
            return [dict(n) for n in self._state.recovery if not n.get("settled")]

    def settle_recovery(self, summary: str) -> None:
        """Mark every pending notice settled: the providers were asked and the ledger matches."""
        with self._locked():
            pods = self._read()
            for notice in self._state.recovery:
                if not notice.get("settled"):
                    notice["settled"] = {"t": time.time(), "summary": summary}
            self._write(pods)

    def all(self) -> list[PodRecord]:
        with self._locked():
            return sorted(self._read().values(), key=lambda r: r.created_at)

    def active(self) -> list[PodRecord]:
        return [r for r in self.all() if r.active]

    def get(self, run_tag: str) -> PodRecord | None:
        with self._locked():
            return self._read().get(run_tag)

    def put(self, record: PodRecord) -> PodRecord:
        record.updated_at = time.time()
        with self.transaction() as pods:
            pods[record.run_tag] = record
        return record

    def update(self, run_tag: str, event: str | None = None, **fields: Any) -> PodRecord:
        with self.transaction() as pods:
            record = pods.get(run_tag)
            if record is None:
                raise TailpodError(f"no pod with run tag {run_tag} in the ledger")
            for key, value in fields.items():
                if not hasattr(record, key):
                    raise AttributeError(key)
                setattr(record, key, value)
            record.updated_at = time.time()
            if event:
                record.note(event, **{k: v for k, v in fields.items() if k in ("status", "pod_id")})
            return record

    def resolve(self, run_tag: str | None) -> PodRecord:
        """The record `run_tag` names, or the only active one when none is named."""
        if run_tag:
            record = self.get(run_tag)
            if record is None:
                raise ConfigError(
                    f"no pod with run tag {run_tag} in the ledger", hint="tailpod status"
                )
            return record
        active = self.active()
        if not active:
            # A usage error (exit 2), like any other command line that names nothing to act on.
            raise ConfigError("nothing is running: the ledger has no active pod")
        if len(active) > 1:
            tags = ", ".join(r.run_tag for r in active)
            raise ConfigError(f"several pods are active ({tags})", hint="name one run tag")
        return active[0]
