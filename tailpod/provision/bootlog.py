"""Why a pod failed before tailpod could use it: its container log, kept, shown and explained.

On any bootstrap failure `up` reads the container's log from the provider (RunPod v2
`GET /v2/pods/{id}/logs`, vast.ai's instance logs), keeps it as `container.log` in the run
directory, prints its last lines and names the cause when it recognises one. The tailnet hint
("is the auth key valid?") is given only when the log points at the tailnet.
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tailpod.errors import TailpodError
from tailpod.provision.base import Provider, SupportsContainerLog
from tailpod.secrets import redact

LOG_FILE = "container.log"
SHOWN_LINES = 15
FETCHED_LINES = 500


@dataclass(frozen=True)
class Cause:
    name: str
    summary: str
    hint: str
    patterns: tuple[str, ...]  # case-insensitive regular expressions over one log line


# Most specific first: the first cause with a matching line wins.
CAUSES: tuple[Cause, ...] = (
    Cause("entrypoint-rejected-args",
          "the image's ENTRYPOINT rejected the start command as its arguments",
          "the provider appended tailpod's start command to the image's entrypoint; tailpod "
          "sends the form that replaces it, so an older tailpod or a template that overrides "
          "the start command is the likely culprit",
          (r"error: unrecognized arguments", r"error: argument .*invalid choice",
           r"exec: \"?-c\"?: executable file not found",
           # the whole start command taken as the engine's model argument (a JSON form the
           # provider did not decode, handed to `vllm serve` as one word)
           r"\{.?entrypoint.?:.*(is not a local folder and is not a valid model identifier"
           r"|repo id must)")),
    Cause("image-pull-failed", "the image could not be pulled",
          "check the image name, tag or digest, and registry credentials for a private image",
          (r"pull access denied", r"manifest (for .* )?unknown", r"failed to pull image",
           r"errimagepull", r"imagepullbackoff", r"error pulling image")),
    Cause("out-of-disk", "the container ran out of disk",
          "raise --disk (the image, the model and its cache must fit)",
          (r"no space left on device", r"disk quota exceeded")),
    Cause("sshd-missing", "sshd did not start in the pod",
          "the image has no OpenSSH server and installing one failed; use an image with "
          "openssh-server, or one where apt-get works",
          (r"sshd did not start", r"could not install openssh-server", r"sshd: not found",
           r"/usr/sbin/sshd: no such file")),
    Cause("tailnet", "the pod's tailnet join failed",
          "read the pod's tailscale-join log; is the auth key still valid and are its tags "
          "allowed by your tailnet policy?",
          (r"tailnet join failed", r"tailscale.*(invalid key|unauthorized|expired)")),
)

# The start script got as far as the tailnet join: a missing device is then the tailnet's doing.
REACHED_JOIN = re.compile(r"tailpod-start: (tailnet join|pod ready)", re.IGNORECASE)


def recognise(lines: list[str]) -> Cause | None:
    for cause in CAUSES:
        compiled = [re.compile(p, re.IGNORECASE) for p in cause.patterns]
        if any(c.search(line) for line in lines for c in compiled):
            return cause
    return None


# Causes that can never heal by waiting: seen in the log of a booting pod, `up` stops at once
# instead of billing until the boot wait (up to 1800 s) runs out.
FATAL_EARLY = ("entrypoint-rejected-args",)
WATCH_EVERY_S = 2.0  # how often a booting pod's log is read
WATCH_LINES = 100


class BootWatch:
    """Reads a booting pod's container log every `every_s` seconds (never more often) and names
    a cause from FATAL_EARLY as soon as a line shows it; the log's absence is not a verdict."""

    def __init__(self, provider: Provider, pod_id: str, *, every_s: float = WATCH_EVERY_S,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.provider, self.pod_id, self.every_s, self.clock = provider, pod_id, every_s, clock
        self.started = clock()
        self.last = self.started  # the first read comes `every_s` in: a log needs a moment
        self.reads = 0

    def check(self) -> Cause | None:
        now = self.clock()
        if now - self.last < self.every_s:
            return None
        self.last = now
        self.reads += 1
        try:
            lines = fetch_container_log(self.provider, self.pod_id, WATCH_LINES) or []
        except Exception:  # noqa: BLE001 - a log read that fails is no verdict; the wait goes on
            return None
        cause = recognise(lines)
        return cause if cause is not None and cause.name in FATAL_EARLY else None

    def elapsed(self) -> float:
        return self.clock() - self.started


class BootFailed(TailpodError):
    """The container log shows a boot that cannot succeed (a FATAL_EARLY cause)."""

    def __init__(self, cause: Cause, pod_id: str, after_s: float) -> None:
        # up's failure path (explain) puts the cause's summary in front of this
        super().__init__(f"pod {pod_id}: seen in its container log {after_s:.0f} s into the "
                         "boot; stopped at once instead of waiting out the boot timeout",
                         hint=cause.hint)
        self.cause = cause


@dataclass
class BootDiagnosis:
    lines: list[str] | None  # None: the provider gave no log
    cause: Cause | None
    path: Path | None
    error: str | None = None  # why the log could not be read

    def tail(self, n: int = SHOWN_LINES) -> list[str]:
        return (self.lines or [])[-n:]

    def reached_join(self) -> bool:
        return any(REACHED_JOIN.search(line) for line in self.lines or [])

    def to_json(self) -> dict[str, Any]:
        return {"cause": self.cause.name if self.cause else None,
                "log": str(self.path) if self.path else None,
                "lines": len(self.lines) if self.lines is not None else None,
                "error": self.error}


def fetch_container_log(provider: Provider, pod_id: str,
                        tail: int = FETCHED_LINES) -> list[str] | None:
    if isinstance(provider, SupportsContainerLog):
        return provider.container_log(pod_id, tail)
    return None


def diagnose(provider: Provider, pod_id: str | None, run_dir: Path) -> BootDiagnosis:
    """Read, keep and classify the pod's container log; never raises (a failure is noted)."""
    if not pod_id:
        return BootDiagnosis(None, None, None, "no pod id was recorded")
    try:
        lines = fetch_container_log(provider, pod_id)
    except TailpodError as exc:
        return BootDiagnosis(None, None, None, exc.message)
    except Exception as exc:  # a diagnosis must not hide the failure it explains
        return BootDiagnosis(None, None, None, exc.__class__.__name__)
    if lines is None:
        return BootDiagnosis(None, None, None, f"{provider.name} has no log for pod {pod_id}")
    path: Path | None = run_dir / LOG_FILE
    try:
        run_dir.mkdir(parents=True, exist_ok=True)
        assert path is not None
        # Kept scrubbed and private: a container's output can carry the pod's own credentials.
        lines = [redact(line) for line in lines]
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            os.fchmod(fh.fileno(), 0o600)
            fh.write("".join(line + "\n" for line in lines))
    except OSError:
        path = None
    return BootDiagnosis(lines, recognise(lines), path)


def explain(message: str, hint: str | None, diagnosis: BootDiagnosis,
            tailnet_wait: bool) -> tuple[str, str | None]:
    """The failure's message and hint with the container log's verdict folded in.

    A named cause leads the message and replaces the hint. A tailnet wait that timed out keeps
    its tailnet hint only when the log shows the start script reached the join, or names the
    tailnet; otherwise the hint points at the log instead.
    """
    where = f" (kept in {diagnosis.path})" if diagnosis.path else ""
    shown = diagnosis.tail()
    if shown:
        message += f"\n  the container's last {len(shown)} log lines{where}:\n    " \
            + "\n    ".join(line[:300] for line in shown)
    elif diagnosis.error:
        message += f"\n  the container log could not be read: {diagnosis.error}"
    cause = diagnosis.cause
    if cause is not None:
        return f"{cause.summary}: {message}", cause.hint
    if tailnet_wait and not diagnosis.reached_join():
        return message, ("the container log shows no sign that tailpod's start script reached "
                         "the tailnet join; read the log above" if diagnosis.lines is not None
                         else "tailpod could not read the pod's log; the tailnet, the image and "
                         "the start command are all suspects")
    return message, hint
