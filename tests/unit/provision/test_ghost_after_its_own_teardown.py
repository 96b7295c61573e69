"""A pod whose own teardown sent the terminate but did not finish its proof (`up` tearing down
after a failed boot while another check failed, adversary-2026-12 #5) is gone from its provider
the next time `status` looks. At e816682 that row read `ghost, ended outside tailpod (deleted by
hand or by the provider)`: a pod tailpod itself ended, blamed on someone else. It now says that
tailpod's teardown ended it and which command settles the record."""

from __future__ import annotations

from pathlib import Path

from tailpod.ledger import PodRecord
from tailpod.provision.reconcile import reconcile
from tests.unit.provision.test_reconcile_ghosts_orphans_and_unknowns import (
    NOW,
    T1,
    Scripted,
    _ledger,
    _rec,
)


def _teardown_unproven(record: PodRecord) -> PodRecord:
    """What teardown writes when the terminate went out and the proof failed
    (provision/teardown.py: event `down`, then `billing-not-proven`, status `terminating`)."""
    record.status = "terminating"
    record.note("down")
    record.note("billing-not-proven")
    return record


def test_a_pod_its_own_teardown_ended_is_never_said_to_have_ended_outside_tailpod(
        tmp_path: Path) -> None:
    ledger = _ledger(tmp_path, _teardown_unproven(_rec(pod_id="p1")))
    (row,) = reconcile({"cloud": Scripted()}, ledger, now=NOW).rows
    assert row.provider_state == "gone"
    assert row.flags[:2] == ["ghost", "ended by tailpod's own teardown, whose proof did not "
                             f"finish: `tailpod down {T1}` settles it"]
    assert not any("outside tailpod" in f for f in row.flags)


def test_a_running_pod_that_vanished_still_ended_outside_tailpod(tmp_path: Path) -> None:
    ledger = _ledger(tmp_path, _rec(pod_id="p1"))
    (row,) = reconcile({"cloud": Scripted()}, ledger, now=NOW).rows
    assert row.flags[:2] == ["ghost", "ended outside tailpod (deleted by hand or by the provider)"]
