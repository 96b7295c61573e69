"""A pod's end, for every kind: `down RUN_TAG`, `down --all` and `down --expired` (the `down` verb
parses its flags, calls one of these and prints).

There is one way to down a pod: its kind's `down` (pods/kinds.py, pods/ssh_box.py; each is
pods/base.py `settle_then_teardown`: a lanes run's final counts and its lanes stopped, then the
provider-level proven teardown of provision/teardown.py). `down --all` and `--expired` take this
machine's runs and your own boxes down through that same call, one by one; only the cloud
accounts' tagged pods, which no kind holds until the batch adopts them, go through the
provider-level batch (provision/teardown.py `down_clouds`). `down TAG --volumes` then deletes
the run's volumes, each proven gone (`down_storage`)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tailpod.config import Settings
from tailpod.errors import TailpodError
from tailpod.ledger import Ledger, PodRecord
from tailpod.pods.kinds import kind_for
from tailpod.provision import providers as providers_mod
from tailpod.provision import teardown
from tailpod.provision import volumes as vol
from tailpod.provision.base import BillingEvidence, PodInfo, SupportsVolumes
from tailpod.provision.providers import provider_class
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


def run_volumes(ledger: Ledger, run_tag: str) -> list[str]:
    """The volumes a run mounted (their `tp-vol-` names)."""
    return [v.name for v in ledger.volumes() if run_tag in v.used_by and v.active]


def down_storage(settings: Settings, ledger: Ledger, run_tag: str | None, *,
                 delete_volumes: bool, proof: Path | None = None) -> vol.VolumeReport | None:
    """After `down`: delete the run's volumes when asked (`down TAG --volumes`), each proven
    gone, then list the storage that still bills; the run's billing-proof.json gets the same
    list. Never deletes a volume it was not asked to. None when no configured provider has
    volumes and the ledger holds none (`status` and `down --all` list storage through it too)."""
    deleted: list[dict[str, Any]] = []
    failed: list[vol.VolumeStillBills] = []  # each printed after the pod's proof, then exit 3
    if delete_volumes and run_tag:
        for tag in run_volumes(ledger, run_tag):
            record = ledger.volume(tag)
            if record is None:
                continue
            vol.require_volumes(provider_class(record.provider), record.provider)
            try:
                deleted.append(vol.delete_volume_proven(
                    providers_mod.get_provider(record.provider, settings), ledger, tag))
            except vol.VolumeStillBills as exc:
                failed.append(exc)
    providers = providers_mod.remote_providers(settings)
    if not failed and not ledger.volumes() and not any(isinstance(p, SupportsVolumes)
                                                       for p in providers.values()):
        return None
    report = vol.reconcile_volumes(providers, ledger)
    report.delete_failed = failed
    if proof is not None and Path(proof).is_file():
        path = Path(proof)
        payload = json.loads(path.read_text())
        payload["storage"] = {**report.to_json(), "deleted": deleted}
        path.write_text(json.dumps(payload, indent=2) + "\n")
    return report
