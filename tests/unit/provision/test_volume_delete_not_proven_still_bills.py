"""A volume delete that fails or is not proven says the volume still bills, never "proven"
(provision/volumes.py `_still_bills`, `delete_volume_proven`). Driven against RunPod's adapter
over a scripted REST v2 (httpx.MockTransport) and a ledger in tmp_path, so each mutant `make
mutate` makes of those functions runs in milliseconds. Every expected message, hint and failure
entry below is written out by hand from the planted volume, pods and answers."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import httpx
import pytest

from tailpod.config import load_settings
from tailpod.errors import ConfigError, ProviderError
from tailpod.ledger import Ledger, PodRecord, VolumeRecord
from tailpod.provision import volumes as volumes_mod
from tailpod.provision.apiclient import ApiTimings
from tailpod.provision.runpod.provider import RunPodProvider
from tailpod.provision.vastai.provider import VastProvider
from tailpod.provision.volumes import VolumeStillBills, delete_volume_proven, mounting_pods

KEY = "rp_VOLUMEstillBILLSkey_0123456789"
URL = "http://runpod.invalid"
TAG = "tp-vol-cache1"
RUN_A = "tp-20260101-000000-aaaaaa"
RUN_B = "tp-20260101-000000-bbbbbb"
TIMINGS = ApiTimings(request_timeout_s=5.0, attempts=1, backoff_s=0.0, backoff_max_s=0.0,
                     readback_attempts=1, readback_interval_s=0.0, evidence_window_s=30.0)
BY_HAND = ('curl -X DELETE -H "Authorization: Bearer $RUNPOD_API_KEY" '
           f"{URL}/v2/network-volumes/")


@dataclass
class FakeVolumes:
    """One RunPod account's network volumes, answered route by route."""

    volumes: dict[str, dict[str, Any]] = field(default_factory=dict)  # id -> the v2 volume
    delete_status: int = 204
    list_status: int = 200
    keep_after_delete: bool = False  # the delete answers 204 but the volume stays listed
    billed: dict[str, Any] = field(default_factory=lambda: {"v1": 1.25, "v2": 0.5})
    deleted: list[str] = field(default_factory=list)
    seen: list[str] = field(default_factory=list)

    def add(self, volume_id: str, name: str = TAG) -> None:
        self.volumes[volume_id] = {"id": volume_id, "name": name, "size": 50,
                                   "dataCenter": "EU-RO-1", "type": "STANDARD"}

    def __call__(self, request: httpx.Request) -> httpx.Response:
        path = request.url.path
        self.seen.append(f"{request.method} {path}")
        if path == "/v2/network-volumes":
            if self.list_status != 200:
                return httpx.Response(self.list_status, json={"error": "listing broke"})
            return httpx.Response(200, json={"networkVolumes": list(self.volumes.values())})
        if path == "/v2/billing/network-volumes":
            amount = self.billed.get(request.url.params.get("networkVolumeId", ""))
            return httpx.Response(200, json={"metadata": {"totals": {"totalAmount": amount}}})
        volume_id = path.removeprefix("/v2/network-volumes/")
        if request.method == "DELETE":
            self.deleted.append(volume_id)
            if self.delete_status in (200, 204) and not self.keep_after_delete:
                self.volumes.pop(volume_id, None)
            return httpx.Response(self.delete_status, json={"error": "volume is in use"})
        found = self.volumes.get(volume_id)
        return httpx.Response(200, json=found) if found else httpx.Response(404)


def runpod(fake: FakeVolumes, tmp_path: Path) -> RunPodProvider:
    settings = load_settings(env={"RUNPOD_API_KEY": KEY, "TAILPOD_HOME": str(tmp_path),
                                  "TAILPOD_RUNPOD_URL": URL},
                             dotenv_path=tmp_path / "absent.env")
    return RunPodProvider(settings, timings=TIMINGS, transport=httpx.MockTransport(fake),
                          sleep=lambda _s: None)


def ledger_with(tmp_path: Path, *, status: str = "kept", volume_id: str | None = "v1",
                used_by: tuple[str, ...] = (), pods: tuple[PodRecord, ...] = ()) -> Ledger:
    home = tmp_path / "home"
    home.mkdir(mode=0o700)
    ledger = Ledger(home)
    with ledger.volume_transaction() as volumes:
        volumes[TAG] = VolumeRecord(name=TAG, provider="runpod", size_gb=50,
                                    data_center="EU-RO-1", status=status, volume_id=volume_id,
                                    used_by=list(used_by))
    for pod in pods:
        ledger.put(pod)
    return ledger


def events(ledger: Ledger) -> list[dict[str, Any]]:
    record = ledger.volume(TAG)
    assert record is not None
    return [{k: v for k, v in e.items() if k != "t"} for e in record.events]


# -- _still_bills: the words, the steps, the failure entry -----------------------------------------

def test_a_mounted_volume_names_its_pods_and_says_end_them_first(tmp_path: Path) -> None:
    pods = (PodRecord(run_tag=RUN_A, provider="runpod", status="running", pod_id="pod-a"),
            PodRecord(run_tag=RUN_B, provider="runpod", status="running", pod_id=None),
            # a pod of another run that did not mount it: not named
            PodRecord(run_tag="tp-20260101-000000-cccccc", provider="runpod", status="running",
                      pod_id="pod-c"))
    ledger = ledger_with(tmp_path, status="deleting", used_by=(RUN_A, RUN_B), pods=pods)
    before = time.time()
    exc = volumes_mod._still_bills(runpod(FakeVolumes(), tmp_path), ledger, TAG, ["v1", "v2"],
                                   "HTTP 409: volume is in use")
    mounts = [f"pod pod-a (run {RUN_A})", f"pod (id unknown) (run {RUN_B})"]
    assert isinstance(exc, VolumeStillBills)
    assert exc.message == ("volume cache1 (runpod, v1, v2) still bills: HTTP 409: volume is in "
                           f"use; mounted by pod pod-a (run {RUN_A}), pod (id unknown) (run "
                           f"{RUN_B})")
    assert exc.hint == (f"end the pod first: tailpod down {RUN_A}; tailpod down {RUN_B}; "
                        "then: tailpod volume rm cache1; "
                        f"or by hand: {BY_HAND}v1; {BY_HAND}v2")
    at = exc.failure.pop("at")
    assert before <= at <= time.time()
    assert exc.failure == {"volume": "cache1", "provider": "runpod", "volume_ids": ["v1", "v2"],
                           "error": "HTTP 409: volume is in use", "mounted_by": mounts,
                           "proven": False}
    # it was being deleted: the ledger keeps it (it bills) and says why
    record = ledger.volume(TAG)
    assert record is not None and record.status == "kept"
    assert events(ledger) == [{"event": "delete-failed", "error": "HTTP 409: volume is in use"}]


def test_an_unmounted_volume_with_no_id_says_retry_and_is_not_proven(tmp_path: Path) -> None:
    ledger = ledger_with(tmp_path, status="kept", volume_id=None)
    exc = volumes_mod._still_bills(runpod(FakeVolumes(), tmp_path), ledger, TAG, [],
                                   "listing broke; nothing was deleted")
    assert exc.message == ("volume cache1 (runpod, id unknown) still bills: listing broke; "
                           "nothing was deleted")
    assert exc.hint == "retry: tailpod volume rm cache1"
    exc.failure.pop("at")
    assert exc.failure == {"volume": "cache1", "provider": "runpod", "volume_ids": [],
                           "error": "listing broke; nothing was deleted", "mounted_by": [],
                           "proven": False}
    # not in the middle of a delete: the ledger is left as it was
    record = ledger.volume(TAG)
    assert record is not None and record.status == "kept" and record.events == []


def test_the_failure_entry_is_written_as_not_proven_json(tmp_path: Path) -> None:
    """billing-proof.json keeps `failure` as JSON: a volume that may still bill is `false`."""
    ledger = ledger_with(tmp_path, status="deleting")
    exc = volumes_mod._still_bills(runpod(FakeVolumes(), tmp_path), ledger, TAG, ["v1"], "boom")
    assert json.loads(json.dumps(exc.failure))["proven"] is False
    assert exc.hint == f"retry: tailpod volume rm cache1; or by hand: {BY_HAND}v1"


def test_mounting_pods_are_the_active_pods_of_the_runs_that_mounted_it(tmp_path: Path) -> None:
    pods = (PodRecord(run_tag=RUN_A, provider="runpod", status="running", pod_id="pod-a"),
            PodRecord(run_tag=RUN_B, provider="runpod", status="terminated", pod_id="pod-b"))
    ledger = ledger_with(tmp_path, used_by=(RUN_A, RUN_B), pods=pods)
    assert [p.run_tag for p in mounting_pods(ledger, ledger.volume(TAG))] == [RUN_A]
    assert mounting_pods(ledger, None) == []


# -- delete_volume_proven: proven only when both look-ups say gone ------------------------------

def test_a_delete_proven_gone_returns_the_proof_and_settles_the_ledger(tmp_path: Path) -> None:
    fake = FakeVolumes()
    fake.add("v1")
    fake.add("v9", name="tp-vol-other")  # another volume: neither deleted nor counted
    ledger = ledger_with(tmp_path, status="kept", volume_id="v1")
    before = time.time()
    proof = delete_volume_proven(runpod(fake, tmp_path), ledger, "cache1", wait_s=1.0)
    at = proof.pop("at")
    after = time.time()
    assert before <= at <= after
    assert proof == {"volume": "cache1", "provider": "runpod", "volume_ids": ["v1"],
                     "direct_lookup_gone": {"v1": True}, "listed_by_name": 0,
                     "billed_usd": {"v1": 1.25}, "proven": True}
    assert fake.deleted == ["v1"]
    assert "v9" in fake.volumes
    record = ledger.volume(TAG)
    assert record is not None and record.status == "deleted"
    assert before <= record.updated_at <= after
    assert events(ledger) == [{"event": "deleting"},
                              {"event": "deleted-proven", "volume_ids": ["v1"]}]


def test_a_volume_the_ledger_lost_is_found_by_name_and_deleted(tmp_path: Path) -> None:
    """A `tp-vol-` volume at the provider with no ledger record: deleted, no ledger write."""
    fake = FakeVolumes()
    fake.add("v7")
    home = tmp_path / "home"
    home.mkdir(mode=0o700)
    ledger = Ledger(home)
    proof = delete_volume_proven(runpod(fake, tmp_path), ledger, "tp-vol-cache1", wait_s=1.0)
    assert (proof["volume_ids"], proof["proven"], fake.deleted) == (["v7"], True, ["v7"])
    assert ledger.volume(TAG) is None


def test_the_ledger_id_and_a_listed_twin_are_both_deleted(tmp_path: Path) -> None:
    """The provider lists the name under another id than the ledger's: both are deleted, the
    listed one first, and each is proven gone."""
    fake = FakeVolumes()
    fake.add("v2")
    fake.add("v1")
    ledger = ledger_with(tmp_path, volume_id="v1")
    proof = delete_volume_proven(runpod(fake, tmp_path), ledger, "cache1", wait_s=1.0)
    assert fake.deleted == ["v2", "v1"]
    assert proof["direct_lookup_gone"] == {"v2": True, "v1": True}
    assert proof["billed_usd"] == {"v2": 0.5, "v1": 1.25}  # each id's own billing history


def test_a_name_neither_the_ledger_nor_the_provider_knows_is_refused(tmp_path: Path) -> None:
    fake = FakeVolumes()
    home = tmp_path / "home"
    home.mkdir(mode=0o700)
    with pytest.raises(ConfigError) as caught:
        delete_volume_proven(runpod(fake, tmp_path), Ledger(home), "cache1", wait_s=1.0)
    assert caught.value.message == "no volume cache1 in the ledger or at runpod"
    assert fake.deleted == []


def test_a_refused_delete_still_bills_and_the_ledger_keeps_it(tmp_path: Path) -> None:
    fake = FakeVolumes(delete_status=409)
    fake.add("v1")
    ledger = ledger_with(tmp_path, volume_id="v1")
    with pytest.raises(VolumeStillBills) as caught:
        delete_volume_proven(runpod(fake, tmp_path), ledger, "cache1", wait_s=1.0)
    failure = caught.value.failure
    assert (failure["proven"], failure["volume_ids"]) == (False, ["v1"])
    assert "409" in failure["error"] and "deleting network volume v1" in failure["error"]
    assert caught.value.message.startswith("volume cache1 (runpod, v1) still bills: ")
    record = ledger.volume(TAG)
    assert record is not None and record.status == "kept"
    assert [e["event"] for e in events(ledger)] == ["deleting", "delete-failed"]


def test_a_volume_still_listed_after_the_wait_is_not_proven(tmp_path: Path) -> None:
    fake = FakeVolumes(keep_after_delete=True)
    fake.add("v1")
    ledger = ledger_with(tmp_path, volume_id="v1")
    clock = iter([100.0, 100.0, 101.0, 102.6])  # the deadline is 100 + 2.5: two looks, then out
    provider = runpod(fake, tmp_path)
    slept: list[float] = []
    with pytest.MonkeyPatch.context() as mp:
        # the module's own clock only (the API client keeps the real one)
        mp.setattr(volumes_mod, "time", SimpleNamespace(monotonic=lambda: next(clock),
                                                        sleep=slept.append, time=time.time))
        with pytest.raises(VolumeStillBills) as caught:
            delete_volume_proven(provider, ledger, "cache1", wait_s=2.5)
    assert caught.value.failure["error"] == "runpod still lists it 2.5 s after the delete"
    assert caught.value.failure["proven"] is False
    assert slept == [0.2, 0.2]
    # asked both ways on each of the three looks
    assert fake.seen.count("GET /v2/network-volumes/v1") == 3
    record = ledger.volume(TAG)
    assert record is not None and record.status == "kept"


def test_gone_directly_but_still_listed_by_name_is_not_proven(tmp_path: Path) -> None:
    """The direct look-up answers 404 but the listing still carries the name: not proven."""
    fake = FakeVolumes()
    fake.add("v1")
    ledger = ledger_with(tmp_path, volume_id="v1")
    provider = runpod(fake, tmp_path)
    real_get = provider.volume_get
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(provider, "volume_delete", lambda vid: fake.deleted.append(vid))
        mp.setattr(provider, "volume_get", lambda vid: None)  # 404 at once; still listed
        with pytest.raises(VolumeStillBills) as caught:
            delete_volume_proven(provider, ledger, "cache1", wait_s=0.0)
    assert caught.value.failure["error"] == "runpod still lists it 0 s after the delete"
    assert real_get("v1") is not None


def test_listed_gone_but_direct_lookup_still_finds_it_is_not_proven(tmp_path: Path) -> None:
    fake = FakeVolumes()
    fake.add("v1")
    ledger = ledger_with(tmp_path, volume_id="v1")
    provider = runpod(fake, tmp_path)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(provider, "volume_delete", lambda vid: fake.deleted.append(vid))
        # gone from the listing, but the direct look-up still answers it
        mp.setattr(provider, "volume_list", lambda: [])
        with pytest.raises(VolumeStillBills) as caught:
            delete_volume_proven(provider, ledger, "cache1", wait_s=0.0)
    assert caught.value.failure["error"] == "runpod still lists it 0 s after the delete"
    assert caught.value.failure["volume_ids"] == ["v1"]


def test_a_listing_that_fails_before_the_delete_deletes_nothing(tmp_path: Path) -> None:
    fake = FakeVolumes(list_status=500)
    fake.add("v1")
    ledger = ledger_with(tmp_path, volume_id="v1")
    with pytest.raises(VolumeStillBills) as caught:
        delete_volume_proven(runpod(fake, tmp_path), ledger, "cache1", wait_s=1.0)
    failure = caught.value.failure
    assert failure["volume_ids"] == ["v1"]
    assert failure["error"].endswith("; nothing was deleted")
    assert fake.deleted == []
    record = ledger.volume(TAG)
    assert record is not None and record.status == "kept" and record.events == []


def test_a_listing_that_fails_with_no_ledger_id_names_no_id(tmp_path: Path) -> None:
    fake = FakeVolumes(list_status=500)
    ledger = ledger_with(tmp_path, volume_id=None)
    with pytest.raises(VolumeStillBills) as caught:
        delete_volume_proven(runpod(fake, tmp_path), ledger, "cache1", wait_s=1.0)
    assert caught.value.failure["volume_ids"] == []
    assert "(runpod, id unknown)" in caught.value.message


@pytest.mark.parametrize("status", [None, "deleted"])
def test_a_listing_that_fails_for_a_volume_not_in_the_ledger_is_the_providers_error(
        tmp_path: Path, status: str | None) -> None:
    """No active record: nothing tailpod knows may bill, so the provider's error goes up as is."""
    fake = FakeVolumes(list_status=500)
    home = tmp_path / "home"
    home.mkdir(mode=0o700)
    ledger = Ledger(home)
    if status is not None:
        with ledger.volume_transaction() as volumes:
            volumes[TAG] = VolumeRecord(name=TAG, provider="runpod", size_gb=50,
                                        data_center="EU-RO-1", status=status, volume_id="v1")
    with pytest.raises(ProviderError) as caught:
        delete_volume_proven(runpod(fake, tmp_path), ledger, "cache1", wait_s=1.0)
    assert not isinstance(caught.value, VolumeStillBills)


def test_the_default_wait_is_ten_seconds_of_looks_every_fifth_of_a_second(tmp_path: Path) -> None:
    """wait_s left out: looks at 0 (the deadline 0 + 10), 10.0 (not past it), 10.5 (past it)."""
    fake = FakeVolumes(keep_after_delete=True)
    fake.add("v1")
    ledger = ledger_with(tmp_path, volume_id="v1")
    provider = runpod(fake, tmp_path)
    clock = iter([0.0, 10.0, 10.5])
    slept: list[float] = []
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(volumes_mod, "time", SimpleNamespace(monotonic=lambda: next(clock),
                                                        sleep=slept.append, time=time.time))
        with pytest.raises(VolumeStillBills) as caught:
            delete_volume_proven(provider, ledger, "cache1")
    assert caught.value.failure["error"] == "runpod still lists it 10 s after the delete"
    assert slept == [0.2]


def test_a_provider_without_billing_history_proves_the_delete_with_the_bill_unknown(
        tmp_path: Path) -> None:
    """vast.ai has no per-volume billing read: the proof says unknown (None), not $0."""
    listed = [{"id": 41, "label": "tp_vol_cache1", "disk_space": 50, "machine_id": 7}]
    deleted: list[str] = []

    def vast(request: httpx.Request) -> httpx.Response:
        if request.method == "DELETE":
            deleted.append(request.url.params["id"])
            listed.clear()
            return httpx.Response(200, json={"success": True})
        return httpx.Response(200, json={"volumes": listed})

    settings = load_settings(env={"VAST_API_KEY": "vast_VOLUMEkey_0123456789abcdef",
                                  "TAILPOD_HOME": str(tmp_path),
                                  "TAILPOD_VAST_URL": "http://vast.invalid"},
                             dotenv_path=tmp_path / "absent.env")
    provider = VastProvider(settings, timings=TIMINGS, transport=httpx.MockTransport(vast),
                            sleep=lambda _s: None)
    ledger = ledger_with(tmp_path, volume_id="41")
    proof = delete_volume_proven(provider, ledger, "cache1", wait_s=1.0)
    assert deleted == ["41"]
    assert (proof["provider"], proof["billed_usd"], proof["proven"]) == ("vastai", {"41": None},
                                                                         True)
