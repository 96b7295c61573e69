"""What `status` and `down` say, and the exit code they give, when a provider could not be
asked or billing is not proven (tailpod/cli/remote.py; issue 26: "never reassure without
evidence"). The functions are called directly with a scripted StatusReport, fakes in place of
the teardown and reconcile calls they wrap, and a real Ledger in tmp_path; their two consoles
write to buffers. Every expected line and code is written out by hand from the scripted inputs
and docs/exit-codes.md (exit 3: something may still bill), never read back from the code."""

from __future__ import annotations

import io
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

import tailpod.cli.common as common
import tailpod.pods.base as pods_base
import tailpod.pods.lanes as lanes
import tailpod.provision.teardown as teardown_mod
from tailpod.cli import remote
from tailpod.config import Settings
from tailpod.errors import BillingNotProven, ConfigError, ProviderError
from tailpod.ledger import Ledger, PodRecord
from tailpod.provision.base import BillingEvidence, PodInfo, PodState, ProofCheck
from tailpod.provision.reconcile import StatusReport, StatusRow
from tailpod.provision.teardown import (
    DownAllPlan,
    LifecyclePolicy,
    TeardownOutcome,
    UnprovenTeardown,
)
from tailpod.secrets import Secret

WIDE = 400  # no line of these tests folds at this width


@dataclass
class Out:
    stdout: io.StringIO
    stderr: io.StringIO

    def out(self) -> str:
        return self.stdout.getvalue()

    def err(self) -> str:
        return self.stderr.getvalue()


@pytest.fixture
def out(monkeypatch: pytest.MonkeyPatch) -> Out:
    """remote.console / remote.err_console, wide and colourless, into buffers."""
    o = Out(io.StringIO(), io.StringIO())
    monkeypatch.setattr(remote, "console", Console(file=o.stdout, width=WIDE, color_system=None,
                                                   highlight=False))
    monkeypatch.setattr(remote, "err_console", Console(file=o.stderr, width=WIDE,
                                                       color_system=None, highlight=False))
    return o


def _settings(tmp_path: Path, *, runpod: bool = False, vast: bool = False) -> Settings:
    return Settings(home=tmp_path / "home", results_dir=tmp_path / "results",
                    runpod_api_key=Secret("rp-test-key-remote") if runpod else None,
                    vast_api_key=Secret("vast-test-key-remote") if vast else None)


def _ledger(settings: Settings, *records: tuple[str, str, str]) -> Ledger:
    ledger = Ledger(settings.state_dir)
    for tag, provider, status in records:
        ledger.put(PodRecord(run_tag=tag, provider=provider, status=status, pod_id="p-" + tag))
    return ledger


def _row(tag: str = "tp-a", **kw: Any) -> StatusRow:
    fields: dict[str, Any] = {"provider": "runpod", "pod_id": None, "ledger_status": None,
                              "provider_state": None, "gpu": None, "gpu_count": None,
                              "price_per_hr": None, "uptime_s": None, "spend_usd": None,
                              "ttl_expires_at": None}
    fields.update(kw)
    return StatusRow(run_tag=tag, **fields)


def _evidence(*checks: tuple[str, bool, str], still: tuple[str, ...] = ()) -> BillingEvidence:
    return BillingEvidence([ProofCheck(n, p, d) for n, p, d in checks], list(still))


def _lines(text: str) -> list[str]:
    return [line.rstrip() for line in text.splitlines()]


def _cells(table: Any) -> list[list[str]]:
    columns = table.columns
    return [[str(c._cells[i]) for c in columns] for i in range(table.row_count)]  # noqa: SLF001


# -- unknown_line ---------------------------------------------------------------------------------
def test_no_error_means_nothing_unknown(tmp_path: Path) -> None:
    ledger = _ledger(_settings(tmp_path), ("tp-a", "runpod", "running"))
    assert remote.unknown_line(StatusReport(rows=[], errors=[], checked_at=0.0), ledger) is None


def test_an_unasked_provider_names_each_error_and_the_ledgers_cloud_pods(tmp_path: Path) -> None:
    # Two active cloud pods count; the local one and the terminated one do not.
    ledger = _ledger(_settings(tmp_path), ("tp-a", "runpod", "running"),
                     ("tp-b", "vastai", "terminating"), ("tp-c", "local", "running"),
                     ("tp-d", "runpod", "terminated"))
    report = StatusReport(rows=[], errors=["runpod: HTTP 503", "vastai: timed out"],
                          checked_at=0.0)
    assert remote.unknown_line(report, ledger) == (
        "could not ask runpod: HTTP 503; vastai: timed out; the ledger holds 2 cloud pods, and "
        "pods it does not hold cannot be ruled out: whether anything bills is unknown")


@pytest.mark.parametrize(("records", "held"), [
    ((), "0 cloud pods"),
    ((("tp-a", "runpod", "running"),), "1 cloud pod"),
])
def test_the_ledgers_count_is_singular_only_for_one(
        tmp_path: Path, records: tuple[tuple[str, str, str], ...], held: str) -> None:
    ledger = _ledger(_settings(tmp_path), *records)
    line = remote.unknown_line(StatusReport(rows=[], errors=["runpod: down"], checked_at=0.0),
                               ledger)
    assert line == (f"could not ask runpod: down; the ledger holds {held}, and pods it does not "
                    "hold cannot be ruled out: whether anything bills is unknown")


# -- remote_report --------------------------------------------------------------------------------
@pytest.fixture
def asked(monkeypatch: pytest.MonkeyPatch) -> list[tuple[Any, ...]]:
    """status_remote replaced: each call logged, answering a one-row report."""
    calls: list[tuple[Any, ...]] = []

    def status_remote(settings: Settings, ledger: Ledger) -> StatusReport:
        calls.append((settings, ledger))
        return StatusReport(rows=[_row("tp-z")], errors=[], checked_at=5.0)

    monkeypatch.setattr(remote, "status_remote", status_remote)
    return calls


@pytest.mark.parametrize("records", [(), (("tp-l", "local", "running"),),
                                     (("tp-t", "runpod", "terminated"),)])
def test_no_cloud_key_and_no_live_cloud_record_asks_nobody(
        tmp_path: Path, asked: list[tuple[Any, ...]],
        records: tuple[tuple[str, str, str], ...]) -> None:
    settings = _settings(tmp_path)
    assert remote.remote_report(settings, _ledger(settings, *records)) is None
    assert asked == []


@pytest.mark.parametrize(("keys", "records"), [
    ({"runpod": True}, ()),
    ({"vast": True}, (("tp-l", "local", "running"),)),
    ({}, (("tp-l", "local", "running"), ("tp-v", "vastai", "running"))),  # no key, a live pod
])
def test_a_cloud_key_or_a_live_cloud_record_asks_the_providers(
        tmp_path: Path, asked: list[tuple[Any, ...]], keys: dict[str, bool],
        records: tuple[tuple[str, str, str], ...]) -> None:
    settings = _settings(tmp_path, **keys)
    ledger = _ledger(settings, *records)
    report = remote.remote_report(settings, ledger)
    assert report is not None and [r.run_tag for r in report.rows] == ["tp-z"]
    assert asked == [(settings, ledger)]


def test_a_failed_provider_check_is_an_error_row_never_an_empty_report(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def status_remote(_settings: Settings, _ledger: Ledger) -> StatusReport:
        raise ProviderError("runpod: HTTP 502 from the API")

    monkeypatch.setattr(remote, "status_remote", status_remote)
    monkeypatch.setattr(remote.time, "time", lambda: 1_700_000_000.0)
    settings = _settings(tmp_path, runpod=True)
    ledger = _ledger(settings, ("tp-a", "runpod", "running"))
    report = remote.remote_report(settings, ledger)
    assert report is not None
    assert (report.rows, report.errors, report.checked_at) == (
        [], ["runpod: HTTP 502 from the API"], 1_700_000_000.0)
    # status --json: the rate is unknown with its reason, never 0 (docs/exit-codes.md)
    doc = report.to_json()
    assert doc["rate_per_hr_now"] is None
    assert doc["rate_unknown_reason"] == "could not ask runpod: HTTP 502 from the API"
    assert remote.unknown_line(report, ledger) == (
        "could not ask runpod: HTTP 502 from the API; the ledger holds 1 cloud pod, and pods it "
        "does not hold cannot be ruled out: whether anything bills is unknown")


# -- down_policy ----------------------------------------------------------------------------------
def test_downs_policy_ends_every_wait_at_the_timeout_and_says_the_elapsed_time(
        out: Out, monkeypatch: pytest.MonkeyPatch) -> None:
    clock = [1000.0]
    monkeypatch.setattr(remote.time, "monotonic", lambda: clock[0])
    policy = remote.down_policy(360.0)
    assert policy.progress is not None
    # The lifecycle's own waits are kept; only the deadline and the progress line are `down`'s.
    assert policy == LifecyclePolicy(deadline=1360.0, progress=policy.progress)
    clock[0] = 1012.4
    policy.say("waiting for runpod p-1 to go")
    clock[0] = 1100.6
    policy.say("still listed")
    assert _lines(out.err()) == ["   12 s waiting for runpod p-1 to go", "  101 s still listed"]
    assert out.out() == ""


def test_downs_policy_without_a_timeout_has_no_deadline(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(remote.time, "monotonic", lambda: 50.0)
    policy = remote.down_policy(None)
    assert policy.deadline is None and policy.progress is not None


# -- record_or_provider_truth ---------------------------------------------------------------------
@pytest.fixture
def found(monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """find_at_providers replaced: logs its calls, answers `found["record"]`."""
    state: dict[str, Any] = {"calls": [], "record": None}

    def find_at_providers(settings: Settings, ledger: Ledger, run_tag: str) -> PodRecord | None:
        state["calls"].append((settings, ledger, run_tag))
        record: PodRecord | None = state["record"]
        return record

    monkeypatch.setattr(remote, "find_at_providers", find_at_providers)
    return state


def test_the_ledgers_record_is_used_when_it_holds_the_tag(
        tmp_path: Path, out: Out, found: dict[str, Any]) -> None:
    settings = _settings(tmp_path, runpod=True)
    ledger = _ledger(settings, ("tp-a", "runpod", "running"), ("tp-b", "runpod", "running"))
    record = remote.record_or_provider_truth(settings, ledger, "tp-b")
    assert (record.run_tag, record.pod_id) == ("tp-b", "p-tp-b")
    assert found["calls"] == [] and out.err() == "" and out.out() == ""


def test_no_tag_resolves_the_only_active_pod(tmp_path: Path, found: dict[str, Any]) -> None:
    settings = _settings(tmp_path, runpod=True)
    ledger = _ledger(settings, ("tp-a", "runpod", "running"))
    assert remote.record_or_provider_truth(settings, ledger, None).run_tag == "tp-a"


@pytest.mark.parametrize(("tag", "runpod", "message"), [
    (None, True, "nothing is running: the ledger has no active pod"),
    ("other-1", True, "no pod with run tag other-1 in the ledger"),  # not a tailpod tag
    ("tp-lost", False, "no pod with run tag tp-lost in the ledger"),  # no cloud to ask
])
def test_what_the_providers_cannot_answer_is_the_ledgers_own_refusal(
        tmp_path: Path, found: dict[str, Any], tag: str | None, runpod: bool,
        message: str) -> None:
    settings = _settings(tmp_path, runpod=runpod)
    with pytest.raises(ConfigError) as refused:
        remote.record_or_provider_truth(settings, _ledger(settings), tag)
    assert refused.value.message == message and refused.value.exit_code == 2
    assert found["calls"] == []


def test_a_tag_no_provider_lists_is_refused_naming_both_places(
        tmp_path: Path, found: dict[str, Any]) -> None:
    settings = _settings(tmp_path, vast=True)
    ledger = _ledger(settings)
    with pytest.raises(ConfigError) as refused:
        remote.record_or_provider_truth(settings, ledger, "tp-lost")
    assert refused.value.message == ("no pod with run tag tp-lost in the ledger or at any "
                                     "configured provider")
    assert refused.value.hint == "tailpod status" and refused.value.exit_code == 2
    assert refused.value.__suppress_context__  # `from None`: one line, not two tracebacks
    assert found["calls"] == [(settings, ledger, "tp-lost")]


def test_a_tag_a_provider_lists_is_taken_from_it_and_said(
        tmp_path: Path, out: Out, found: dict[str, Any]) -> None:
    settings = _settings(tmp_path, runpod=True)
    rec = PodRecord(run_tag="tp-lost", provider="runpod", status="terminating", pod_id="rp-1")
    rec.extra.provider_ids = ["rp-1", "rp-2"]
    found["record"] = rec
    assert remote.record_or_provider_truth(settings, _ledger(settings), "tp-lost") is rec
    assert _lines(out.err()) == ["tp-lost is not in the ledger; runpod lists it as rp-1, rp-2: "
                                 "written back"]


def test_pending_ledger_damage_is_said_before_anything_else(
        tmp_path: Path, out: Out, found: dict[str, Any]) -> None:
    settings = _settings(tmp_path, runpod=True)
    ledger = _ledger(settings, ("tp-a", "runpod", "running"))
    (ledger.home / "ledger.json").write_bytes(b"{not json")  # restored from the last good copy
    assert remote.record_or_provider_truth(settings, ledger, "tp-a").run_tag == "tp-a"
    lines = _lines(out.err())
    assert len(lines) == 1
    assert lines[0].startswith("ledger: the ledger was damaged at ")
    assert ": ledger.json (JSONDecodeError); kept as " in lines[0]
    assert lines[0].endswith("; restored from ledger.last-good.json (nothing lost)")


# -- evidence_table, _print_unproven --------------------------------------------------------------
def test_the_proof_table_shows_each_check_passed_or_failed() -> None:
    table = remote.evidence_table(_evidence(("gone", True, "not listed"),
                                            ("meter", False, "still accruing")), "down tp-a")
    assert table.title == "down tp-a"
    assert [str(c.header) for c in table.columns] == ["check", "result", "detail"]
    assert _cells(table) == [["gone", "[green]pass[/]", "not listed"],
                             ["meter", "[red]FAIL[/]", "still accruing"]]


def test_a_check_that_saw_nothing_reads_not_informative_never_pass() -> None:
    """newcomer 2.20: a meter read inside its update delay said "not informative" in its own
    detail and "pass" in the result column."""
    evidence = BillingEvidence(checks=[
        ProofCheck("tag-listing", True, "lists nothing tagged tp-a"),
        ProofCheck("meter", True, "not informative: no movement", informative=False),
    ])
    assert _cells(remote.evidence_table(evidence, "down tp-a")) == [
        ["tag-listing", "[green]pass[/]", "lists nothing tagged tp-a"],
        ["meter", "[yellow]not informative[/]", "not informative: no movement"],
    ]


def test_each_line_that_still_bills_is_printed(out: Out) -> None:
    remote._print_unproven(_evidence(("meter", False, "x"),  # noqa: SLF001
                                     still=("runpod p-1: stop it by hand", "vastai 7: too")))
    assert _lines(out.out()) == ["STILL BILLING runpod p-1: stop it by hand",
                                 "STILL BILLING vastai 7: too"]


# -- down_remote_cli ------------------------------------------------------------------------------
PROVEN_DOC = {"schema": "tailpod.billing-proof/1", "run_tag": "tp-a", "proven": True}
UNPROVEN_DOC = {"schema": "tailpod.billing-proof/1", "run_tag": "tp-a", "proven": False}
STILL = "runpod p-tp-a: stop it by hand — https://console.runpod.io/pods"


@dataclass
class DownScript:
    """The pod's down (pods/down.py) replaced: writes the proof the real one would, then answers
    or raises."""

    proven: bool
    proof_written: bool = True
    calls: list[tuple[Any, ...]] | None = None

    def __call__(self, settings: Settings, ledger: Ledger, record: PodRecord, *,
                 policy: LifecyclePolicy | None = None) -> BillingEvidence:
        assert self.calls is not None
        self.calls.append((settings, ledger, record, policy))
        path = Path(settings.results_dir) / record.run_tag / "billing-proof.json"
        if self.proof_written:
            path.parent.mkdir(parents=True)
            path.write_text(json.dumps(PROVEN_DOC if self.proven else UNPROVEN_DOC))
        if self.proven:
            return _evidence(("gone-from-provider", True, "not listed"))
        raise UnprovenTeardown("billing is NOT proven stopped for tp-a: " + STILL,
                               "kill it with `tailpod down tp-a`",
                               _evidence(("gone-from-provider", False, "still listed"),
                                         still=(STILL,)),
                               path if self.proof_written else None)


def _down(monkeypatch: pytest.MonkeyPatch, script: DownScript) -> list[tuple[Any, ...]]:
    script.calls = []
    monkeypatch.setattr(remote, "down_pod", script)
    return script.calls


def _record() -> PodRecord:
    return PodRecord(run_tag="tp-a", provider="runpod", status="running", pod_id="p-tp-a")


def test_a_proven_down_prints_the_table_the_proof_and_the_verdict(
        tmp_path: Path, out: Out, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    calls = _down(monkeypatch, DownScript(proven=True))
    settings = _settings(tmp_path, runpod=True)
    ledger = _ledger(settings)
    record, policy = _record(), LifecyclePolicy(gone_timeout_s=7.0)
    seen: list[tuple[Path, bool]] = []
    remote.down_remote_cli(settings, ledger, record, False, policy=policy,
                           after=lambda p: seen.append((p, p.exists())))
    proof = tmp_path / "results" / "tp-a" / "billing-proof.json"
    assert calls == [(settings, ledger, record, policy)]
    assert seen == [(proof, True)]
    text = out.out()
    assert _lines(text)[0].strip() == "down tp-a"  # the table's title
    assert "gone-from-provider" in text and "pass" in text
    assert _lines(text)[-2:] == [f"proof: {proof}",
                                 "down tp-a: terminated, billing proven stopped."]
    assert capsys.readouterr().out == ""


def test_a_proven_down_under_json_prints_only_the_proof_document(
        tmp_path: Path, out: Out, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    _down(monkeypatch, DownScript(proven=True))
    settings = _settings(tmp_path, runpod=True)
    seen: list[Path] = []
    remote.down_remote_cli(settings, _ledger(settings), _record(), True, after=seen.append)
    assert json.loads(capsys.readouterr().out) == PROVEN_DOC
    assert out.out() == "" and seen == [tmp_path / "results" / "tp-a" / "billing-proof.json"]


def test_a_proven_down_needs_no_after(tmp_path: Path, out: Out,
                                      monkeypatch: pytest.MonkeyPatch) -> None:
    calls = _down(monkeypatch, DownScript(proven=True))
    settings = _settings(tmp_path, runpod=True)
    remote.down_remote_cli(settings, _ledger(settings), _record(), False)
    assert calls[0][3] is None  # no policy given: down_remote's own default
    assert _lines(out.out())[-1] == "down tp-a: terminated, billing proven stopped."


def test_an_unproven_down_prints_what_bills_and_exits_3(
        tmp_path: Path, out: Out, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    _down(monkeypatch, DownScript(proven=False))
    settings = _settings(tmp_path, runpod=True)
    seen: list[Path] = []
    with pytest.raises(UnprovenTeardown) as failed:
        remote.down_remote_cli(settings, _ledger(settings), _record(), False, after=seen.append)
    assert failed.value.exit_code == 3
    assert seen == [tmp_path / "results" / "tp-a" / "billing-proof.json"]
    text = out.out()
    assert _lines(text)[0].strip() == "down tp-a"
    assert "still listed" in text and "FAIL" in text
    assert _lines(text)[-1] == f"STILL BILLING {STILL}"
    assert "proven stopped." not in text and "proof:" not in text
    assert capsys.readouterr().out == ""


def test_an_unproven_down_under_json_prints_the_proof_and_exits_3(
        tmp_path: Path, out: Out, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    _down(monkeypatch, DownScript(proven=False))
    settings = _settings(tmp_path, runpod=True)
    with pytest.raises(UnprovenTeardown):
        remote.down_remote_cli(settings, _ledger(settings), _record(), True)
    assert json.loads(capsys.readouterr().out) == UNPROVEN_DOC
    assert out.out() == ""


def test_an_unproven_down_with_no_proof_file_still_shows_what_bills(
        tmp_path: Path, out: Out, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    """The disk refused the proof (LedgerUnwritable has no path): nothing to hand `after` or to
    print as JSON, so the table and the STILL BILLING lines are printed, even under --json."""
    _down(monkeypatch, DownScript(proven=False, proof_written=False))
    settings = _settings(tmp_path, runpod=True)
    seen: list[Path] = []
    with pytest.raises(UnprovenTeardown) as failed:
        remote.down_remote_cli(settings, _ledger(settings), _record(), True, after=seen.append)
    assert failed.value.exit_code == 3 and seen == []
    assert _lines(out.out())[-1] == f"STILL BILLING {STILL}"
    assert capsys.readouterr().out == ""


# -- down_many_cli --------------------------------------------------------------------------------
@dataclass
class ManyScript:
    """The provider-level halves of `down --all` under pods/down.py: the plan holds `local` (a
    run downed through its kind, whose teardown is scripted to prove it) and no cloud; the cloud
    batch answers `outcomes` after passing each of `recovered` on."""

    outcomes: list[TeardownOutcome]
    recovered: tuple[str, ...] = ()
    local: PodRecord | None = None  # downed through its kind, as down_many does for a local run
    calls: list[dict[str, Any]] | None = None
    before_gave: list[PodRecord] | None = None  # what the local run's teardown was handed

    def plan(self, _settings: Settings, _ledger: Ledger, *, expired_only: bool) -> DownAllPlan:
        return DownAllPlan([self.local] if self.local is not None else [], {})

    def teardown(self, _settings: Settings, _ledger: Ledger, record: PodRecord, *,
                 policy: LifecyclePolicy | None = None) -> BillingEvidence:
        self.before_gave = [*(self.before_gave or []), record]
        return _evidence(("gone", True, f"{record.run_tag} not listed"))

    def __call__(self, settings: Settings, ledger: Ledger, _providers: Any,
                 **kw: Any) -> list[TeardownOutcome]:
        assert self.calls is not None
        self.calls.append({"settings": settings, "ledger": ledger, **kw})
        for line in self.recovered:
            kw["on_recovery"](line)
        return self.outcomes


def _many(monkeypatch: pytest.MonkeyPatch, script: ManyScript) -> ManyScript:
    script.calls = []
    # the provider-level halves under the pods' down_many (pods/down.py), which downs each local
    # run through its kind (pods/base.py settle_then_teardown)
    monkeypatch.setattr(teardown_mod, "plan_down_many", script.plan)
    monkeypatch.setattr(teardown_mod, "down_clouds", script)
    monkeypatch.setattr(pods_base, "down_remote", script.teardown)
    return script


def _proven_outcome(tag: str, provider: str) -> TeardownOutcome:
    return TeardownOutcome(tag, provider, _evidence(("gone", True, f"{tag} not listed")),
                           proof_path=f"/r/{tag}/billing-proof.json")


@pytest.mark.parametrize(("expired_only", "said"), [
    (False, "nothing tailpod-tagged is left at any provider"),
    (True, "nothing tailpod-tagged has expired"),
])
def test_nothing_to_take_down_is_said_and_passes(
        tmp_path: Path, out: Out, monkeypatch: pytest.MonkeyPatch, expired_only: bool,
        said: str) -> None:
    script = _many(monkeypatch, ManyScript([]))
    settings = _settings(tmp_path, runpod=True)
    ledger = _ledger(settings)
    policy = LifecyclePolicy(poll_interval_s=9.0)
    remote.down_many_cli(settings, ledger, expired_only=expired_only, json_out=False,
                         policy=policy)
    assert _lines(out.out()) == [said]
    assert script.calls is not None and len(script.calls) == 1
    call = script.calls[0]
    assert (call["settings"], call["ledger"], call["expired_only"], call["policy"]) == (
        settings, ledger, expired_only, policy)


def test_down_all_proven_prints_each_table_and_passes(
        tmp_path: Path, out: Out, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    _many(monkeypatch, ManyScript([_proven_outcome("tp-a", "runpod"),
                                   _proven_outcome("tp-b", "vastai")]))
    settings = _settings(tmp_path, runpod=True)
    remote.down_many_cli(settings, _ledger(settings), expired_only=False, json_out=False)
    text = out.out()
    assert "down tp-a (runpod)" in text and "down tp-b (vastai)" in text
    assert "tp-a not listed" in text and "tp-b not listed" in text
    assert "nothing tailpod-tagged" not in text and "STILL BILLING" not in text
    assert capsys.readouterr().out == ""


def test_down_all_names_what_still_bills_and_exits_3(
        tmp_path: Path, out: Out, monkeypatch: pytest.MonkeyPatch) -> None:
    billing = TeardownOutcome("tp-b", "vastai",
                              _evidence(("gone", False, "still listed"), still=("vastai 7: stop",)),
                              "billing is NOT proven stopped for tp-b", "/r/tp-b/billing-proof.json")
    listing = TeardownOutcome("*", "runpod", None, "listing failed: HTTP 503")
    silent = TeardownOutcome("tp-c", "runpod", None)  # neither evidence nor error: nothing to say
    _many(monkeypatch, ManyScript([_proven_outcome("tp-a", "runpod"), billing, listing, silent]))
    settings = _settings(tmp_path, runpod=True)
    with pytest.raises(BillingNotProven) as failed:
        remote.down_many_cli(settings, _ledger(settings), expired_only=False, json_out=False)
    assert failed.value.exit_code == 3
    lines = _lines(out.out())
    assert "STILL BILLING vastai 7: stop" in lines
    assert lines[-1] == "runpod *: listing failed: HTTP 503"
    assert not any("tp-c" in line for line in lines)
    assert failed.value.message.startswith("billing is NOT proven stopped: vastai 7: stop | "
                                           "runpod *: listing failed: HTTP 503")


def test_down_all_under_json_prints_one_document_of_every_outcome(
        tmp_path: Path, out: Out, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    billing = TeardownOutcome("tp-b", "vastai",
                              _evidence(("gone", False, "still listed"), still=("vastai 7: stop",)),
                              "not proven", "/r/tp-b/billing-proof.json")
    listing = TeardownOutcome("*", "runpod", None, "listing failed: HTTP 503")
    _many(monkeypatch, ManyScript([_proven_outcome("tp-a", "runpod"), billing, listing]))
    settings = _settings(tmp_path, runpod=True)
    with pytest.raises(BillingNotProven):
        remote.down_many_cli(settings, _ledger(settings), expired_only=True, json_out=True)
    assert json.loads(capsys.readouterr().out) == [
        {"run_tag": "tp-a", "provider": "runpod", "proven": True, "error": None,
         "proof": "/r/tp-a/billing-proof.json", "still_billing": []},
        {"run_tag": "tp-b", "provider": "vastai", "proven": False, "error": "not proven",
         "proof": "/r/tp-b/billing-proof.json", "still_billing": ["vastai 7: stop"]},
        {"run_tag": "*", "provider": "runpod", "proven": False,
         "error": "listing failed: HTTP 503", "proof": None, "still_billing": []},
    ]
    assert out.out() == ""


def test_down_all_says_ledger_damage_and_settles_a_lanes_run_first(
        tmp_path: Path, out: Out, monkeypatch: pytest.MonkeyPatch) -> None:
    settings = _settings(tmp_path, runpod=True)
    ledger = _ledger(settings)
    local = PodRecord(run_tag="tp-l", provider="local", status="running")
    settled = PodRecord(run_tag="tp-l", provider="local", status="terminating")
    lanes_calls: list[tuple[Any, ...]] = []

    def settle_lanes(s: Settings, led: Ledger, rec: PodRecord) -> PodRecord:
        lanes_calls.append((s, led, rec))
        return settled

    monkeypatch.setattr(lanes, "settle_lanes", settle_lanes)
    script = _many(monkeypatch, ManyScript([], recovered=("restored from the copy",
                                                          "rebuilt: 0 pods"), local=local))
    remote.down_many_cli(settings, ledger, expired_only=False, json_out=False)
    assert _lines(out.err()) == ["ledger: restored from the copy", "ledger: rebuilt: 0 pods"]
    assert lanes_calls == [(settings, ledger, local)] and script.before_gave == [settled]


# -- remote_rows, remote_table, print_remote ------------------------------------------------------
def test_a_row_with_nothing_known_is_dashes_and_not_in_ledger() -> None:
    report = StatusReport(rows=[_row("tp-o")], errors=[], checked_at=0.0)
    assert remote.remote_rows(report) == [
        ["tp-o", "runpod", "-", "[red]not in ledger[/]", "-", "-", "-", "-", "-", ""]]


def test_a_full_row_is_each_value_in_its_unit() -> None:
    row = _row("tp-a", provider="vastai", pod_id="7", ledger_status="running",
               provider_state="running", gpu="RTX 4090", price_per_hr=0.5, uptime_s=5400.0,
               spend_usd=0.75, flags=["expired", "ttl 4 h"], fallback_from="H100 SXM")
    assert remote.remote_rows(StatusReport(rows=[row], errors=[], checked_at=0.0)) == [
        ["tp-a", "vastai", "7", "running", "running", "RTX 4090", "0.500", "90.0 min",
         "$0.7500", "[red]expired, ttl 4 h, fell back from H100 SXM[/]"]]


def test_zero_values_are_figures_not_dashes() -> None:
    row = _row("tp-a", price_per_hr=0.0, uptime_s=0.0, spend_usd=0.0, flags=["orphan"])
    assert remote.remote_rows(StatusReport(rows=[row], errors=[], checked_at=0.0))[0][6:] == [
        "0.000", "0.0 min", "$0.0000", "[red]orphan[/]"]


def test_a_fallback_alone_is_the_only_flag() -> None:
    row = _row("tp-a", fallback_from="H100 SXM")
    assert remote.remote_rows(StatusReport(rows=[row], errors=[], checked_at=0.0))[0][9] == (
        "[red]fell back from H100 SXM[/]")


def test_the_remote_table_has_its_title_columns_and_rows() -> None:
    report = StatusReport(rows=[_row("tp-a"), _row("tp-b", pod_id="9")], errors=[],
                          checked_at=0.0)
    table = remote.remote_table(report)
    assert table.title == "cloud pods (provider truth)"
    assert [str(c.header) for c in table.columns] == [
        "run tag", "provider", "pod", "ledger", "provider says", "GPU", "$/hr", "uptime",
        "spent", "flags"]
    assert [row[:3] for row in _cells(table)] == [["tp-a", "runpod", "-"],
                                                  ["tp-b", "runpod", "9"]]


def test_print_remote_says_every_part_of_a_troubled_report(
        out: Out, monkeypatch: pytest.MonkeyPatch) -> None:
    laid_out: list[tuple[Any, ...]] = []

    def table_or_blocks(con: Console, title: str, columns: list[str],
                        rows: list[list[str]]) -> str:
        laid_out.append((con, title, columns, rows))
        return "<the table>"

    monkeypatch.setattr(common, "table_or_blocks", table_or_blocks)
    interrupted = _row("tp-i", ledger_status="creating", provider_state="running",
                       flags=["interrupted: up (creating)"], settle="tailpod down tp-i",
                       owner="pid 4242 on laptop")
    unsettled = _row("tp-u", flags=["interrupted: down"])  # no settle command: no line
    orphan = _row("tp-o", flags=["orphan"], settle="tailpod down --all")
    expired = _row("tp-e", ledger_status="running", provider_state="running", flags=["expired"],
                   settle="tailpod down --expired")
    report = StatusReport(rows=[interrupted, unsettled, orphan, expired],
                          errors=["runpod: HTTP 503", "vastai: timed out"], checked_at=0.0,
                          ledger_notices=["the ledger was damaged; restored"])
    remote.print_remote(report)
    assert laid_out == [(remote.console, "cloud pods (provider truth)", remote.REMOTE_COLUMNS,
                         remote.remote_rows(report))]
    assert _lines(out.out()) == [
        "ledger: the ledger was damaged; restored",
        "<the table>",
        "tp-i: interrupted: up (creating) (pid 4242 on laptop is gone); the provider says "
        "running; settle it with: tailpod down tp-i",
        "orphans bill outside the ledger: kill them with `tailpod down --all`",
        "TTL expired: `tailpod down --expired`",
    ]
    assert _lines(out.err()) == ["provider check failed: runpod: HTTP 503",
                                 "provider check failed: vastai: timed out"]


def test_an_interrupted_pod_the_provider_does_not_list_says_nothing(out: Out) -> None:
    row = _row("tp-i", ledger_status="creating", flags=["ghost", "interrupted: up"],
               settle="tailpod down tp-i", owner="pid 1 on box")
    remote.print_remote(StatusReport(rows=[row], errors=[], checked_at=0.0))
    assert _lines(out.out())[-1] == ("tp-i: ghost, interrupted: up (pid 1 on box is gone); the "
                                     "provider says nothing; settle it with: tailpod down tp-i")


def test_a_quiet_report_prints_only_its_table(out: Out) -> None:
    row = _row("tp-a", ledger_status="running", provider_state="running", pod_id="p1",
               settle="tailpod down tp-a")  # a settle command without an interrupted flag
    remote.print_remote(StatusReport(rows=[row], errors=[], checked_at=0.0))
    text = out.out()
    assert "cloud pods (provider truth)" in text and "tp-a" in text and "p1" in text
    assert "settle" not in text and "orphans" not in text and "TTL expired" not in text
    assert out.err() == ""


def test_an_empty_report_prints_nothing(out: Out) -> None:
    remote.print_remote(StatusReport(rows=[], errors=[], checked_at=0.0))
    assert out.out() == "" and out.err() == ""


# -- fallback_warning -----------------------------------------------------------------------------
def _info(detail: dict[str, Any], price: float | None) -> PodInfo:
    return PodInfo("p1", "tp-a", PodState.RUNNING, gpu_type="NVIDIA A40", price_per_hr=price,
                   detail=detail)


def test_no_fallback_no_warning() -> None:
    assert remote.fallback_warning(_info({}, 0.4)) is None
    assert remote.fallback_warning(_info({"fallback_from": ""}, 0.4)) is None


def test_a_fallback_names_the_card_wanted_and_the_one_rented_at_its_price() -> None:
    assert remote.fallback_warning(_info({"fallback_from": "H100 SXM"}, 0.4)) == (
        "[bold yellow]NOTE: H100 SXM was not available; rented NVIDIA A40 at $0.400/h "
        "instead[/]")
    assert remote.fallback_warning(_info({"fallback_from": "H100 SXM"}, 0.0)) == (
        "[bold yellow]NOTE: H100 SXM was not available; rented NVIDIA A40 at $0.000/h "
        "instead[/]")


def test_a_fallback_with_no_stated_price_says_so() -> None:
    assert remote.fallback_warning(_info({"fallback_from": "H100 SXM"}, None)) == (
        "[bold yellow]NOTE: H100 SXM was not available; rented NVIDIA A40 at unknown $/h "
        "instead[/]")
