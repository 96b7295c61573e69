"""The recovery entry points of provision/reconcile.py, called directly: the sentence a user reads
for a ledger damage notice (`describe_recovery`), the pods a rebuild writes back
(`adopt_from_providers`), whether the tailnet still has a pod's device (`_tailnet_lister`) and
`down TAG` for a tag the ledger lacks (`find_at_providers`). Written to reach the 161 mutants no
selected test called (#26, docs/testing.md "### provision/reconcile.py"). The providers are
scripted in memory, the ledger is a real one in tmp_path, and every expected value is written out
by hand from the scripted inputs, never read back from the code under test."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest

import tailpod.provision.tailnet.devices as devices
import tailpod.provision.tailnet.steps as steps
from tailpod.config import Settings
from tailpod.errors import ConfigError, ProviderError, TransientError
from tailpod.ledger import Ledger, PodRecord
from tailpod.provision.base import PodInfo, PodState
from tailpod.provision.reconcile import (
    _tailnet_lister,
    adopt_from_providers,
    describe_recovery,
    find_at_providers,
)
from tailpod.secrets import Secret
from tests.unit.provision.scripted_cloud import ScriptedCloud

T = 1_800_000_000.0  # 2027-01-15T08:00:00 UTC (`date -u -d @1800000000`)
STARTED = 1_799_990_000.0  # 2027-01-15T05:13:20 UTC, a listed pod's creation time
REBUILD = "; no readable copy was left, so the ledger is rebuilt from the providers"


class Scripted(ScriptedCloud):
    """A cloud the recovery entry points may only list."""

    def get(self, pod_id: str) -> PodInfo | None:
        raise AssertionError("recovery only lists")


def _pod(pod_id: str, tag: str | None, state: PodState = PodState.RUNNING, *, gpu: str = "A40",
         count: int | None = 2, price: float | None = 0.5,
         created: Any = None) -> PodInfo:
    return PodInfo(pod_id, tag, state, gpu_type=gpu, gpu_count=count, price_per_hr=price,
                   detail={"created_at": created})


def _settings(tmp_path: Path, *, runpod: bool = True, vast: bool = True,
              tailscale: bool = False) -> Settings:
    return Settings(home=tmp_path / "home",
                    runpod_api_key=Secret("rp-test-key-entry") if runpod else None,
                    vast_api_key=Secret("vast-test-key-entry") if vast else None,
                    tailscale_api_key=Secret("ts-test-key-entry") if tailscale else None)


def _record(rec: PodRecord) -> tuple[Any, ...]:
    """What a rebuild writes that status and down read back."""
    return (rec.provider, rec.pod_id, rec.extra.provider_ids, rec.status, rec.gpu, rec.gpu_count,
            rec.price_per_hr, rec.tailnet)


def _events(rec: PodRecord) -> list[dict[str, Any]]:
    return [{k: v for k, v in e.items() if k != "t"} for e in rec.events]


@pytest.fixture
def tailnet(monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """The Tailscale API at the seam `_tailnet_lister` imports: `tailnet["devices"]` are the
    hostnames it holds, `tailnet["fail"]` an error the API raises; every hostname asked is kept."""
    state: dict[str, Any] = {"devices": set(), "fail": None, "asked": [], "settings": []}

    @contextlib.contextmanager
    def api(settings: Settings) -> Iterator[str]:
        state["settings"].append(settings)
        yield "the-api"

    def find(api: Any, hostname: str) -> list[str]:
        assert api == "the-api"
        state["asked"].append(hostname)
        if state["fail"] is not None:
            raise state["fail"]
        return [hostname] if hostname in state["devices"] else []

    monkeypatch.setattr(steps, "api_from_settings", api)
    monkeypatch.setattr(devices, "find_devices", find)
    return state


# -- describe_recovery ---------------------------------------------------------------------------
def test_a_ledger_restored_from_its_last_good_copy_reads_nothing_lost() -> None:
    notice = {"t": T, "damaged": {"ledger.json": "JSONDecodeError"},
              "set_aside": ["/h/ledger.damaged-20270115T080000Z.json"],
              "restored_from": "ledger.last-good.json"}
    assert describe_recovery(notice) == (
        "the ledger was damaged at 2027-01-15T08:00:00+00:00: ledger.json (JSONDecodeError)"
        "; kept as /h/ledger.damaged-20270115T080000Z.json"
        "; restored from ledger.last-good.json (nothing lost)")


def test_a_ledger_with_no_readable_copy_reads_rebuilt_and_every_damage_is_named() -> None:
    notice = {"t": T, "damaged": {"ledger.json": "missing", "ledger.last-good.json": "bad"},
              "set_aside": ["/h/a.json", "/h/b.json"], "restored_from": None,
              "settled": {"t": T + 5, "summary": "rebuilt from runpod: 2 pod(s) found and "
                                                  "written back (tp-a, tp-b)"}}
    assert describe_recovery(notice) == (
        "the ledger was damaged at 2027-01-15T08:00:00+00:00: ledger.json (missing), "
        "ledger.last-good.json (bad); kept as /h/a.json, /h/b.json" + REBUILD
        + "; rebuilt from runpod: 2 pod(s) found and written back (tp-a, tp-b)")


def test_a_pending_notice_with_nothing_set_aside_says_only_what_was_damaged() -> None:
    # A missing file is named but nothing is kept; a notice not settled adds no summary.
    notice = {"t": T, "damaged": {"ledger.json": "missing"}, "set_aside": [],
              "restored_from": "ledger.last-good.json"}
    assert describe_recovery(notice) == (
        "the ledger was damaged at 2027-01-15T08:00:00+00:00: ledger.json (missing)"
        "; restored from ledger.last-good.json (nothing lost)")


def test_a_notice_missing_its_lists_or_holding_an_odd_settled_still_reads() -> None:
    # Written by an older tailpod or by hand: no `damaged`, no `set_aside`; a `settled` that is
    # not a mapping, or a mapping without a summary, adds nothing.
    assert describe_recovery({"t": T}) == (
        "the ledger was damaged at 2027-01-15T08:00:00+00:00: " + REBUILD)
    assert describe_recovery({"t": T, "restored_from": "x", "settled": "yes"}) == (
        "the ledger was damaged at 2027-01-15T08:00:00+00:00: ; restored from x (nothing lost)")
    assert describe_recovery({"t": T, "restored_from": "x", "settled": {"t": T}}) == (
        "the ledger was damaged at 2027-01-15T08:00:00+00:00: ; restored from x (nothing lost)")


def test_a_notice_without_its_time_reads_the_time_it_is_read_at() -> None:
    before = int(time.time())  # whole seconds: the sentence gives no fraction
    line = describe_recovery({"restored_from": "ledger.last-good.json"})
    after = time.time()
    head, rest = "the ledger was damaged at ", "+00:00: ; restored from ledger.last-good.json " \
        "(nothing lost)"
    assert line.startswith(head) and line.endswith(rest)
    stamp = line[len(head):len(line) - len(rest)]
    read = datetime.strptime(stamp, "%Y-%m-%dT%H:%M:%S").replace(tzinfo=timezone.utc)
    assert before <= read.timestamp() <= after


# -- adopt_from_providers ------------------------------------------------------------------------
def test_a_rebuild_writes_back_each_tagged_pod_once_with_what_its_provider_listed(
        tmp_path: Path) -> None:
    ledger = Ledger(tmp_path / "state")
    ledger.put(PodRecord(run_tag="tp-live", provider="runpod", status="running", pod_id="old",
                         price_per_hr=9.0))
    ledger.put(PodRecord(run_tag="tp-done", provider="vastai", status="terminated", pod_id="d0"))
    rp = Scripted([
        _pod("rp-0", "tp-live", price=1.0),  # the ledger holds it live: left as it is
        _pod("rp-1", None),  # untagged: not tailpod's
        _pod("rp-2", "tp-aaa", gpu="H100", count=None, price=2.5),
        _pod("rp-3", "tp-aaa", price=7.0),  # the same tag again: written once, from the first
        _pod("rp-4", "tp-bbb", PodState.PENDING, count=0, price=None),
    ])
    va = Scripted([_pod("va-1", "tp-done", PodState.STOPPED, gpu="A6000", count=4, price=0.3),
                   _pod("va-2", "tp-aaa", price=4.0), _pod("va-3", "tp-ccc", PodState.UNKNOWN)])
    adopted, errors = adopt_from_providers({"runpod": rp, "vastai": va}, ledger)
    assert (adopted, errors) == (["tp-aaa", "tp-bbb", "tp-done", "tp-ccc"], [])
    assert rp.asked == [None] and va.asked == [None]  # every pod, not one tag
    got = {r.run_tag: _record(r) for r in ledger.all()}
    assert got == {
        "tp-live": ("runpod", "old", [], "running", None, 1, 9.0, {}),
        "tp-aaa": ("runpod", "rp-2", ["rp-2"], "running", "H100", 1, 2.5, {}),
        "tp-bbb": ("runpod", "rp-4", ["rp-4"], "creating", "A40", 1, None, {}),
        "tp-done": ("vastai", "va-1", ["va-1"], "stopped", "A6000", 4, 0.3, {}),
        "tp-ccc": ("vastai", "va-3", ["va-3"], "creating", "A40", 2, 0.5, {}),
    }
    done = ledger.get("tp-done")
    assert done is not None and _events(done) == [
        {"event": "recovered-from-provider", "pod_id": "va-1", "state": "stopped"}]
    bbb = ledger.get("tp-bbb")
    assert bbb is not None and _events(bbb) == [
        {"event": "recovered-from-provider", "pod_id": "rp-4", "state": "pending"}]


def test_an_adopted_pod_counts_from_when_its_provider_says_it_was_created(
        tmp_path: Path) -> None:
    """Status's uptime and spend run from `created_at`: a pod vast.ai started at STARTED has cost
    0.5 $/h since then, not nothing since the rebuild. Where the listing's detail holds no number (a
    provider adapter that could not read its time leaves text or None), the record's own creation
    (the rebuild's time) stands."""
    ledger = Ledger(tmp_path / "state")
    va = Scripted([_pod("va-1", "tp-num", created=STARTED),
                   _pod("va-2", "tp-int", created=1_799_000_000),
                   _pod("rp-1", "tp-text", created="2027-01-15T05:13:20Z"),
                   _pod("rp-2", "tp-none")])
    before = time.time()
    assert adopt_from_providers({"vastai": va}, ledger)[0] == [
        "tp-num", "tp-int", "tp-text", "tp-none"]
    after = time.time()
    got = {r.run_tag: r.created_at for r in ledger.all()}
    assert (got["tp-num"], got["tp-int"]) == (STARTED, 1_799_000_000.0)
    assert all(before <= got[t] <= after for t in ("tp-text", "tp-none"))


def test_a_listing_that_fails_is_named_and_the_next_provider_is_still_asked(
        tmp_path: Path) -> None:
    ledger = Ledger(tmp_path / "state")
    rp = Scripted(error=ProviderError("runpod is down", hint="retry later"))
    va = Scripted([_pod("va-1", "tp-aaa")])
    sv = Scripted(error=TransientError("rate limited"))
    adopted, errors = adopt_from_providers({"runpod": rp, "vastai": va, "other": sv}, ledger)
    assert adopted == ["tp-aaa"]
    assert errors == ["runpod: runpod is down (retry later)", "other: rate limited"]
    assert [(r.run_tag, r.provider) for r in ledger.all()] == [("tp-aaa", "vastai")]


def test_a_rebuild_marks_the_pods_whose_device_the_tailnet_still_has(tmp_path: Path) -> None:
    ledger = Ledger(tmp_path / "state")
    asked: list[str] = []

    def lists(tag: str) -> bool:
        asked.append(tag)
        return tag == "tp-aaa"

    rp = Scripted([_pod("rp-1", "tp-aaa"), _pod("rp-2", "tp-bbb"), _pod("rp-3", None)])
    assert adopt_from_providers({"runpod": rp}, ledger, lists) == (["tp-aaa", "tp-bbb"], [])
    assert asked == ["tp-aaa", "tp-bbb"]  # adopted pods only, each once
    assert {r.run_tag: r.tailnet for r in ledger.all()} == {"tp-aaa": {"enabled": True},
                                                            "tp-bbb": {}}


# -- _tailnet_lister -----------------------------------------------------------------------------
def test_with_no_tailscale_key_there_is_no_tailnet_to_ask(
        tmp_path: Path, tailnet: dict[str, Any]) -> None:
    assert _tailnet_lister(_settings(tmp_path)) is None
    assert tailnet["asked"] == []


def test_the_tailnet_lister_says_whether_the_pods_device_is_there(
        tmp_path: Path, tailnet: dict[str, Any]) -> None:
    settings = _settings(tmp_path, tailscale=True)
    tailnet["devices"] = {"tailpod-tp-here"}
    lists = _tailnet_lister(settings)
    assert lists is not None
    assert (lists("tp-here"), lists("TP-Gone")) == (True, False)
    assert tailnet["asked"] == ["tailpod-tp-here", "tailpod-tp-gone"]  # tailnet_hostname's form
    # the caller's settings (its key), one API per question
    assert [s is settings for s in tailnet["settings"]] == [True, True]


def test_a_tailnet_that_cannot_be_asked_is_read_as_holding_the_device(
        tmp_path: Path, tailnet: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> None:
    """Unknown must let `down` try the delete and say what it found, so True, never False."""
    lists = _tailnet_lister(_settings(tmp_path, tailscale=True))
    assert lists is not None
    tailnet["fail"] = ProviderError("tailscale api: 500")
    assert lists("tp-x") is True

    def refuses(settings: Settings) -> Any:
        raise ConfigError("TAILSCALE_API_KEY is not set")

    monkeypatch.setattr(steps, "api_from_settings", refuses)
    refused = _tailnet_lister(_settings(tmp_path, tailscale=True))  # it imports when made
    assert refused is not None and refused("tp-y") is True
    assert tailnet["asked"] == ["tailpod-tp-x"]


# -- find_at_providers ---------------------------------------------------------------------------
TAG = "tp-20270115-080000-abcdef"


def test_a_tag_the_ledger_lacks_is_found_at_the_provider_that_lists_it(
        tmp_path: Path, made: dict[str, Any]) -> None:
    rp = Scripted([_pod("rp-9", "tp-other")])
    va = Scripted([_pod("va-1", TAG, gpu="A6000", count=4, price=0.31, created=STARTED),
                   _pod("va-2", TAG, price=0.9), _pod("va-3", "tp-other")])
    made["runpod"], made["vastai"] = rp, va
    ledger = Ledger(tmp_path / "state")
    rec = find_at_providers(_settings(tmp_path), ledger, TAG, timings="fast")
    assert made["calls"] == [("runpod", {"timings": "fast"}), ("vastai", {"timings": "fast"})]
    assert rp.asked == [TAG] and va.asked == [TAG]
    assert rec is not None
    want = ("vastai", "va-1", ["va-1", "va-2"], "terminating", "A6000", 1, 0.31, {})
    assert (rec.run_tag, _record(rec), rec.created_at) == (TAG, want, STARTED)
    assert _events(rec) == [{"event": "recovered-from-provider", "pod_id": "va-1"}]
    held = ledger.get(TAG)
    assert held is not None and (_record(held), held.created_at) == (want, STARTED)
    assert [r.run_tag for r in ledger.all()] == [TAG]


def test_a_found_pod_is_marked_on_the_tailnet_only_while_its_device_is_there(
        tmp_path: Path, made: dict[str, Any], tailnet: dict[str, Any]) -> None:
    made["runpod"] = Scripted([_pod("rp-1", TAG)])
    settings = _settings(tmp_path, vast=False, tailscale=True)
    tailnet["devices"] = {"tailpod-" + TAG}
    before = time.time()
    rec = find_at_providers(settings, Ledger(tmp_path / "a"), TAG)
    after = time.time()
    assert rec is not None and (rec.provider, rec.tailnet) == ("runpod", {"enabled": True})
    # listed with no creation time: the record's own (the look-up's time) stands
    assert before <= rec.created_at <= after
    tailnet["devices"] = set()
    rec = find_at_providers(settings, Ledger(tmp_path / "b"), TAG)
    assert rec is not None and rec.tailnet == {}
    assert tailnet["asked"] == ["tailpod-" + TAG] * 2


def test_a_tag_no_provider_lists_is_not_found_and_nothing_is_written(
        tmp_path: Path, made: dict[str, Any], tailnet: dict[str, Any]) -> None:
    made["runpod"], made["vastai"] = Scripted([_pod("rp-1", "tp-other")]), Scripted()
    ledger = Ledger(tmp_path / "state")
    assert find_at_providers(_settings(tmp_path, tailscale=True), ledger, TAG) is None
    assert ledger.all() == [] and tailnet["asked"] == []


def test_a_provider_that_fails_does_not_hide_the_tag_at_another(
        tmp_path: Path, made: dict[str, Any]) -> None:
    made["runpod"] = Scripted(error=ProviderError("runpod listing outage"))
    made["vastai"] = Scripted([_pod("va-1", TAG)])
    rec = find_at_providers(_settings(tmp_path), Ledger(tmp_path / "state"), TAG)
    assert rec is not None and (rec.provider, rec.pod_id) == ("vastai", "va-1")


def test_a_tag_found_nowhere_while_a_provider_failed_is_unknown_never_not_found(
        tmp_path: Path, made: dict[str, Any]) -> None:
    made["runpod"] = Scripted(error=TransientError("runpod: 503, retry in 30 s"))
    made["vastai"] = Scripted([_pod("va-1", "tp-other")])
    ledger = Ledger(tmp_path / "state")
    with pytest.raises(TransientError) as raised:  # its kind kept: a transient one exits 75
        find_at_providers(_settings(tmp_path), ledger, TAG)
    assert raised.value.message == (
        f"could not ask runpod: runpod: 503, retry in 30 s, so whether {TAG} is at a provider "
        "is unknown")
    assert ledger.all() == []


def test_every_provider_that_failed_is_named(tmp_path: Path, made: dict[str, Any]) -> None:
    made["runpod"] = Scripted(error=ProviderError("refused", hint="check the key"))
    made["vastai"] = Scripted(error=TransientError("rate limited"))
    with pytest.raises(ProviderError) as raised:
        find_at_providers(_settings(tmp_path), Ledger(tmp_path / "state"), TAG)
    assert str(raised.value) == (
        "could not ask runpod: refused (check the key); vastai: rate limited, so whether "
        f"{TAG} is at a provider is unknown")


def test_with_no_provider_configured_nothing_is_found(
        tmp_path: Path, made: dict[str, Any]) -> None:
    assert find_at_providers(_settings(tmp_path, runpod=False, vast=False),
                             Ledger(tmp_path / "state"), TAG) is None
    assert made["calls"] == []
