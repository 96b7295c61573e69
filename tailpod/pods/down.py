"""A pod's end, for every kind: `down RUN_TAG`, `down --all` and `down --expired` (the `down` verb
parses its flags, calls one of these and prints).

There is one way to down a pod: its kind's `down` (pods/kinds.py, pods/ssh_box.py; each is
pods/base.py `settle_then_teardown`: a lanes run's final counts and its lanes stopped, then the
provider-level proven teardown of provision/teardown.py). `down --all` and `--expired` take this
machine's runs and your own boxes down through that same call, one by one; only the cloud
accounts' tagged pods, which no kind holds until the batch adopts them, go through the
provider-level batch (provision/teardown.py `down_clouds`)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from tailpod.config import Settings
from tailpod.errors import TailpodError
from tailpod.ledger import Ledger, PodRecord
from tailpod.pods.kinds import kind_for
from tailpod.provision import teardown
from tailpod.provision.base import BillingEvidence, PodInfo
from tailpod.provision.teardown import (
    PROOF_FILE,
    LifecyclePolicy,
    TeardownOutcome,
    UnprovenTeardown,
    run_dir_for,
)


def down(settings: Settings, ledger: Ledger, record: PodRecord, *,
         policy: LifecyclePolicy | None = None) -> BillingEvidence:
    """`down RUN_TAG`: the kind's settle, then the proven teardown; raises UnprovenTeardown
    (exit 3) unless billing is proven stopped."""
    return kind_for(record.provider).down(settings, ledger, record, policy=policy)


def down_outcome(settings: Settings, ledger: Ledger, record: PodRecord,
                 policy: LifecyclePolicy | None = None) -> TeardownOutcome:
    """`down` of one record as the TeardownOutcome `down --all` lists (never a TailpodError)."""
    proof = str(run_dir_for(settings, record.run_tag) / PROOF_FILE)
    try:
        evidence = down(settings, ledger, record, policy=policy)
        return TeardownOutcome(record.run_tag, record.provider, evidence, proof_path=proof)
    except UnprovenTeardown as exc:
        return TeardownOutcome(record.run_tag, record.provider, exc.evidence, exc.message,
                               str(exc.proof_path) if exc.proof_path else None)
    except TailpodError as exc:
        return TeardownOutcome(record.run_tag, record.provider, None, exc.message)


def down_many(settings: Settings, ledger: Ledger, *, expired_only: bool = False,
              policy: LifecyclePolicy | None = None,
              on_recovery: Callable[[str], None] | None = None,
              all_homes: bool = False,
              others: list[PodInfo] | None = None, **options: Any) -> list[TeardownOutcome]:
    """`down --all` (every tailpod-tagged resource of the accounts) or `down --expired`: the runs
    no account lists (this machine's, your boxes') each through its kind's `down`, then the cloud
    accounts' batch; a ConfigError (exit 2) before anything is torn down when there is nothing to
    ask. `options` go to each cloud provider made (the sandbox's timings in tests)."""
    plan = teardown.plan_down_many(settings, ledger, expired_only=expired_only, **options)
    outcomes = [down_outcome(settings, ledger, record, policy) for record in plan.held]
    return outcomes + teardown.down_clouds(
        settings, ledger, plan.providers, expired_only=expired_only, policy=policy,
        on_recovery=on_recovery, all_homes=all_homes, others=others)
