"""Volumes before and after the delete (provision/volumes.py): the name, where a volume goes and
which GPUs it can serve, the create that writes the ledger first and asks the provider by name
after any error, the listing joined with the ledger (kept, orphan, creating, unknown), the mount
`up --volume` checks before it rents, the caches' paths, and what the cold start cost.

Driven against an in-memory cloud with volumes and a ledger in tmp_path, with the module's clock
fixed where a figure depends on it, so each mutant `make mutate` makes of these functions runs in
milliseconds. Every expected message, row and figure is written out by hand from what is planted.
"""

from __future__ import annotations

import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from tailpod.errors import ConfigError, ProviderError
from tailpod.ledger import Ledger, VolumeRecord
from tailpod.provision import volumes as vol
from tailpod.provision.base import DataCenterInfo, SupportsVolumes, VolumeInfo
from tailpod.provision.volumes import Placement, VolumeMount, VolumeReport, VolumeRow
from tests.unit.provision.scripted_cloud import ScriptedCloud

NOW = 10_000.0
RUN_A = "tp-20260101-000000-aaaaaa"
RUN_B = "tp-20260101-000000-bbbbbb"
H100 = "NVIDIA H100 80GB HBM3"


class VolumeCloud(ScriptedCloud, SupportsVolumes):
    """Data centers and volumes the test plants; a create that fails (and may still leave the
    volume behind), a listing that fails; what each call was asked."""

    name = "voltest"
    volume_size_gb = (10, 4000)
    volume_types = ("STANDARD", "HIGH_PERFORMANCE")
    volume_mount_path = "/runpod-volume"

    def __init__(self, dcs: list[DataCenterInfo] | None = None,
                 volumes: list[VolumeInfo] | None = None, *, price: float | None = None,
                 create_error: BaseException | None = None, create_leaves: bool = False,
                 list_error: Exception | None = None) -> None:
        super().__init__()
        self.dcs = dcs or []
        self.vols = {v.volume_id: v for v in volumes or []}
        self.price = price
        self.create_error = create_error
        self.create_leaves = create_leaves
        self.list_error = list_error
        self.dc_reads = 0
        self.price_asked: list[tuple[int, str | None]] = []
        self.created: list[tuple[str, int, str, str | None]] = []
        self.ledger: Ledger | None = None  # read at the create call: what the ledger holds then
        self.at_create: list[dict[str, Any]] = []

    def data_centers(self) -> list[DataCenterInfo]:
        self.dc_reads += 1
        return list(self.dcs)

    def volume_price_per_month(self, size_gb: int, volume_type: str | None) -> float | None:
        self.price_asked.append((size_gb, volume_type))
        return self.price

    def volume_create(self, name: str, size_gb: int, data_center: str,
                      volume_type: str | None = None) -> VolumeInfo:
        self.created.append((name, size_gb, data_center, volume_type))
        if self.ledger is not None:
            self.at_create.append({v.name: v.to_json() for v in self.ledger.volumes()})
        info = VolumeInfo(f"vol-{len(self.created)}", name, size_gb, data_center, volume_type, 7.0)
        if self.create_error is None or self.create_leaves:
            self.vols[info.volume_id] = info
        if self.create_error is not None:
            raise self.create_error
        return info

    def volume_list(self) -> list[VolumeInfo]:
        if self.list_error is not None:
            raise self.list_error
        return list(self.vols.values())

    def volume_get(self, volume_id: str) -> VolumeInfo | None:
        return self.vols.get(volume_id)

    def volume_delete(self, volume_id: str) -> None:
        self.vols.pop(volume_id, None)


class MachineCloud(VolumeCloud):
    """A provider whose volume lives on one machine (vast.ai's word for the place)."""

    volume_place = "machine"


def dc(dc_id: str, types: tuple[str, ...], gpus: dict[str, str], **room: float) -> DataCenterInfo:
    names = {"NVIDIA A40": "A40", H100: "H100 SXM", "NVIDIA L4": "L4", "NVIDIA A100": "A100",
             "NVIDIA H200": "H200"}
    return DataCenterInfo(dc_id, dc_id.lower(), types, gpus,
                          {g: names[g] for g in gpus if g in names}, **room)


EU = dc("EU-RO-1", ("STANDARD",), {"NVIDIA A40": "HIGH", H100: "NONE"})
KS = dc("US-KS-2", ("STANDARD", "HIGH_PERFORMANCE"),
        {"NVIDIA A40": "LOW", H100: "MEDIUM", "NVIDIA L4": "HIGH"})
CA = dc("US-CA-2", (), {"NVIDIA H200": "HIGH"})
MTL = dc("CA-MTL-1", ("STANDARD",), {"NVIDIA H200": "HIGH"})
CLOUD_DCS = [EU, KS, CA, MTL]


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> None:
    """The module's wall clock stands at NOW (its sleeps and monotonic clock are the real ones)."""
    monkeypatch.setattr(vol, "time", SimpleNamespace(time=lambda: NOW, monotonic=time.monotonic,
                                                     sleep=time.sleep))


def new_ledger(tmp_path: Path, *records: VolumeRecord) -> Ledger:
    home = tmp_path / "home"
    home.mkdir(mode=0o700)
    ledger = Ledger(home)
    with ledger.volume_transaction() as volumes:
        for record in records:
            volumes[record.name] = record
    return ledger


def record(name: str, provider: str = "voltest", status: str = "kept", volume_id: str | None = None,
           created_at: float = 1.0, updated_at: float = 1.0, **more: Any) -> VolumeRecord:
    return VolumeRecord(name=name, provider=provider, size_gb=20, data_center="EU-RO-1",
                        status=status, volume_id=volume_id, price_per_month=1.4,
                        created_at=created_at, updated_at=updated_at, **more)


def events(ledger: Ledger, tag: str) -> list[dict[str, Any]]:
    found = ledger.volume(tag)
    assert found is not None
    return [{k: v for k, v in e.items() if k != "t"} for e in found.events]


def refused(call: Any, *args: Any, **kwargs: Any) -> ConfigError:
    with pytest.raises(ConfigError) as info:
        call(*args, **kwargs)
    return info.value


# -- the name -----------------------------------------------------------------------------------

@pytest.mark.parametrize(("given", "tag"), [
    ("cache1", "tp-vol-cache1"), ("tp-vol-cache1", "tp-vol-cache1"), ("a-b", "tp-vol-a-b"),
    ("0", "tp-vol-0"), ("a" * 40, "tp-vol-" + "a" * 40)])
def test_a_volume_name_takes_its_tp_vol_tag(given: str, tag: str) -> None:
    assert vol.volume_tag(given) == tag


@pytest.mark.parametrize("given", ["", "Cache1", "-ab", "a_b", "a" * 41, "tp-vol-", "tp-vol-X"])
def test_a_bad_volume_name_is_refused_naming_what_was_given(given: str) -> None:
    exc = refused(vol.volume_tag, given)
    assert exc.message == f"volume name {given!r}: use 1-40 lower-case letters, digits or '-'"
    assert exc.hint == "e.g. tailpod volume create cache1 ..."


def test_the_short_name_drops_only_the_tp_vol_prefix() -> None:
    assert vol.short_name("tp-vol-cache1") == "cache1"
    assert vol.short_name("scratch") == "scratch"
    assert vol.short_name("tp-20260101") == "tp-20260101"


def test_a_provider_without_volumes_is_refused_by_class_and_by_instance() -> None:
    exc = refused(vol.require_volumes, ScriptedCloud, "vastai")
    assert (exc.message, exc.hint) == ("the vastai provider has no volumes",
                                       "docs/volumes.md lists the providers that have")
    exc = refused(vol.volume_capable, ScriptedCloud())
    assert exc.message == "the scripted provider has no volumes"
    cloud = VolumeCloud()
    vol.require_volumes(VolumeCloud, "voltest")
    assert vol.volume_capable(cloud) is cloud


# -- which GPUs a data center serves, and where a volume goes -----------------------------------

def test_gpus_are_kept_by_id_or_short_name_when_stocked_in_preference_order() -> None:
    place = dc("X-1", ("STANDARD",), {"NVIDIA A40": "HIGH", "NVIDIA L4": "LOW", H100: "NONE",
                                      "NVIDIA A100": "MEDIUM"})
    kept, dropped = vol.filter_gpus(place, [" l4 ", "H100 SXM", "nvidia a40", "A40", "a100",
                                            "B200", "A4"])
    assert kept == ["NVIDIA L4", "NVIDIA A40", "NVIDIA A100"]
    assert dropped == ["H100 SXM", "B200", "A4"]
    assert vol.filter_gpus(place, []) == ([], [])
    # a GPU the catalog gives no short name is matched by its id alone, never a crash
    unnamed = dc("X-2", ("STANDARD",), {"NVIDIA RTX 9999": "HIGH", "NVIDIA A40": "HIGH"})
    assert vol.filter_gpus(unnamed, ["A40", "nvidia rtx 9999"]) == (
        ["NVIDIA A40", "NVIDIA RTX 9999"], [])
    # a blank preference (`--gpu ""`) names no GPU: it is dropped, never matched to one the
    # catalog gives no short name
    assert vol.filter_gpus(unnamed, ["", "  "]) == ([], ["", "  "])


def test_the_shrink_note_names_what_the_place_lacks_and_what_is_left() -> None:
    assert Placement("EU-RO-1", None, ["NVIDIA A40"]).shrink_note() is None
    assert Placement("EU-RO-1", None, ["NVIDIA A40", "NVIDIA L4"], ["H100 SXM", "B200"]
                     ).shrink_note() == ("EU-RO-1 has none of H100 SXM, B200: the GPU list "
                                         "shrinks to NVIDIA A40, NVIDIA L4")
    assert Placement("m-7", None, ["NVIDIA A40"], ["L4"], place="machine").shrink_note() == (
        "machine m-7 has none of L4: the GPU list shrinks to NVIDIA A40")


def test_an_unknown_volume_type_is_refused_before_the_data_centers_are_read() -> None:
    cloud = VolumeCloud(CLOUD_DCS)
    exc = refused(vol.choose_data_center, cloud, data_center="EU-RO-1", gpu_preference=["A40"],
                  volume_type="FAST")
    assert exc.message == ("volume type 'FAST': one of STANDARD, HIGH_PERFORMANCE; nothing was "
                           "created")
    assert cloud.dc_reads == 0


def test_a_named_data_center_is_checked_for_existence_volumes_and_gpus() -> None:
    cloud = VolumeCloud(CLOUD_DCS)
    exc = refused(vol.choose_data_center, cloud, data_center="nowhere", gpu_preference=[],
                  volume_type=None)
    assert (exc.message, exc.hint) == (
        "unknown data center 'nowhere'; nothing was created",
        "data centers with volumes: EU-RO-1, US-KS-2, CA-MTL-1")
    exc = refused(vol.choose_data_center, cloud, data_center="nowhere", gpu_preference=[],
                  volume_type="HIGH_PERFORMANCE")
    assert exc.hint == "data centers with volumes: US-KS-2"
    exc = refused(vol.choose_data_center, cloud, data_center="US-CA-2", gpu_preference=[],
                  volume_type=None)
    assert (exc.message, exc.hint) == (
        "US-CA-2 offers no network volumes; nothing was created",
        "data centers with volumes: EU-RO-1, US-KS-2, CA-MTL-1")
    exc = refused(vol.choose_data_center, cloud, data_center="EU-RO-1", gpu_preference=[],
                  volume_type="HIGH_PERFORMANCE")
    assert (exc.message, exc.hint) == (
        "EU-RO-1 offers no HIGH_PERFORMANCE volumes; nothing was created",
        "data centers with volumes: US-KS-2")
    exc = refused(vol.choose_data_center, cloud, data_center="EU-RO-1",
                  gpu_preference=["H100 SXM", "L4"], volume_type=None)
    assert exc.message == ("data center EU-RO-1 has none of the GPUs H100 SXM, L4 in stock: a "
                           "volume there could not serve them; nothing was created")


def test_a_machine_provider_names_its_place_in_the_refusals() -> None:
    cloud = MachineCloud([dc("m-1", ("STANDARD",), {"NVIDIA A40": "HIGH"})])
    exc = refused(vol.choose_data_center, cloud, data_center="m-9", gpu_preference=[],
                  volume_type=None)
    assert (exc.message, exc.hint) == ("unknown machine 'm-9'; nothing was created",
                                       "machines with volumes: m-1")
    exc = refused(vol.choose_data_center, cloud, data_center="m-1", gpu_preference=["L4"],
                  volume_type=None)
    assert exc.message.startswith("machine m-1 has none of the GPUs L4 in stock")


def test_a_named_data_center_is_matched_without_case_and_keeps_its_room_and_price() -> None:
    cloud = MachineCloud([dc("M-1", ("STANDARD",), {"NVIDIA A40": "HIGH", "NVIDIA L4": "LOW"},
                             volume_space_gb=300.0, volume_gb_month=0.15)])
    assert vol.choose_data_center(cloud, data_center="m-1", gpu_preference=["H100 SXM", "L4"],
                                  volume_type="STANDARD") == Placement(
        "M-1", "STANDARD", ["NVIDIA L4"], ["H100 SXM"], 300.0, 0.15, "machine")
    # no GPU named: the data center alone is enough
    assert vol.choose_data_center(cloud, data_center="M-1", gpu_preference=[],
                                  volume_type=None) == Placement(
        "M-1", None, [], [], 300.0, 0.15, "machine")


def test_without_a_data_center_the_gpus_must_be_named() -> None:
    exc = refused(vol.choose_data_center, VolumeCloud(CLOUD_DCS), data_center=None,
                  gpu_preference=[], volume_type=None)
    assert exc.message == ("name a data center (--datacenter) or the GPUs the volume is for "
                           "(--gpu, repeatable); nothing was created")


def test_the_data_center_with_the_earliest_preferred_gpu_wins() -> None:
    cloud = VolumeCloud(CLOUD_DCS)
    # EU-RO-1 has only the A40 in stock (second choice); US-KS-2 has the H100 (first)
    assert vol.choose_data_center(cloud, data_center=None, gpu_preference=["H100 SXM", "A40"],
                                  volume_type=None) == Placement(
        "US-KS-2", None, [H100, "NVIDIA A40"], [])
    # the H200 is stocked only where there are no volumes (US-CA-2) and in CA-MTL-1
    assert vol.choose_data_center(cloud, data_center=None, gpu_preference=["B200", "H200"],
                                  volume_type=None) == Placement(
        "CA-MTL-1", None, ["NVIDIA H200"], ["B200"])


def test_a_gpu_without_a_short_name_ranks_by_its_id() -> None:
    cloud = VolumeCloud([dc("X-3", ("STANDARD",), {"NVIDIA RTX 9999": "HIGH"}), KS])
    assert vol.choose_data_center(cloud, data_center=None,
                                  gpu_preference=["NVIDIA RTX 9999", "L4"],
                                  volume_type=None) == Placement(
        "X-3", None, ["NVIDIA RTX 9999"], ["L4"])


def test_a_tie_goes_to_more_gpus_kept_then_to_the_first_listed() -> None:
    cloud = VolumeCloud(CLOUD_DCS)
    assert vol.choose_data_center(cloud, data_center=None, gpu_preference=["A40", "L4"],
                                  volume_type=None).data_center == "US-KS-2"
    assert vol.choose_data_center(cloud, data_center=None, gpu_preference=["A40"],
                                  volume_type=None).data_center == "EU-RO-1"
    assert vol.choose_data_center(cloud, data_center=None, gpu_preference=["A40"],
                                  volume_type="HIGH_PERFORMANCE") == Placement(
        "US-KS-2", "HIGH_PERFORMANCE", ["NVIDIA A40"], [])


def test_a_place_without_room_for_the_size_is_passed_over() -> None:
    cloud = MachineCloud([dc("m-1", ("STANDARD",), {"NVIDIA A40": "HIGH"}, volume_space_gb=100.0,
                             volume_gb_month=0.1),
                          dc("m-2", ("STANDARD",), {"NVIDIA A40": "HIGH"}, volume_space_gb=300.0,
                             volume_gb_month=0.2)])
    pick = vol.choose_data_center
    assert pick(cloud, data_center=None, gpu_preference=["A40"], volume_type=None,
                size_gb=200) == Placement("m-2", None, ["NVIDIA A40"], [], 300.0, 0.2, "machine")
    assert pick(cloud, data_center=None, gpu_preference=["A40"], volume_type=None,
                size_gb=100).data_center == "m-1"
    assert pick(cloud, data_center=None, gpu_preference=["A40"],
                volume_type=None).data_center == "m-1"
    exc = refused(pick, cloud, data_center=None, gpu_preference=["A40", "L4"], volume_type=None,
                  size_gb=301)
    assert (exc.message, exc.hint) == (
        "no data center offers volumes and any of A40, L4 in stock; nothing was created",
        "add GPU types or name a data center with --datacenter")


# -- the create: ledger first, the provider asked by name after any error -----------------------

def test_a_size_outside_the_providers_range_or_the_places_room_is_refused(tmp_path: Path) -> None:
    cloud = VolumeCloud(price=1.0)
    ledger = new_ledger(tmp_path)
    place = Placement("EU-RO-1", None, ["NVIDIA A40"])
    for size in (9, 4001):
        exc = refused(vol.create_volume_safely, cloud, ledger, "cache1", size, place)
        assert exc.message == (f"--size-gb {size}: a voltest volume is 10-4000 GB; nothing was "
                               "created")
    exc = refused(vol.create_volume_safely, cloud, ledger, "cache1", 101,
                  Placement("m-1", None, ["NVIDIA A40"], space_gb=100.0))
    assert exc.message == "--size-gb 101: m-1 has room for 100 GB; nothing was created"
    assert ledger.volumes() == [] and cloud.created == []
    for size, name in ((10, "low"), (4000, "high")):
        vol.create_volume_safely(cloud, ledger, name, size, place)
    vol.create_volume_safely(cloud, ledger, "roomy", 100,
                             Placement("m-1", None, ["NVIDIA A40"], space_gb=100.0))
    assert [c[1] for c in cloud.created] == [10, 4000, 100]


def test_a_create_writes_intent_then_creating_then_the_providers_facts(
        tmp_path: Path, clock: None) -> None:
    cloud = VolumeCloud(price=3.5)
    ledger = new_ledger(tmp_path)
    cloud.ledger = ledger
    got = vol.create_volume_safely(cloud, ledger, "cache1", 50,
                                   Placement("EU-RO-1", "STANDARD", ["NVIDIA A40"],
                                             gb_month=0.1))
    assert cloud.created == [("tp-vol-cache1", 50, "EU-RO-1", "STANDARD")]
    assert cloud.price_asked == [(50, "STANDARD")]
    # while the create is in flight the ledger already holds the volume, with its price
    (held,) = cloud.at_create
    assert list(held) == ["tp-vol-cache1"]
    assert {k: held["tp-vol-cache1"][k] for k in (
        "name", "provider", "size_gb", "data_center", "volume_type", "status", "volume_id",
        "price_per_month", "updated_at")} == {
        "name": "tp-vol-cache1", "provider": "voltest", "size_gb": 50, "data_center": "EU-RO-1",
        "volume_type": "STANDARD", "status": "creating", "volume_id": None,
        "price_per_month": 3.5, "updated_at": NOW}
    saved = ledger.volume("tp-vol-cache1")
    assert saved is not None and got.to_json() == saved.to_json()
    assert (saved.provider, saved.status, saved.volume_id, saved.size_gb, saved.data_center,
            saved.volume_type, saved.price_per_month, saved.updated_at) == (
        "voltest", "kept", "vol-1", 50, "EU-RO-1", "STANDARD", 7.0, NOW)
    assert events(ledger, "tp-vol-cache1") == [
        {"event": "intent"}, {"event": "creating"}, {"event": "created", "volume_id": "vol-1"}]


def test_an_active_record_of_the_name_is_refused_and_a_deleted_one_replaced(
        tmp_path: Path) -> None:
    ledger = new_ledger(tmp_path, record("tp-vol-cache1", status="failed"),
                        record("tp-vol-old", status="deleted", volume_id="vol-0"))
    cloud = VolumeCloud()
    exc = refused(vol.create_volume_safely, cloud, ledger, "cache1", 20,
                  Placement("EU-RO-1", None, []))
    assert (exc.message, exc.hint) == ("volume cache1 is already in the ledger (failed)",
                                       "tailpod volume ls, or tailpod volume rm cache1")
    assert cloud.created == []
    vol.create_volume_safely(cloud, ledger, "old", 20, Placement("EU-RO-1", None, []))
    replaced = ledger.volume("tp-vol-old")
    assert replaced is not None and (replaced.status, replaced.volume_id) == ("kept", "vol-1")
    assert events(ledger, "tp-vol-old")[0] == {"event": "intent"}


def test_a_create_that_fails_cleanly_is_settled_with_the_price_it_would_have_cost(
        tmp_path: Path, clock: None) -> None:
    # no provider price: the place's $/GB/month, 17 GB x 0.123456 = 2.098752, to 4 places
    error = ProviderError("voltest answered 500")
    cloud = VolumeCloud(create_error=error)
    ledger = new_ledger(tmp_path)
    with pytest.raises(ProviderError) as info:
        vol.create_volume_safely(cloud, ledger, "cache1", 17,
                                 Placement("m-1", None, [], gb_month=0.123456))
    assert info.value is error
    saved = ledger.volume("tp-vol-cache1")
    assert saved is not None
    assert (saved.status, saved.price_per_month, saved.volume_id, saved.updated_at) == (
        "deleted", 2.0988, None, NOW)
    assert events(ledger, "tp-vol-cache1") == [
        {"event": "intent"}, {"event": "creating"},
        {"event": "create-failed-clean", "error": "ProviderError"}]


def test_a_create_error_with_the_volume_made_anyway_is_kept_and_said_to_bill(
        tmp_path: Path) -> None:
    cloud = VolumeCloud(create_error=ProviderError("voltest answered 500"), create_leaves=True)
    ledger = new_ledger(tmp_path)
    with pytest.raises(ProviderError) as info:
        vol.create_volume_safely(cloud, ledger, "cache1", 20, Placement("EU-RO-1", None, []))
    assert info.value.message == ("voltest answered the create of volume cache1 with an error, "
                                  "but it exists (vol-1) and bills: it is in the ledger")
    assert info.value.hint == "tailpod volume rm cache1 to delete it"
    assert info.value.__suppress_context__ and info.value.__cause__ is None
    saved = ledger.volume("tp-vol-cache1")
    assert saved is not None and (saved.status, saved.volume_id) == ("kept", "vol-1")
    assert events(ledger, "tp-vol-cache1")[2:] == [
        {"event": "create-error-but-exists", "volume_id": "vol-1"}]


def test_an_interrupted_create_that_made_the_volume_is_kept_and_the_interrupt_goes_on(
        tmp_path: Path) -> None:
    stop = KeyboardInterrupt()
    cloud = VolumeCloud(create_error=stop, create_leaves=True)
    ledger = new_ledger(tmp_path)
    with pytest.raises(KeyboardInterrupt) as info:
        vol.create_volume_safely(cloud, ledger, "cache1", 20, Placement("EU-RO-1", None, []))
    assert info.value is stop
    saved = ledger.volume("tp-vol-cache1")
    assert saved is not None and (saved.status, saved.volume_id) == ("kept", "vol-1")


def test_a_create_error_the_listing_cannot_check_is_left_failed_and_active(
        tmp_path: Path) -> None:
    # what is raised is the listing's error, the create's kept as its context
    error = ProviderError("voltest answered 500")
    broke = ProviderError("listing broke")
    cloud = VolumeCloud(create_error=error, list_error=broke)
    ledger = new_ledger(tmp_path)
    with pytest.raises(ProviderError) as info:
        vol.create_volume_safely(cloud, ledger, "cache1", 20, Placement("EU-RO-1", None, []))
    assert info.value is broke and info.value.__context__ is error
    saved = ledger.volume("tp-vol-cache1")
    assert saved is not None and saved.status == "failed" and saved.active
    assert events(ledger, "tp-vol-cache1")[2:] == [
        {"event": "create-error-unchecked", "error": "ProviderError"}]


def test_adopting_a_volume_the_ledger_lacks_records_it_under_its_provider(
        tmp_path: Path, clock: None) -> None:
    ledger = new_ledger(tmp_path)
    info = VolumeInfo("vol-9", "tp-vol-found", 30, "US-KS-2", "STANDARD", 2.1)
    vol._adopt(ledger, "tp-vol-found", info, "found-at-provider", provider="voltest")
    vol._adopt(ledger, "tp-vol-lost", VolumeInfo("vol-8", "tp-vol-lost", 40, "EU-RO-1", None),
               "found-at-provider")
    found, lost = ledger.volume("tp-vol-found"), ledger.volume("tp-vol-lost")
    assert found is not None and lost is not None
    assert (found.name, found.provider, found.status, found.volume_id, found.size_gb,
            found.data_center, found.volume_type, found.price_per_month, found.updated_at) == (
        "tp-vol-found", "voltest", "kept", "vol-9", 30, "US-KS-2", "STANDARD", 2.1, NOW)
    assert (lost.provider, lost.size_gb, lost.data_center, lost.price_per_month) == (
        "unknown", 40, "EU-RO-1", None)
    assert events(ledger, "tp-vol-found") == [{"event": "found-at-provider",
                                               "volume_id": "vol-9"}]


def test_each_run_that_mounts_a_volume_is_noted_once(tmp_path: Path) -> None:
    ledger = new_ledger(tmp_path, record("tp-vol-cache1", volume_id="v1"))
    for run in (RUN_A, RUN_B, RUN_A):
        vol.note_use(ledger, "tp-vol-cache1", run)
    vol.note_use(ledger, "tp-vol-absent", RUN_A)
    saved = ledger.volume("tp-vol-cache1")
    assert saved is not None and saved.used_by == [RUN_A, RUN_B]
    assert events(ledger, "tp-vol-cache1") == [{"event": "mounted", "run_tag": RUN_A},
                                               {"event": "mounted", "run_tag": RUN_B}]
    assert ledger.volume("tp-vol-absent") is None


# -- the listing joined with the ledger ---------------------------------------------------------

def test_each_rows_line_says_whether_it_was_kept_on_purpose_and_how_to_delete_it() -> None:
    kept = VolumeRow("tp-vol-cache1", "voltest", "kept", 20, "EU-RO-1", None, 1.4, "vol-1")
    assert kept.line() == ("kept on purpose: 20 GB at $1.40/month — volume cache1 (voltest "
                           "EU-RO-1, vol-1); delete with: tailpod volume rm cache1")
    bare = VolumeRow("tp-vol-cache1", "voltest", "kept", 20, None, None, None, "vol-1")
    assert bare.line() == ("kept on purpose: 20 GB at price unknown — volume cache1 (voltest ?, "
                           "vol-1); delete with: tailpod volume rm cache1")
    orphan = VolumeRow("tp-vol-x", "voltest", "orphan", 30, "US-KS-2", None, 2.105, "vol-2")
    assert orphan.line() == ("billing by mistake? 30 GB at $2.10/month — tp-vol-x (voltest "
                             "US-KS-2, vol-2) carries a tailpod name but is not in the ledger; "
                             "delete with: tailpod volume rm x --provider voltest")
    creating = VolumeRow("tp-vol-new", "voltest", "creating", 20, "EU-RO-1", None, None, None)
    assert creating.line() == ("creating: volume new (voltest EU-RO-1) — a create in progress "
                               "or interrupted moments ago; it may bill: tailpod volume ls again")
    unknown = VolumeRow("tp-vol-far", "other", "unknown", 20, "EU-RO-1", None, 1.4, "vol-3")
    assert unknown.line() == ("unknown: volume far (other EU-RO-1) — the provider could not be "
                              "asked; it may bill")
    assert [r.on_purpose for r in (kept, orphan, creating, unknown)] == [True, False, False, False]


def test_a_rows_json_carries_every_fact_and_whether_it_is_on_purpose() -> None:
    row = VolumeRow("tp-vol-cache1", "voltest", "kept", 20, "EU-RO-1", "STANDARD", 1.4, "vol-1",
                    [RUN_A])
    assert row.to_json() == {"name": "cache1", "tag": "tp-vol-cache1", "provider": "voltest",
                             "state": "kept", "size_gb": 20, "data_center": "EU-RO-1",
                             "type": "STANDARD", "price_per_month": 1.4, "volume_id": "vol-1",
                             "used_by": [RUN_A], "on_purpose": True,
                             "create_interrupted": False}


def test_the_report_splits_kept_from_by_mistake_and_sums_the_month() -> None:
    kept = VolumeRow("tp-vol-a", "voltest", "kept", 20, "EU-RO-1", None, 1.23456, "v-a")
    orphan = VolumeRow("tp-vol-b", "voltest", "orphan", 20, "EU-RO-1", None, None, "v-b")
    unknown = VolumeRow("tp-vol-c", "other", "unknown", 20, "EU-RO-1", None, 2.0, "v-c")
    failed = vol.VolumeStillBills("volume d still bills", "retry", {"volume": "d",
                                                                    "proven": False})
    report = VolumeReport([kept, orphan, unknown], {"other": "other API down"}, [failed])
    assert report.kept == [kept] and report.by_mistake == [orphan, unknown]
    assert report.monthly() == 3.2346  # 1.23456 + 2.0, the unknown price counted as 0
    assert report.to_json() == {
        "kept_on_purpose": [kept.to_json()],
        "billing_by_mistake": [orphan.to_json(), unknown.to_json()],
        "lines": [kept.line(), orphan.line(), unknown.line()], "usd_per_month": 3.2346,
        "errors": {"other": "other API down"}, "delete_failed": [{"volume": "d", "proven": False}]}
    assert VolumeReport([]).to_json()["delete_failed"] == []


def test_reconcile_joins_the_listing_with_the_ledger_and_settles_it(
        tmp_path: Path, clock: None) -> None:
    ledger = new_ledger(
        tmp_path,
        record("tp-vol-a", volume_id="v-a", used_by=[RUN_A], created_at=1.0),
        record("tp-vol-b", status="creating", created_at=2.0),  # listed: a late create
        record("tp-vol-c", volume_id="v-old", created_at=3.0),  # listed under another id
        record("tp-vol-d", volume_id="v-d", created_at=4.0),  # gone from the provider
        record("tp-vol-e", status="intent", created_at=5.0, updated_at=NOW - 119.0),
        record("tp-vol-k", status="creating", volume_id="v-k", volume_type="STANDARD",
               created_at=5.5, updated_at=NOW - 10.0),  # a create in flight elsewhere
        record("tp-vol-f", status="creating", created_at=6.0, updated_at=NOW - 120.0),
        record("tp-vol-g", status="deleted", volume_id="v-g", created_at=7.0),
        record("tp-vol-h", provider="other", volume_id="v-h", volume_type="STANDARD",
               used_by=[RUN_B], created_at=8.0),
        record("tp-vol-i", provider="other", status="deleted", created_at=9.0),
        record("tp-vol-j", provider="other", status="deleted", created_at=10.0))
    listed = [VolumeInfo("v-a", "tp-vol-a", 20, "EU-RO-1", None, 1.4),
              VolumeInfo("v-b", "tp-vol-b", 25, "US-KS-2", "STANDARD", 1.75),
              VolumeInfo("v-c", "tp-vol-c", 20, "EU-RO-1", None, 1.4),
              VolumeInfo("v-x", "tp-vol-x", 30, "EU-RO-1", "STANDARD", 2.1),
              VolumeInfo("v-y", "scratch", 10, "EU-RO-1", None, 0.7),  # not tailpod's
              VolumeInfo("v-j", "tp-vol-j", 20, "EU-RO-1", None, 1.4)]  # the ledger's is other's
    cloud = VolumeCloud(volumes=listed)
    report = vol.reconcile_volumes({"scripted": ScriptedCloud(), "voltest": cloud}, ledger)
    assert report.rows == [
        VolumeRow("tp-vol-a", "voltest", "kept", 20, "EU-RO-1", None, 1.4, "v-a", [RUN_A]),
        VolumeRow("tp-vol-b", "voltest", "kept", 25, "US-KS-2", "STANDARD", 1.75, "v-b", [],
                  create_interrupted=True),
        VolumeRow("tp-vol-c", "voltest", "kept", 20, "EU-RO-1", None, 1.4, "v-c", []),
        VolumeRow("tp-vol-x", "voltest", "orphan", 30, "EU-RO-1", "STANDARD", 2.1, "v-x"),
        VolumeRow("tp-vol-j", "voltest", "orphan", 20, "EU-RO-1", None, 1.4, "v-j"),
        VolumeRow("tp-vol-e", "voltest", "creating", 20, "EU-RO-1", None, 1.4, None),
        VolumeRow("tp-vol-k", "voltest", "creating", 20, "EU-RO-1", "STANDARD", 1.4, "v-k"),
        VolumeRow("tp-vol-h", "other", "unknown", 20, "EU-RO-1", "STANDARD", 1.4, "v-h",
                  [RUN_B])]
    assert report.errors == {}
    status = {v.name: (v.status, v.volume_id) for v in ledger.volumes()}
    assert status == {"tp-vol-a": ("kept", "v-a"), "tp-vol-b": ("kept", "v-b"),
                      "tp-vol-c": ("kept", "v-c"), "tp-vol-d": ("deleted", "v-d"),
                      "tp-vol-e": ("intent", None), "tp-vol-f": ("deleted", None),
                      "tp-vol-k": ("creating", "v-k"),
                      "tp-vol-g": ("deleted", "v-g"), "tp-vol-h": ("kept", "v-h"),
                      "tp-vol-i": ("deleted", None), "tp-vol-j": ("deleted", None)}
    assert events(ledger, "tp-vol-a") == []
    assert events(ledger, "tp-vol-b") == [{"event": "create-interrupted-found",
                                          "volume_id": "v-b"}]
    assert events(ledger, "tp-vol-c") == [{"event": "found-at-provider", "volume_id": "v-c"}]
    assert events(ledger, "tp-vol-d") == [{"event": "not-listed-by-provider"}]
    assert events(ledger, "tp-vol-f") == [{"event": "not-listed-by-provider"}]
    assert events(ledger, "tp-vol-e") == events(ledger, "tp-vol-g") == []


def test_a_listing_that_fails_leaves_the_ledgers_volumes_unknown_and_unsettled(
        tmp_path: Path, clock: None) -> None:
    ledger = new_ledger(tmp_path,
                        record("tp-vol-a", volume_id="v-a", used_by=[RUN_A], created_at=1.0),
                        record("tp-vol-b", status="intent", created_at=2.0, updated_at=1.0),
                        record("tp-vol-c", status="deleted", created_at=3.0))
    cloud = VolumeCloud(list_error=ProviderError("voltest API down"))
    other = VolumeCloud(volumes=[VolumeInfo("v-o", "tp-vol-o", 10, "EU-RO-1", None, 0.7)])
    report = vol.reconcile_volumes({"voltest": cloud, "other": other}, ledger)
    assert report.errors == {"voltest": "voltest API down"}
    assert report.rows == [
        VolumeRow("tp-vol-o", "other", "orphan", 10, "EU-RO-1", None, 0.7, "v-o"),
        VolumeRow("tp-vol-a", "voltest", "unknown", 20, "EU-RO-1", None, 1.4, "v-a", [RUN_A]),
        VolumeRow("tp-vol-b", "voltest", "unknown", 20, "EU-RO-1", None, 1.4, None, [])]
    assert [(v.name, v.status) for v in ledger.volumes()] == [
        ("tp-vol-a", "kept"), ("tp-vol-b", "intent"), ("tp-vol-c", "deleted")]


# -- `up --volume`: the mount checked before anything is rented, the caches' paths ---------------

def test_a_mount_is_refused_for_a_volume_the_ledger_cannot_mount(tmp_path: Path) -> None:
    cloud = VolumeCloud([EU], [VolumeInfo("v-1", "tp-vol-here", 20, "EU-RO-1", None)])
    ledger = new_ledger(tmp_path, record("tp-vol-gone", status="deleted", volume_id="v-0"),
                        record("tp-vol-new", status="creating"),
                        record("tp-vol-far", provider="runpod", volume_id="v-2"),
                        record("tp-vol-lost", volume_id="v-9"),
                        record("tp-vol-here", volume_id="v-1"))
    for name in ("absent", "gone", "new"):
        exc = refused(vol.prepare_mount, cloud, ledger, name, ["A40"])
        assert (exc.message, exc.hint) == (f"no volume {name} in the ledger",
                                           "tailpod volume ls; tailpod volume create NAME ...")
    exc = refused(vol.prepare_mount, cloud, ledger, "far", ["A40"])
    assert exc.message == "volume far is on runpod, not voltest; nothing was rented"
    exc = refused(vol.prepare_mount, cloud, ledger, "lost", ["A40"])
    assert (exc.message, exc.hint) == ("voltest no longer has volume lost (v-9); nothing was "
                                       "rented", "tailpod volume ls settles the ledger")
    exc = refused(vol.prepare_mount, cloud, ledger, "here", ["H100 SXM", "L4"])
    assert (exc.message, exc.hint) == (
        "volume here is in data center EU-RO-1, which has none of H100 SXM, L4 in stock; "
        "nothing was rented", "add a GPU that data center has, or make a volume elsewhere")


def test_a_mount_whose_data_center_the_provider_no_longer_lists_is_refused(
        tmp_path: Path) -> None:
    cloud = VolumeCloud([KS], [VolumeInfo("v-1", "tp-vol-here", 20, "EU-RO-1", None)])
    ledger = new_ledger(tmp_path, record("tp-vol-here", volume_id="v-1"))
    exc = refused(vol.prepare_mount, cloud, ledger, "here", ["A40"])
    assert exc.message == ("voltest does not list data center EU-RO-1 of volume here; nothing "
                           "was rented")


def test_a_mount_takes_the_providers_facts_and_the_gpus_its_data_center_stocks(
        tmp_path: Path) -> None:
    # the ledger remembers another size, price and data center: the provider's answer wins
    cloud = VolumeCloud([EU, KS], [VolumeInfo("v-1", "tp-vol-here", 50, "US-KS-2", None, 3.5)])
    ledger = new_ledger(tmp_path, record("tp-vol-here", volume_id="v-1"))
    mount = vol.prepare_mount(cloud, ledger, "here", ["B200", "L4", "A40"])
    assert mount == VolumeMount("tp-vol-here", "v-1", "US-KS-2", "/runpod-volume",
                                ["NVIDIA L4", "NVIDIA A40"], ["B200"], 50, 3.5, "data center")
    machine = MachineCloud([dc("m-1", ("STANDARD",), {"NVIDIA A40": "HIGH"})],
                           [VolumeInfo("v-1", "tp-vol-here", 50, "m-1", None, 3.5)])
    exc = refused(vol.prepare_mount, machine, ledger, "here", ["L4"])
    assert exc.message.startswith("volume here is in machine m-1, which has none of L4")
    assert vol.prepare_mount(machine, ledger, "here", ["A40"]).place == "machine"


def test_a_mounts_json_names_the_volume_and_what_the_pod_spec_gets() -> None:
    mount = VolumeMount("tp-vol-here", "v-1", "US-KS-2", "/runpod-volume", ["NVIDIA L4"],
                        ["B200"], 50, 3.5, "machine")
    assert mount.to_json() == {"name": "here", "tag": "tp-vol-here", "volume_id": "v-1",
                               "data_center": "US-KS-2", "mount_path": "/runpod-volume",
                               "gpus": ["NVIDIA L4"], "dropped": ["B200"], "size_gb": 50,
                               "price_per_month": 3.5}


def test_the_compile_cache_key_is_sha256_of_the_sorted_json_of_what_makes_it_valid() -> None:
    # python3 -c 'import hashlib,json; print(hashlib.sha256(json.dumps({...},
    #   sort_keys=True).encode()).hexdigest()[:16])' over the same five facts
    args = ("vllm", "vllm/vllm-openai:v0.11.0", "Qwen/Qwen3-0.6B")
    argv = ("--max-model-len", "4096")
    assert vol.compile_cache_key(*args, "abc123", argv) == "e634f582ffc14235"
    assert vol.compile_cache_key(*args, "abc123", list(argv)) == "e634f582ffc14235"
    assert vol.compile_cache_key(*args, None, argv) == "824c12781128f166"


def test_the_caches_live_under_the_mount_with_compile_caches_under_the_key() -> None:
    root = "/workspace/tailpod"
    expected = {"HF_HOME": f"{root}/hf",
                "VLLM_CACHE_ROOT": f"{root}/compile/k1/vllm",
                "TRITON_CACHE_DIR": f"{root}/compile/k1/triton",
                "TORCHINDUCTOR_CACHE_DIR": f"{root}/compile/k1/inductor",
                "FLASHINFER_WORKSPACE_BASE": f"{root}/compile/k1/flashinfer",
                "SGLANG_CACHE_DIR": f"{root}/compile/k1/sglang"}
    assert vol.cache_env("/workspace/", "k1") == expected
    assert vol.cache_env("/workspace", "k1") == expected
    # only slashes are stripped from the mount's end
    assert vol.cache_env("/mnt/volX/", "k1")["HF_HOME"] == "/mnt/volX/tailpod/hf"


# -- what the cold start cost -------------------------------------------------------------------

def test_the_cold_start_is_billed_from_the_first_create_call_to_ready() -> None:
    events_ = [{"event": "intent", "t": 1.0}, {"event": "creating", "t": "late"},
               {"event": "creating", "t": 100.0}, {"event": "creating", "t": 150.0}]
    phases = {"compile_cache_hit": True, "compile_cache_source": "volume", "load_s": 3.0}
    facts = {"startup_phases": phases}
    got = vol.cold_start(events_, 2.0, 190.12345, facts, {"name": "cache1"})
    # 190.12345 - 100 = 90.12345 s; x $2/h / 3600 = 0.0500685833 -> 0.050069
    assert got == {"create_at": 100.0, "ready_at": 190.12345, "billed_s_to_ready": 90.123,
                   "usd_to_ready": 0.050069, "price_per_hr": 2.0, "phases": phases,
                   "compile_cache_hit": True, "compile_cache_source": "volume",
                   "volume": "cache1"}
    assert got["phases"] is not phases


def test_a_cold_start_without_a_create_price_or_phases_leaves_those_unknown() -> None:
    assert vol.cold_start([{"event": "intent", "t": 1.0}], 2.0, 190.0, {}, None) == {
        "create_at": None, "ready_at": 190.0, "billed_s_to_ready": None, "usd_to_ready": None,
        "price_per_hr": 2.0, "phases": {}, "compile_cache_hit": None,
        "compile_cache_source": None, "volume": None}
    got = vol.cold_start([{"event": "creating", "t": 200.0}], None, 190.0,
                         {"startup_phases": None}, {})
    assert (got["billed_s_to_ready"], got["usd_to_ready"], got["phases"], got["volume"]) == (
        0.0, None, {}, None)


def test_the_first_token_is_placed_on_this_machines_clock_and_billed_from_the_create() -> None:
    cold = {"create_at": 1000.0, "price_per_hr": 3.6, "volume": "cache1"}
    rows = [
        {"kind": "request", "ok": True, "t_start": 10.0, "ttft_s": 0.5, "e2e_s": 2.0},
        {"kind": "request", "ok": True, "sent_at": 9.0, "ttft_s": 0.25},  # open loop's stamp
        {"kind": "request", "ok": False, "t_start": 5.0, "ttft_s": 0.1, "e2e_s": 0.2},
        {"kind": "cell", "ok": True, "t_start": 1.0, "ttft_s": 0.1, "e2e_s": 0.2},
        {"kind": "request", "ok": True, "t_start": "x", "ttft_s": 0.1},
        {"kind": "request", "ok": True, "t_start": 9.0, "ttft_s": None, "e2e_s": 0.2},
        {"kind": "request", "ok": True, "t_start": 20.0, "ttft_s": 1.0, "e2e_s": 5.0}]
    # first token 9.25 (the open loop's row), last end 25.0: the pod spent 15.75 s after it, so
    # it came at 1100.12345 - 15.75 = 1084.37345; billed 84.37345 s x $3.6/h = $0.08437345
    assert vol.to_first_token(cold, rows, 1100.12345) == {
        **cold, "first_token_at": 1084.373, "billed_s_to_first_token": 84.373,
        "usd_to_first_token": 0.084373}


def test_a_first_token_without_rows_a_create_or_a_price_is_unknown_or_void() -> None:
    row = {"kind": "request", "ok": True, "t_start": 10.0, "ttft_s": 0.5, "e2e_s": 0.25}
    assert vol.to_first_token({"create_at": 1000.0}, [], 1100.0) is None
    assert vol.to_first_token({"create_at": None}, [row], 1100.0) is None
    assert vol.to_first_token({}, [row], 1100.0) is None
    # an end before the first token (e2e under the TTFT) moves nothing; a price not a number
    assert vol.to_first_token({"create_at": 1000.0, "price_per_hr": "?"}, [row], 1100.0) == {
        "create_at": 1000.0, "price_per_hr": "?", "first_token_at": 1100.0,
        "billed_s_to_first_token": 100.0, "usd_to_first_token": None}
    # rows received before the create call (clocks apart): billed 0, never negative
    assert vol.to_first_token({"create_at": 1200.0, "price_per_hr": 3.6}, [row], 1100.0) == {
        "create_at": 1200.0, "price_per_hr": 3.6, "first_token_at": 1100.0,
        "billed_s_to_first_token": 0.0, "usd_to_first_token": 0.0}


def test_a_volume_whose_create_was_interrupted_is_kept_and_said_so(
        tmp_path: Path, clock: None) -> None:
    """Adversary #17: `volume create` killed while the provider made the volume left the record
    `creating`; every later `volume ls`, `status` and `down --all` called it "kept on purpose".
    It bills and is kept (the volume was asked for), and its words say the create never finished,
    on that listing and every one after."""
    ledger = new_ledger(tmp_path, record("tp-vol-b", status="creating", created_at=2.0))
    cloud = VolumeCloud(volumes=[VolumeInfo("v-b", "tp-vol-b", 25, "US-KS-2", None, 1.75)])
    for _ in range(2):  # the first listing adopts it, the second reads the ledger's kept record
        (row,) = vol.reconcile_volumes({"voltest": cloud}, ledger).rows
        assert row.line() == ("kept, though its create was interrupted: 25 GB at $1.75/month — "
                              "volume b (voltest US-KS-2, v-b); it bills until deleted with: "
                              "tailpod volume rm b")
        assert row.on_purpose and row.to_json()["create_interrupted"] is True
    assert events(ledger, "tp-vol-b") == [{"event": "create-interrupted-found",
                                          "volume_id": "v-b"}]
