"""What a test's TAILPOD_HOME still runs on this machine, stopped at the test's end whatever its
outcome (tests/conftest.py `tailpod_home`)."""

from __future__ import annotations

import contextlib
from pathlib import Path


def stop_local_runs(home: Path) -> None:
    """Whatever the test's outcome, the local runs its home's ledger still counts active are
    stopped: their engines, lane servers and HAProxy are processes on this machine, and a test
    that failed before its own `down` left them running, in the way of the next engine on its
    port (issue 38 item 9). A cloud's pods are its sandbox fixture's to end."""
    if not (home / "ledger.json").exists():
        return
    from tailpod.config import load_settings
    from tailpod.ledger import Ledger
    from tailpod.pods.kinds import kind_for

    try:
        settings = load_settings()
        if settings.state_dir.resolve() != home.resolve():
            return  # the test pointed TAILPOD_HOME elsewhere: not this home's settings
        ledger = Ledger(home)
        active = [r for r in ledger.active() if r.provider == "local"]
    except Exception:  # noqa: BLE001 - a test may leave a home it broke on purpose
        return
    for record in active:
        with contextlib.suppress(Exception):
            kind_for("local").down(settings, ledger, record)
