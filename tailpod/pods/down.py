"""A pod's end, for every kind: `down RUN_TAG`, `down --all` and `down --expired` (the `down` verb
parses its flags, calls one of these and prints).

Each kind's `down` (pods/kinds.py, pods/ssh_box.py) runs its own first step, a lanes run's final
counts and its lanes stopped (`settle`), then the provider-level proven teardown
(provision/teardown.py). `down --all` settles each local run through its kind the same way
before the teardown of every tagged resource of the accounts."""

from __future__ import annotations

from collections.abc import Callable

from tailpod.config import Settings
from tailpod.ledger import Ledger, PodRecord
from tailpod.pods.kinds import kind_for
from tailpod.provision import teardown
from tailpod.provision.base import BillingEvidence, PodInfo
from tailpod.provision.teardown import LifecyclePolicy, TeardownOutcome


def down(settings: Settings, ledger: Ledger, record: PodRecord, *,
         policy: LifecyclePolicy | None = None) -> BillingEvidence:
    """`down RUN_TAG`: the kind's settle, then the proven teardown; raises UnprovenTeardown
    (exit 3) unless billing is proven stopped."""
    return kind_for(record.provider).down(settings, ledger, record, policy=policy)


def down_many(settings: Settings, ledger: Ledger, *, expired_only: bool = False,
              policy: LifecyclePolicy | None = None,
              on_recovery: Callable[[str], None] | None = None,
              all_homes: bool = False,
              others: list[PodInfo] | None = None) -> list[TeardownOutcome]:
    """`down --all` (every tailpod-tagged resource of the accounts) or `down --expired`; each
    local run settled by its kind first (provision/teardown.py `down_many` keeps a failed settle
    in the ledger and tears down all the same)."""
    return teardown.down_many(
        settings, ledger, expired_only=expired_only, policy=policy, on_recovery=on_recovery,
        before_local=lambda rec: kind_for(rec.provider).settle(settings, ledger, rec),
        all_homes=all_homes, others=others)
