"""The local ledger: every pod tailpod asked a provider for, written down before the request.

One JSON file under the state directory, rewritten atomically (temp file, fsync, rename) under an
exclusive `flock`, so two tailpod processes cannot lose each other's writes and a crash at any point
leaves either the old or the new file, never half of one.
"""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import json
import os
import secrets
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tailpod.errors import ConfigError, TailpodError

LEDGER_VERSION = 1

# A record's life: intent is written before the create call; it becomes `creating` once the provider
# may hold a resource, `running` when serving, `terminating` while down runs, and `terminated` only
# once the provider no longer lists it.
ACTIVE_STATES = ("intent", "creating", "running", "stopped", "terminating", "failed")


def new_run_tag() -> str:
    return "tp-" + time.strftime("%Y%m%d-%H%M%S", time.gmtime()) + "-" + secrets.token_hex(3)


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
    extra: dict[str, Any] = field(default_factory=dict)
    events: list[dict[str, Any]] = field(default_factory=list)

    @property
    def active(self) -> bool:
        return self.status in ACTIVE_STATES

    def note(self, event: str, **data: Any) -> None:
        self.events.append({"t": time.time(), "event": event, **data})

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> PodRecord:
        known = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in known})


class Ledger:
    def __init__(self, home: Path) -> None:
        self.home = Path(home)
        self.path = self.home / "ledger.json"
        self._lock_path = self.home / "ledger.lock"

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        self.home.mkdir(parents=True, exist_ok=True, mode=0o700)
        with open(self._lock_path, "a+") as lock:
            fcntl.flock(lock.fileno(), fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(lock.fileno(), fcntl.LOCK_UN)

    def _read(self) -> dict[str, PodRecord]:
        try:
            raw = json.loads(self.path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return {}
        except (OSError, json.JSONDecodeError) as exc:
            raise TailpodError(
                f"the ledger {self.path} is unreadable ({exc.__class__.__name__})",
                hint="do not delete it: it lists pods that may still bill; restore it or inspect "
                "the provider console",
            ) from None
        return {tag: PodRecord.from_json(rec) for tag, rec in raw.get("pods", {}).items()}

    def _write(self, pods: dict[str, PodRecord]) -> None:
        payload = {"version": LEDGER_VERSION, "pods": {t: r.to_json() for t, r in pods.items()}}
        fd, tmp = tempfile.mkstemp(dir=self.home, prefix=".ledger.", suffix=".tmp")
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as fh:
                json.dump(payload, fh, indent=1, sort_keys=True)
                fh.flush()
                os.fsync(fh.fileno())
            os.chmod(tmp, 0o600)
            os.replace(tmp, self.path)
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
