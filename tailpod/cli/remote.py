"""Rendering for the cloud side of `up`, `status` and `down` (called from tailpod.cli.pods)."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rich.table import Table

from tailpod.cli.common import console, err_console, print_json
from tailpod.config import Settings
from tailpod.errors import ConfigError, TailpodError
from tailpod.ledger import RUN_TAG_PREFIX, Ledger, PodRecord
from tailpod.pods.down import down as down_pod
from tailpod.pods.down import down_many
from tailpod.provision.base import BillingEvidence, PodInfo, ProofCheck
from tailpod.provision.providers import any_cloud_key
from tailpod.provision.reconcile import (
    StatusReport,
    StatusRow,
    describe_recovery,
    find_at_providers,
    status_remote,
)
from tailpod.provision.teardown import (
    PROOF_FILE,
    LifecyclePolicy,
    UnprovenTeardown,
    raise_if_unproven,
    run_dir_for,
)

STATUS_TIMEOUT_S = 30.0  # status: every provider call together, then it reports unknown
DOWN_TIMEOUT_S = 360.0  # down: the whole terminate, wait and proof (its schedule is ~5 min)


def unknown_line(report: StatusReport, ledger: Ledger) -> str | None:
    """What status could not learn, for stderr: the providers not asked and the ledger's count."""
    if not report.errors:
        return None
    held = len([r for r in ledger.active() if r.provider != "local"])
    return ("could not ask " + "; ".join(report.errors)
            + f"; the ledger holds {held} cloud pod{'s' if held != 1 else ''}, and pods it does "
            "not hold cannot be ruled out: whether anything bills is unknown")


def down_policy(timeout_s: float | None) -> LifecyclePolicy:
    """`down`'s waits, bounded by --timeout, with a progress line on stderr while it waits."""
    started = time.monotonic()

    def progress(line: str) -> None:
        err_console.print(f"[dim]{time.monotonic() - started:5.0f} s[/] {line}")

    return LifecyclePolicy(progress=progress).within(timeout_s)


def record_or_provider_truth(settings: Settings, ledger: Ledger, run_tag: str | None) -> PodRecord:
    """The ledger's record; for a tag it lacks (damage, another machine), what the providers
    list under it. Pending ledger damage is reported first."""
    for notice in ledger.pending_recovery():
        err_console.print(f"[bold yellow]ledger:[/] {describe_recovery(notice)}")
    try:
        return ledger.resolve(run_tag)
    except ConfigError:
        if not run_tag or not run_tag.startswith(RUN_TAG_PREFIX) or not any_cloud_key(settings):
            raise
        found = find_at_providers(settings, ledger, run_tag)
        if found is None:
            raise ConfigError(f"no pod with run tag {run_tag} in the ledger or at any "
                              "configured provider", hint="tailpod status") from None
        err_console.print(f"{run_tag} is not in the ledger; {found.provider} lists it as "
                          f"{', '.join(found.extra.provider_ids)}: written back")
        return found


def evidence_table(evidence: BillingEvidence, title: str) -> Table:
    table = Table(title=title)
    for col in ("check", "result", "detail"):
        table.add_column(col)
    for check in evidence.checks:
        table.add_row(check.name, check_result(check), check.detail)
    return table


def check_result(check: ProofCheck) -> str:
    """A check that saw nothing either way (a meter read within its update delay) does not block
    the proof, but it proved nothing: it reads "not informative", never "pass" (newcomer 2.20)."""
    if not check.passed:
        return "[red]FAIL[/]"
    return "[green]pass[/]" if check.informative else "[yellow]not informative[/]"


def _print_unproven(evidence: BillingEvidence) -> None:
    for line in evidence.still_billing:
        console.print(f"[bold red]STILL BILLING[/] {line}")


def down_remote_cli(settings: Settings, ledger: Ledger, record: PodRecord,
                    json_out: bool, policy: LifecyclePolicy | None = None,
                    after: Callable[[Path], None] | None = None) -> None:
    """`down RUN_TAG` through the pod's kind (pods/down.py: a lanes run settled first), the proof
    table printed; exit 3 unless billing is proven stopped. `after` sees the proof file before it
    is printed (volumes add the storage that bills)."""
    proof = run_dir_for(settings, record.run_tag) / PROOF_FILE
    try:
        evidence = down_pod(settings, ledger, record, policy=policy)
    except UnprovenTeardown as exc:
        if after and exc.proof_path:
            after(Path(exc.proof_path))
        if json_out and exc.proof_path:
            print_json(json.loads(exc.proof_path.read_text()))
        else:
            console.print(evidence_table(exc.evidence, f"down {record.run_tag}"))
            _print_unproven(exc.evidence)
        raise
    if after:
        after(proof)
    if json_out:
        print_json(json.loads(proof.read_text()))
        return
    console.print(evidence_table(evidence, f"down {record.run_tag}"))
    console.print(f"proof: {proof}")
    console.print(f"[green]down[/] {record.run_tag}: terminated, billing proven stopped.")


def down_many_cli(settings: Settings, ledger: Ledger, *, expired_only: bool,
                  json_out: bool, policy: LifecyclePolicy | None = None,
                  all_homes: bool = False) -> None:
    """`down --all` / `down --expired` across every configured cloud account (pods/down.py)."""
    from tailpod.provision.proof import others_line

    others: list[PodInfo] = []
    outcomes = down_many(settings, ledger, expired_only=expired_only, policy=policy,
                         on_recovery=lambda line: err_console.print(
                             f"[bold yellow]ledger:[/] {line}"),
                         all_homes=all_homes, others=others)
    theirs = [f"{others_line(p)} (left alone: --all-homes includes other homes' pods)"
              for p in others]
    if json_out:
        print_json([{"run_tag": o.run_tag, "provider": o.provider, "proven": o.proven,
                     "error": o.error, "proof": o.proof_path,
                     "still_billing": o.evidence.still_billing if o.evidence else []}
                    for o in outcomes])
        for line in theirs:
            err_console.print(line, markup=False)
    else:
        if not outcomes:
            console.print("nothing of this home's is tailpod-tagged" if others else
                          "nothing tailpod-tagged" + (" has expired" if expired_only else
                                                      " is left at any provider"))
        for o in outcomes:
            if o.evidence is not None:
                held = ledger.get(o.run_tag)  # a pod rented for a check says so (newcomer 2.25)
                purpose = f", {held.extra.purpose}" if held and held.extra.purpose else ""
                console.print(evidence_table(o.evidence,
                                             f"down {o.run_tag} ({o.provider}{purpose})"))
                _print_unproven(o.evidence)
            elif o.error:
                console.print(f"[red]{o.provider} {o.run_tag}:[/] {o.error}")
        for line in theirs:
            console.print(line, markup=False)
    raise_if_unproven(outcomes)


def remote_report(settings: Settings, ledger: Ledger) -> StatusReport | None:
    """Provider truth for status; None when no cloud key is configured and nothing remote runs."""
    if not any_cloud_key(settings) and not any(
        r.provider != "local" for r in ledger.active()
    ):
        return None
    try:
        return status_remote(settings, ledger)
    except TailpodError as exc:
        return StatusReport(rows=[], errors=[exc.message], checked_at=time.time())


REMOTE_COLUMNS = ["run tag", "provider", "pod", "ledger", "provider says", "GPU", "$/hr",
                  "uptime", "spent", "flags"]
REMOTE_TITLE = "cloud pods (provider truth)"

def remote_rows(report: StatusReport) -> list[list[str]]:
    rows = []
    for r in report.rows:
        flags = ", ".join(r.flags)
        if r.fallback_from:
            flags = ", ".join(filter(None, [flags, f"fell back from {r.fallback_from}"]))
        rows.append([
            r.run_tag, r.provider, r.pod_id or "-", r.ledger_status or "[red]not in ledger[/]",
            r.provider_state or "-", r.gpu or "-",
            "-" if r.price_per_hr is None else f"{r.price_per_hr:.3f}",
            "-" if r.uptime_s is None else f"{r.uptime_s / 60:.1f} min",
            "-" if r.spend_usd is None else f"${r.spend_usd:.4f}",
            f"[red]{flags}[/]" if flags else "",
        ])
    return rows


def remote_table(report: StatusReport) -> Table:
    table = Table(title=REMOTE_TITLE)
    for col in REMOTE_COLUMNS:
        table.add_column(col)
    for row in remote_rows(report):
        table.add_row(*row)
    return table


def fold_provider_truth(pods: list[dict[str, Any]], report: StatusReport) -> list[StatusRow]:
    """One row per pod, one set of figures per call: each of `status`'s pod rows takes its
    provider row's pod id, state, flags, GPU, price, uptime and spend (reconcile computes them at
    one instant, with the provider's price); the provider rows no pod row holds (orphans, pods
    outside the rows asked for) are returned, for their own table."""
    by_key = {(r.run_tag, r.provider): r for r in report.rows}
    for pod in pods:
        r = by_key.pop((pod["run_tag"], pod["provider"]), None)
        if r is None:
            continue
        pod["pod_id"] = r.pod_id or pod.get("pod_id")
        pod["provider_state"] = r.provider_state
        pod["flags"] = list(r.flags)
        pod["gpu"] = r.gpu or pod["gpu"]
        pod["price_per_hr"] = r.price_per_hr
        if r.uptime_s is not None:
            pod["uptime_s"] = round(r.uptime_s, 1)
        pod["spend_usd"] = r.spend_usd
    return list(by_key.values())


def print_remote(report: StatusReport, rows: list[StatusRow] | None = None) -> None:
    """The provider's side of `status`: ledger notices, the provider rows (`rows`: those no pod
    row took, fold_provider_truth; default all), interrupted runs, failures, orphans, TTLs."""
    shown = report.rows if rows is None else rows
    for line in report.ledger_notices:
        console.print(f"[bold yellow]ledger:[/] {line}")
    if shown:
        from tailpod.cli.common import table_or_blocks

        console.print(table_or_blocks(console, REMOTE_TITLE, REMOTE_COLUMNS,
                                      remote_rows(StatusReport(
                                          rows=shown, errors=report.errors,
                                          checked_at=report.checked_at))))  # legend: pods.py
    for row in report.rows:
        if row.settle and any(f.startswith("interrupted") for f in row.flags):
            console.print(f"[bold red]{row.run_tag}: {', '.join(row.flags)}[/] ({row.owner} is "
                          f"gone); the provider says {row.provider_state or 'nothing'}; settle "
                          f"it with: {row.settle}")
    for error in report.errors:
        err_console.print(f"[red]provider check failed:[/] {error}")
    if report.orphans:
        console.print("[bold red]orphans bill outside the ledger:[/] kill them with "
                      "`tailpod down --all`")
    if report.expired:
        console.print("[bold red]TTL expired:[/] `tailpod down --expired`")


def print_fallback_warning(info: PodInfo | None) -> None:
    """Print fallback_warning's line when there is one (`info` None: no provider was asked)."""
    warning = fallback_warning(info) if info else None
    if warning:
        console.print(warning)


def fallback_warning(info: PodInfo) -> str | None:
    """The loud line `up` prints when capacity fallback rented a different card."""
    wanted = info.detail.get("fallback_from")
    if not wanted:
        return None
    price = f"${info.price_per_hr:.3f}/h" if info.price_per_hr is not None else "unknown $/h"
    return (f"[bold yellow]NOTE: {wanted} was not available; rented {info.gpu_type} at "
            f"{price} instead[/]")
