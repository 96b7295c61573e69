"""The arm switch: a running pod's engine restarted with another arm, for `up --relaunch` and the
sweep's restart between arms (measure/hosts.py), the K extension included.

The arm is checked against its checkpoint and engine before anything is stopped
(engines/checkpoint.py `check_arms`). A switch that fails restores the last good arm; when that
fails too, the ledger says "no engine" (`PodExtra.no_engine`), `status` shows it with the command
that settles it, and the error says the same. The pod's TTL and dead-man switch are the pod's own
(agent/bootstrap/deadman.py): a relaunch stops only the engine, so they still cover it.
"""

from __future__ import annotations

import dataclasses
import time

from tailpod.agent_client.driver import ArmStart, PodAgent
from tailpod.config import Settings
from tailpod.engines.base import EngineConfig
from tailpod.engines.checkpoint import check_arms
from tailpod.errors import TailpodError
from tailpod.ledger import Ledger, PodRecord
from tailpod.pods import kinds
from tailpod.pods.base import Progress


class ArmSwitchFailed(TailpodError):
    """The new arm did not start. Exit 3 when the pod is left with no engine (it still bills)."""

    def __init__(self, message: str, hint: str | None = None, *, no_engine: bool) -> None:
        super().__init__(message, hint)
        self.no_engine = no_engine
        self.exit_code = 3 if no_engine else 1


def settle_command(run_tag: str) -> str:
    """The one command that gives a pod with no engine an engine again (or the other way out)."""
    return f"tailpod up --relaunch {run_tag} --spec-k 0  (or tailpod down {run_tag})"


def _message(exc: BaseException) -> str:
    """The error's first line and, for an engine's traceback, its last (the exception itself);
    the whole log stays in `tailpod logs TAG`."""
    text = exc.message if isinstance(exc, TailpodError) else f"{exc.__class__.__name__}: {exc}"
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    if not lines:
        return exc.__class__.__name__
    return lines[0] if len(lines) == 1 else f"{lines[0]} ... {lines[-1]}"


def switch_arm(settings: Settings, record: PodRecord, cfg: EngineConfig, ledger: Ledger,
               progress: Progress, agent: PodAgent | None = None) -> ArmStart:
    """Serve `cfg` on the pod `record` names; see the module docstring for a failure."""
    check_arms([cfg], settings)  # exit 2 before the serving engine is stopped
    kind = kinds.kind_for(record.provider)
    # The last good arm: what the ledger says serves now, unless the pod already has no engine.
    last_good = (EngineConfig.from_json(record.engine)
                 if record.engine and not record.extra.no_engine else None)
    try:
        started = kind.relaunch(settings, record, cfg, ledger, progress, agent)
    except KeyboardInterrupt:  # the old engine may be stopped already: say so, restore nothing
        _mark_no_engine(ledger, record.run_tag, cfg.spec.label(), "interrupted",
                        "interrupted before the arm served, so nothing was restored")
        raise
    except Exception as exc:  # noqa: BLE001 - any failure leaves the engine in doubt
        _recover(settings, record, cfg, last_good, ledger, progress, agent, exc)
        raise AssertionError("unreachable") from exc  # _recover always raises
    current = ledger.get(record.run_tag)
    if current is not None and current.extra.no_engine:
        ledger.update(record.run_tag, event="engine-restored",
                      extra=dataclasses.replace(current.extra, no_engine=None))
    return started


def _recover(settings: Settings, record: PodRecord, cfg: EngineConfig,
             last_good: EngineConfig | None, ledger: Ledger, progress: Progress,
             agent: PodAgent | None, exc: Exception) -> None:
    kind = kinds.kind_for(record.provider)
    label, why = cfg.spec.label(), _message(exc)
    restore_error = ("no arm served before it, so there is nothing to restore" if last_good is None
                     else "it is the arm that served before, so there is nothing to restore")
    if last_good is not None and last_good != cfg:
        progress(0.0, f"arm {label} failed to start; restoring {last_good.spec.label()}")
        current = ledger.get(record.run_tag) or record
        try:
            kind.relaunch(settings, current, last_good, ledger, progress, agent)
        except Exception as again:  # noqa: BLE001 - recorded below as "no engine"
            restore_error = f"restoring {last_good.spec.label()} failed too: {_message(again)}"
        else:
            raise ArmSwitchFailed(
                f"arm {label} failed to start on {record.run_tag}: {why}; the pod serves "
                f"{last_good.spec.label()} again", no_engine=False) from None
    _mark_no_engine(ledger, record.run_tag, label, why, restore_error)
    raise ArmSwitchFailed(
        f"arm {label} failed to start on {record.run_tag}: {why}; {restore_error}. "
        f"Now {kind.no_engine_left}",
        hint=settle_command(record.run_tag), no_engine=True) from None


def _mark_no_engine(ledger: Ledger, run_tag: str, arm: str, error: str, restore: str) -> None:
    """The ledger's "no engine" state, which `status` shows with `settle_command`."""
    current = ledger.get(run_tag)
    if current is None:
        return
    ledger.update(run_tag, event="no-engine", extra=dataclasses.replace(
        current.extra, no_engine={"arm": arm, "error": error, "restore": restore,
                                  "at": time.time()}))
