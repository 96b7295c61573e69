"""A damaged ledger settled against the providers (`recover_ledger`), which providers `status` asks
(`providers_for`) and what `status_remote` reports when one cannot be asked, in
provision/reconcile.py. Written to kill the mutants `make mutate` found surviving (#26,
docs/testing.md); the providers are scripted in memory and every expected value is written out
from their scripted answers and the rule, never read back from the code under test."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tailpod.config import Settings
from tailpod.errors import ProviderError
from tailpod.ledger import Ledger, PodRecord
from tailpod.provision.base import PodInfo, PodState
from tailpod.provision.reconcile import providers_for, recover_ledger, status_remote
from tailpod.secrets import Secret
from tests.unit.provision.scripted_cloud import ScriptedCloud as Scripted

MAIN = "ledger.json"
LAST_GOOD = "ledger.last-good.json"
NOT_SETTLED = "not every provider answered, so the recovery is not settled yet: "


def _pod(pod_id: str, tag: str | None, state: PodState = PodState.RUNNING,
         price: float | None = 0.5) -> PodInfo:
    return PodInfo(pod_id, tag, state, gpu_type="A40", gpu_count=2, price_per_hr=price)


def _settings(tmp_path: Path, *, runpod: bool = False, vast: bool = False,
              tailscale: bool = False) -> Settings:
    return Settings(home=tmp_path / "home",
                    runpod_api_key=Secret("rp-test-key-recover") if runpod else None,
                    vast_api_key=Secret("vast-test-key-recover") if vast else None,
                    tailscale_api_key=Secret("ts-test-key-recover") if tailscale else None)


def _ledger(settings: Settings, *tags: tuple[str, str]) -> Ledger:
    ledger = Ledger(settings.state_dir)
    for tag, provider in tags:
        ledger.put(PodRecord(run_tag=tag, provider=provider, status="running", pod_id="p-" + tag))
    return ledger


def _corrupt(ledger: Ledger, *names: str) -> None:
    for name in names:
        (ledger.home / name).write_bytes(b"{not json")


def _notices(ledger: Ledger) -> list[dict[str, Any]]:
    raw: list[dict[str, Any]] = json.loads((ledger.home / MAIN).read_text())["recovery"]
    return raw


# -- recover_ledger ------------------------------------------------------------------------------
def test_an_undamaged_ledger_asks_no_provider(tmp_path: Path) -> None:
    settings = _settings(tmp_path)
    ledger = _ledger(settings, ("tp-a", "runpod"))
    cloud = Scripted([_pod("x", "tp-z")])
    assert recover_ledger(settings, ledger, {"runpod": cloud}) == []
    assert cloud.listings == 0 and [r.run_tag for r in ledger.all()] == ["tp-a"]


def test_a_corrupt_ledger_restored_from_its_last_good_copy_is_settled_without_adopting(
        tmp_path: Path) -> None:
    settings = _settings(tmp_path)
    ledger = _ledger(settings, ("tp-a", "runpod"))
    _corrupt(ledger, MAIN)
    rp, va = Scripted([_pod("x", "tp-stray")]), Scripted()
    lines = recover_ledger(settings, ledger, {"runpod": rp, "vastai": va})
    assert len(lines) == 1
    assert lines[0].startswith("the ledger was damaged at ")
    assert f"{MAIN} (JSONDecodeError)" in lines[0]
    assert lines[0].endswith(f"; restored from {LAST_GOOD} (nothing lost)")
    # Nothing was lost, so nothing is listed or adopted: the stray pod is status's orphan.
    assert rp.listings == 0 and va.listings == 0
    assert [r.run_tag for r in ledger.all()] == ["tp-a"]
    assert ledger.pending_recovery() == []
    assert [n["settled"]["summary"] for n in _notices(ledger)] == ["checked against runpod, vastai"]


def test_a_missing_ledger_is_restored_from_the_copy_and_said_missing(tmp_path: Path) -> None:
    settings = _settings(tmp_path)
    ledger = _ledger(settings, ("tp-a", "runpod"))
    (ledger.home / MAIN).unlink()
    lines = recover_ledger(settings, ledger, {"runpod": Scripted()})
    assert len(lines) == 1 and f"{MAIN} (missing)" in lines[0]
    assert lines[0].endswith(f"; restored from {LAST_GOOD} (nothing lost)")
    assert [n["settled"]["summary"] for n in _notices(ledger)] == ["checked against runpod"]


def test_a_ledger_with_no_readable_copy_is_rebuilt_from_every_providers_tagged_pods(
        tmp_path: Path) -> None:
    settings = _settings(tmp_path)
    ledger = _ledger(settings, ("tp-old", "runpod"))
    _corrupt(ledger, MAIN, LAST_GOOD)
    rp = Scripted([_pod("rp-1", "tp-aaa"), _pod("rp-2", None)])  # untagged: not ours
    va = Scripted([_pod("va-1", "tp-bbb", PodState.STOPPED, price=0.25)])
    lines = recover_ledger(settings, ledger, {"runpod": rp, "vastai": va})
    assert len(lines) == 2
    assert lines[0].endswith("; no readable copy was left, so the ledger is rebuilt from the "
                             "providers")
    want = "rebuilt from runpod, vastai: 2 pod(s) found and written back (tp-aaa, tp-bbb)"
    assert lines[1] == want
    got = {r.run_tag: (r.provider, r.pod_id, r.status, r.price_per_hr, r.tailnet)
           for r in ledger.all()}
    assert got == {"tp-aaa": ("runpod", "rp-1", "running", 0.5, {}),
                   "tp-bbb": ("vastai", "va-1", "stopped", 0.25, {})}
    assert ledger.pending_recovery() == []
    assert [n["settled"]["summary"] for n in _notices(ledger)] == [want]


def test_a_rebuild_that_finds_nothing_says_so(tmp_path: Path) -> None:
    settings = _settings(tmp_path)
    ledger = _ledger(settings)
    ledger.all()  # writes the files
    _corrupt(ledger, MAIN, LAST_GOOD)
    lines = recover_ledger(settings, ledger, {"runpod": Scripted([_pod("u", None)])})
    want = "rebuilt from runpod: no tailpod-tagged pod is listed"
    assert lines[1:] == [want]
    assert [n["settled"]["summary"] for n in _notices(ledger)] == [want]


def test_a_provider_that_fails_its_listing_leaves_the_rebuild_unsettled(tmp_path: Path) -> None:
    settings = _settings(tmp_path)
    ledger = _ledger(settings, ("tp-old", "runpod"))
    _corrupt(ledger, MAIN, LAST_GOOD)
    rp = Scripted([_pod("rp-1", "tp-aaa")])
    va = Scripted(error=ProviderError("vastai listing outage"))
    lines = recover_ledger(settings, ledger, {"runpod": rp, "vastai": va})
    assert lines[1:] == ["rebuilt from runpod, vastai: 1 pod(s) found and written back (tp-aaa)",
                         NOT_SETTLED + "vastai: vastai listing outage"]
    assert [r.run_tag for r in ledger.all()] == ["tp-aaa"]  # what answered is adopted now
    assert len(ledger.pending_recovery()) == 1
    assert "settled" not in _notices(ledger)[0]


def test_every_listing_that_failed_is_named(tmp_path: Path) -> None:
    settings = _settings(tmp_path)
    ledger = _ledger(settings, ("tp-old", "runpod"))
    _corrupt(ledger, MAIN, LAST_GOOD)
    lines = recover_ledger(settings, ledger, {"runpod": Scripted(error=ProviderError("runpod listing outage")),
                                              "vastai": Scripted(error=ProviderError("vastai listing outage"))})
    assert lines[1:] == ["rebuilt from runpod, vastai: no tailpod-tagged pod is listed",
                         NOT_SETTLED + "runpod: runpod listing outage; vastai: vastai listing outage"]
    assert ledger.all() == [] and len(ledger.pending_recovery()) == 1


def test_with_no_provider_a_restored_ledger_is_not_settled(tmp_path: Path) -> None:
    settings = _settings(tmp_path)
    ledger = _ledger(settings, ("tp-a", "runpod"))
    _corrupt(ledger, MAIN)
    lines = recover_ledger(settings, ledger, {})
    assert len(lines) == 2 and lines[0].endswith("(nothing lost)")
    assert lines[1] == NOT_SETTLED + "no cloud provider is configured"
    assert len(ledger.pending_recovery()) == 1


def test_with_no_provider_a_lost_ledger_is_rebuilt_from_nothing_and_not_settled(
        tmp_path: Path) -> None:
    settings = _settings(tmp_path)
    ledger = _ledger(settings, ("tp-a", "runpod"))
    _corrupt(ledger, MAIN, LAST_GOOD)
    lines = recover_ledger(settings, ledger, {})
    assert lines[1:] == ["rebuilt from no provider: no tailpod-tagged pod is listed",
                         NOT_SETTLED + "no cloud provider is configured"]
    assert len(ledger.pending_recovery()) == 1


def test_one_lost_notice_among_restored_ones_makes_the_whole_recovery_a_rebuild(
        tmp_path: Path) -> None:
    settings = _settings(tmp_path)
    ledger = _ledger(settings, ("tp-a", "runpod"))
    _corrupt(ledger, MAIN, LAST_GOOD)
    assert len(ledger.pending_recovery()) == 1  # nothing readable, not settled yet
    _corrupt(ledger, MAIN)  # the copy (holding that notice) is read back: a second notice
    rp = Scripted([_pod("rp-1", "tp-aaa")])
    lines = recover_ledger(settings, ledger, {"runpod": rp})
    assert len(lines) == 3
    assert lines[0].endswith("rebuilt from the providers") and lines[1].endswith("(nothing lost)")
    want = "rebuilt from runpod: 1 pod(s) found and written back (tp-aaa)"
    assert lines[2] == want and rp.listings == 1
    assert [n["settled"]["summary"] for n in _notices(ledger)] == [want, want]


def test_a_rebuild_asks_the_tailnet_whether_each_adopted_pod_is_still_there(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import tailpod.provision.tailnet.devices as devices
    import tailpod.provision.tailnet.steps as steps

    asked: list[str] = []

    @contextlib.contextmanager
    def api(settings: Settings) -> Iterator[str]:
        assert settings.tailscale_api_key is not None
        yield "api"

    def find(api: Any, hostname: str) -> list[str]:
        asked.append(hostname)
        return ["device"] if hostname == "tailpod-tp-aaa" else []

    monkeypatch.setattr(steps, "api_from_settings", api)
    monkeypatch.setattr(devices, "find_devices", find)
    settings = _settings(tmp_path, tailscale=True)
    ledger = _ledger(settings, ("tp-old", "runpod"))
    _corrupt(ledger, MAIN, LAST_GOOD)
    rp = Scripted([_pod("rp-1", "tp-aaa"), _pod("rp-2", "tp-bbb")])
    recover_ledger(settings, ledger, {"runpod": rp})
    assert sorted(asked) == ["tailpod-tp-aaa", "tailpod-tp-bbb"]
    assert {r.run_tag: r.tailnet for r in ledger.all()} == {"tp-aaa": {"enabled": True},
                                                            "tp-bbb": {}}


# -- providers_for -------------------------------------------------------------------------------
def test_only_providers_with_a_key_are_asked_and_options_reach_them(
        tmp_path: Path, made: dict[str, Any]) -> None:
    made["runpod"], made["vastai"] = Scripted(), Scripted()
    out = providers_for(_settings(tmp_path, runpod=True), (), timings="fast")
    assert list(out) == ["runpod"] and out["runpod"] is made["runpod"]
    assert made["calls"] == [("runpod", {"timings": "fast"})]


def test_a_cloud_the_ledger_names_is_asked_even_without_a_key_but_never_local_or_ssh(
        tmp_path: Path, made: dict[str, Any]) -> None:
    made["runpod"], made["vastai"] = Scripted(), Scripted()
    settings = _settings(tmp_path, runpod=True)
    out = providers_for(settings, ["local", "ssh", "vastai", "runpod"], timings="fast")
    assert list(out) == ["runpod", "vastai"] and out["vastai"] is made["vastai"]
    assert [s is settings for s in made["settings"]] == [True, True]  # each made from them
    # runpod once (from its key), not again for the ledger's name
    assert made["calls"] == [("runpod", {"timings": "fast"}), ("vastai", {"timings": "fast"})]


def test_with_no_key_and_no_ledger_name_no_provider_is_made(
        tmp_path: Path, made: dict[str, Any]) -> None:
    made["runpod"], made["vastai"] = Scripted(), Scripted()
    assert providers_for(_settings(tmp_path), ["local"]) == {}
    assert made["calls"] == []


# -- status_remote -------------------------------------------------------------------------------
def test_status_asks_the_configured_clouds_and_names_a_provider_it_did_not_ask(
        tmp_path: Path, made: dict[str, Any]) -> None:
    made["runpod"] = Scripted([_pod("p-tp-a", "tp-a"), _pod("o-1", "tp-orphan")])
    settings = _settings(tmp_path, runpod=True)
    ledger = _ledger(settings, ("tp-a", "runpod"), ("tp-box", "ssh"), ("tp-here", "local"))
    report = status_remote(settings, ledger, timings="fast")
    assert made["calls"] == [("runpod", {"timings": "fast"})]
    rows = {r.run_tag: (r.provider, r.provider_state, r.flags) for r in report.rows}
    assert rows == {"tp-a": ("runpod", "running", []),
                    "tp-box": ("ssh", None, ["provider not checked"]),
                    "tp-orphan": ("runpod", "running", ["orphan"])}  # local's rows: not here
    assert report.errors == [] and report.ledger_notices == []


def test_status_when_a_provider_cannot_be_made_reports_why_and_leaves_the_damage_pending(
        tmp_path: Path, made: dict[str, Any]) -> None:
    settings = _settings(tmp_path, runpod=True)  # `made` holds no runpod: making it fails
    ledger = _ledger(settings, ("tp-a", "runpod"))
    _corrupt(ledger, MAIN)
    report = status_remote(settings, ledger)
    assert report.errors == ["runpod: no API key"]
    assert [(r.run_tag, r.flags) for r in report.rows] == [("tp-a", ["provider not checked"])]
    assert len(report.ledger_notices) == 1
    assert report.ledger_notices[0].endswith(f"restored from {LAST_GOOD} (nothing lost)")
    assert len(ledger.pending_recovery()) == 1  # nobody was asked: not settled
    out = report.to_json()
    assert out["rate_per_hr_now"] is None
    assert out["rate_unknown_reason"] == "could not ask runpod: no API key"


def test_status_when_a_listing_fails_flags_its_pods_unreachable(
        tmp_path: Path, made: dict[str, Any]) -> None:
    made["runpod"] = Scripted([_pod("p-tp-a", "tp-a")])
    made["vastai"] = Scripted(error=ProviderError("vastai listing outage"))
    settings = _settings(tmp_path, runpod=True, vast=True)
    ledger = _ledger(settings, ("tp-a", "runpod"), ("tp-v", "vastai"))
    report = status_remote(settings, ledger)
    assert report.errors == ["vastai: vastai listing outage"]
    assert {r.run_tag: r.flags for r in report.rows} == {"tp-a": [],
                                                         "tp-v": ["provider unreachable"]}
    assert report.to_json()["rate_per_hr_now"] is None


def test_status_settles_a_damaged_ledger_through_the_providers_it_asked(
        tmp_path: Path, made: dict[str, Any]) -> None:
    made["runpod"] = Scripted([_pod("rp-1", "tp-aaa")])
    settings = _settings(tmp_path, runpod=True)
    ledger = _ledger(settings, ("tp-old", "runpod"))
    _corrupt(ledger, MAIN, LAST_GOOD)
    report = status_remote(settings, ledger)
    assert report.ledger_notices[1:] == [
        "rebuilt from runpod: 1 pod(s) found and written back (tp-aaa)"]
    assert [(r.run_tag, r.flags) for r in report.rows] == [("tp-aaa", [])]
    assert ledger.pending_recovery() == [] and report.errors == []
