"""Network volumes on the RunPod sandbox: ledger first, proven delete, kept storage named by
`down`, a directory that a second pod really finds, bad input refused before any create.

Expected prices are computed here from the documented rate ($0.07/GB/month standard, runpod/docs
storage/network-volumes.mdx @ a900806e) and the sandbox meter's own month (720 h), never read back
from the code under test."""

from __future__ import annotations

import json
import time
from pathlib import Path

import httpx
import pytest
from typer.testing import CliRunner, Result

from tailpod.cli.main import app
from tailpod.config import ttl_deadline
from tailpod.errors import ProviderError
from tailpod.ledger import Ledger, PodRecord, new_run_tag
from tailpod.provision import volumes as vol
from tailpod.provision.base import PodSpec
from tailpod.provision.create import create_pod_safely, up_remote
from tailpod.provision.providers import get_provider
from tailpod.provision.teardown import teardown
from tailpod.sandbox import Sandbox
from tests.helpers.api_timings import fast_timings
from tests.helpers.container_log import wait_for_log
from tests.helpers.lifecycle_policy import fast_policy

from .conftest import settings_for

STANDARD_GB_MONTH = 0.07
SANDBOX_HOURS_PER_MONTH = 720.0


def live_volumes(sandbox: Sandbox) -> list[str]:
    return [v.name for v in sandbox.cloud.volumes.values() if v.deleted_at is None]


def volume_meter_rows(sandbox: Sandbox) -> list[dict[str, object]]:
    return [r for r in sandbox.billing_now() if str(r["name"]).startswith("tp-vol-")]


def down_keeps_cache1(sandbox: Sandbox, home: Path, tag: str, kept: str, billed: str) -> Result:
    """`down TAG` of a pod that mounted the volume cache1: it succeeds and says `kept` ("kept on
    purpose: ..."), the proof names cache1 as kept and nothing billing by mistake, and the only
    thing left billing is the volume, `billed` being its name at the provider."""
    down = CliRunner().invoke(app, ["down", tag])
    assert down.exit_code == 0, down.output
    assert kept in down.output
    proof = json.loads((home / "results" / tag / "billing-proof.json").read_text())
    assert [k["name"] for k in proof["storage"]["kept_on_purpose"]] == ["cache1"]
    assert proof["storage"]["billing_by_mistake"] == []
    assert [r["name"] for r in sandbox.billing_now()] == [billed]  # no pod bills
    return down


def rm_proves_cache1_gone(sandbox: Sandbox, home: Path, volume_id: str | None) -> Result:
    """`volume rm cache1 --json`: the direct lookup of `volume_id` finds it gone, nothing bills
    and no volume is left at the provider, and the ledger records it deleted."""
    gone = CliRunner().invoke(app, ["volume", "rm", "cache1", "--json"])
    assert gone.exit_code == 0, gone.output
    assert json.loads(gone.stdout)["direct_lookup_gone"] == {volume_id: True}
    assert sandbox.meter()["billing_count"] == 0
    assert [v for v in sandbox.cloud.volumes.values() if v.deleted_at is None] == []
    assert Ledger(home).volume("tp-vol-cache1").status == "deleted"  # type: ignore[union-attr]
    return gone


def test_volume_create_ls_status_down_rm_through_the_cli(
        sandbox: Sandbox, tailpod_home: Path, cli_env: dict[str, str]) -> None:
    runner = CliRunner()
    made = runner.invoke(app, ["volume", "create", "cache1", "--size-gb", "50", "--gpu", "A40"])
    assert made.exit_code == 0, made.output
    assert live_volumes(sandbox) == ["tp-vol-cache1"]
    # on the meter from creation, at 50 GB x $0.07/GB/month
    [row] = volume_meter_rows(sandbox)
    assert row["rate_per_hr"] == pytest.approx(50 * STANDARD_GB_MONTH / SANDBOX_HOURS_PER_MONTH,
                                               abs=1e-6)
    record = Ledger(tailpod_home).volume("tp-vol-cache1")
    assert record is not None and record.status == "kept" and record.volume_id
    assert [e["event"] for e in record.events][:2] == ["intent", "creating"]

    listing = runner.invoke(app, ["volume", "ls", "--json"])
    assert listing.exit_code == 0, listing.output
    [kept] = json.loads(listing.stdout)["kept_on_purpose"]
    assert kept["price_per_month"] == pytest.approx(50 * STANDARD_GB_MONTH)
    assert kept["volume_id"] == record.volume_id and kept["data_center"] == record.data_center

    status = runner.invoke(app, ["status", "--json"])
    assert status.exit_code == 0, status.output
    assert json.loads(status.stdout)["storage"]["kept_on_purpose"][0]["name"] == "cache1"
    plain = runner.invoke(app, ["status"])
    assert "kept on purpose: 50 GB at $3.50/month" in plain.output, plain.output

    # a pod mounting it, then `down`: the pod is proven gone, the volume named as kept
    settings = settings_for(sandbox, tailpod_home, **cli_env)
    ledger = Ledger(settings.state_dir)
    spec = PodSpec(run_tag="tp-vol-run-1", gpu_preference=["A40"], image="img",
                   start_command=["sleep", "30"], volume_id=record.volume_id,
                   volume_mount_path="/workspace", data_center_ids=[record.data_center])
    up_remote(settings, ledger, spec, policy=fast_policy(), timings=fast_timings())
    vol.note_use(ledger, "tp-vol-cache1", "tp-vol-run-1")
    down = down_keeps_cache1(sandbox, tailpod_home, "tp-vol-run-1",
                             "kept on purpose: 50 GB at $3.50/month", "tp-vol-cache1")

    # down --all never deletes a volume it was not asked to
    down_all = runner.invoke(app, ["down", "--all"])
    assert down_all.exit_code == 0, down_all.output
    assert live_volumes(sandbox) == ["tp-vol-cache1"]
    assert "kept on purpose" in down_all.output

    gone = rm_proves_cache1_gone(sandbox, tailpod_home, record.volume_id)
    assert sandbox.runpod_key not in made.output + listing.output + down.output + gone.output


def test_down_volumes_deletes_only_the_runs_volumes(
        sandbox: Sandbox, tailpod_home: Path, cli_env: dict[str, str]) -> None:
    runner = CliRunner()
    for name in ("mine", "other"):
        made = runner.invoke(app, ["volume", "create", name, "--size-gb", "10",
                                   "--datacenter", "EU-RO-1"])
        assert made.exit_code == 0, made.output
    settings = settings_for(sandbox, tailpod_home, **cli_env)
    ledger = Ledger(settings.state_dir)
    mine = ledger.volume("tp-vol-mine")
    assert mine is not None and mine.data_center == "EU-RO-1"
    spec = PodSpec(run_tag="tp-vol-run-2", gpu_preference=["A40"], image="img",
                   start_command=["sleep", "30"], volume_id=mine.volume_id,
                   data_center_ids=[mine.data_center])
    up_remote(settings, ledger, spec, policy=fast_policy(), timings=fast_timings())
    vol.note_use(ledger, "tp-vol-mine", "tp-vol-run-2")
    down = runner.invoke(app, ["down", "tp-vol-run-2", "--volumes"])
    assert down.exit_code == 0, down.output
    assert live_volumes(sandbox) == ["tp-vol-other"]
    proof = json.loads((tailpod_home / "results" / "tp-vol-run-2" / "billing-proof.json")
                       .read_text())
    assert [d["volume"] for d in proof["storage"]["deleted"]] == ["mine"]
    assert "kept on purpose: 10 GB at $0.70/month" in down.output


@pytest.mark.parametrize("args, words", [
    (["--size-gb", "50", "--datacenter", "XX-NOPE-9"], "unknown data center"),
    (["--size-gb", "5", "--datacenter", "EU-RO-1"], "10-4096 GB"),
    (["--size-gb", "5000", "--datacenter", "EU-RO-1"], "10-4096 GB"),
    (["--size-gb", "50", "--datacenter", "EU-RO-1", "--gpu", "H200 SXM"], "has none of the GPUs"),
    (["--size-gb", "50", "--datacenter", "US-CA-2"], "offers no"),
    (["--size-gb", "50", "--datacenter", "EU-RO-1", "--type", "HIGH_PERFORMANCE"], "offers no"),
    (["--size-gb", "50"], "name a data center"),
])
def test_bad_input_is_refused_before_anything_is_created(
        sandbox: Sandbox, tailpod_home: Path, cli_env: dict[str, str], args: list[str],
        words: str) -> None:
    result = CliRunner().invoke(app, ["volume", "create", "bad", *args])
    assert result.exit_code == 2, result.output
    assert words in result.output
    assert live_volumes(sandbox) == [] and sandbox.meter()["billing_count"] == 0
    assert Ledger(tailpod_home).volumes() == []


def test_a_data_center_is_chosen_from_the_gpu_list_and_the_list_shrinks_to_it(
        sandbox: Sandbox, tailpod_home: Path) -> None:
    provider = get_provider("runpod", settings_for(sandbox, tailpod_home),
                            timings=fast_timings())
    assert isinstance(provider, vol.SupportsVolumes)
    # H200 is only in SBX-LOCAL-1 and US-CA-2; US-CA-2 has no volumes
    place = vol.choose_data_center(provider, data_center=None,
                                   gpu_preference=["H200 SXM", "A40"], volume_type=None)
    assert place.data_center == "SBX-LOCAL-1"
    assert place.gpus == ["NVIDIA H200", "NVIDIA A40"]
    place = vol.choose_data_center(provider, data_center="EU-RO-1",
                                   gpu_preference=["H200 SXM", "A40"], volume_type=None)
    assert place.gpus == ["NVIDIA A40"] and place.dropped == ["H200 SXM"]
    assert "EU-RO-1 has none of H200 SXM" in (place.shrink_note() or "")


def test_a_create_error_leaves_a_volume_the_ledger_knows(
        sandbox: Sandbox, tailpod_home: Path, cli_env: dict[str, str]) -> None:
    """The emulator creates the volume and then answers 500: tailpod looks it up by name."""
    sandbox.add_fault("error_after_create", provider="runpod", op="volume_create", times=1)
    settings = settings_for(sandbox, tailpod_home, **cli_env)
    provider = get_provider("runpod", settings, timings=fast_timings())
    ledger = Ledger(settings.state_dir)
    place = vol.Placement("SBX-LOCAL-1", None, ["NVIDIA A40"])
    with pytest.raises(ProviderError, match="exists"):
        vol.create_volume_safely(provider, ledger, "flaky", 20, place)
    record = ledger.volume("tp-vol-flaky")
    assert record is not None and record.status == "kept"
    assert len(sandbox.cloud.volumes) == 1  # the create was sent once, never blindly retried
    assert record.volume_id == next(v.volume_id for v in sandbox.cloud.volumes.values())
    status = CliRunner().invoke(app, ["status"])
    assert "kept on purpose: 20 GB at $1.40/month" in status.output, status.output


def test_a_crash_before_the_ledger_knew_the_id_is_found_by_its_tp_name(
        sandbox: Sandbox, tailpod_home: Path, cli_env: dict[str, str]) -> None:
    """A `tp-vol-` volume not in the ledger (the ledger lost, or a crash before it was written)
    is listed as billing by mistake, kept by `down --all`, and deleted only by `volume rm`."""
    created = httpx.post(sandbox.runpod_url + "/v2/network-volumes", timeout=5,
                         headers={"Authorization": f"Bearer {sandbox.runpod_key}"},
                         json={"name": "tp-vol-lost", "size": 30, "dataCenter": "SBX-LOCAL-1"})
    assert created.status_code == 201
    runner = CliRunner()
    listing = runner.invoke(app, ["volume", "ls", "--json"])
    [row] = json.loads(listing.stdout)["billing_by_mistake"]
    assert row["name"] == "lost" and row["price_per_month"] == pytest.approx(30 * 0.07)
    down_all = runner.invoke(app, ["down", "--all"])
    assert down_all.exit_code == 0, down_all.output
    assert "billing by mistake?" in down_all.output and live_volumes(sandbox) == ["tp-vol-lost"]
    gone = runner.invoke(app, ["volume", "rm", "lost", "--provider", "runpod"])
    assert gone.exit_code == 0, gone.output
    assert live_volumes(sandbox) == [] and sandbox.meter()["billing_count"] == 0


def test_ledger_volume_records_never_reach_the_pod_paths(tailpod_home: Path) -> None:
    ledger = Ledger(tailpod_home)
    ledger.put(PodRecord(run_tag="tp-pod-1", provider="runpod"))
    with ledger.volume_transaction() as volumes:
        volumes["tp-vol-x"] = vol.VolumeRecord(name="tp-vol-x", provider="runpod", size_gb=10,
                                               data_center="EU-RO-1", status="kept")
    again = Ledger(tailpod_home)
    assert [r.run_tag for r in again.all()] == ["tp-pod-1"]
    assert [v.name for v in again.volumes()] == ["tp-vol-x"]
    raw = json.loads((tailpod_home / "ledger.json").read_text())
    assert set(raw["pods"]) == {"tp-pod-1"} and set(raw["volumes"]) == {"tp-vol-x"}


def test_a_second_pod_finds_what_the_first_wrote_on_the_volume(
        sandbox: Sandbox, tailpod_home: Path) -> None:
    settings = settings_for(sandbox, tailpod_home)
    provider = get_provider("runpod", settings, timings=fast_timings())
    ledger = Ledger(tailpod_home)
    record = vol.create_volume_safely(provider, ledger, "shared", 10,
                                      vol.Placement("EU-RO-1", None, ["NVIDIA A40"]))
    pods = sandbox.cloud.host
    logs = []
    for i, script in enumerate(['mkdir -p "$HF_HOME" && echo weights-v1 > "$HF_HOME/marker"; '
                                'echo wrote; sleep 30',
                                'cat "$HF_HOME/marker"; cat workspace/hf/marker; sleep 30']):
        tag = new_run_tag()
        spec = PodSpec(run_tag=tag, gpu_preference=["NVIDIA H200", "NVIDIA A40"], image="img",
                       start_command=["sh", "-c", script], env={"HF_HOME": "/workspace/hf"},
                       volume_id=record.volume_id, data_center_ids=[record.data_center])
        spec.ttl_at = ttl_deadline(1.0, time.time())
        info = create_pod_safely(provider, spec, ledger, PodRecord(run_tag=tag,
                                                                   provider="runpod"),
                                 policy=fast_policy())
        # placed in the volume's data center, on the GPU it has (H200 is not in EU-RO-1)
        assert info.gpu_type == "NVIDIA A40" and info.detail["data_center"] == "EU-RO-1"
        pod = next(p for p in sandbox.cloud.pods.values() if p.pod_id == info.pod_id)
        log = pods.container_log(pod)  # type: ignore[attr-defined]
        logs.append(wait_for_log(log, "wrote") if i == 0 else wait_for_log(log, "weights-v1", times=2))
        pod_record = ledger.get(tag)
        assert pod_record is not None
        assert teardown(provider, ledger, pod_record, tailpod_home / "run" / tag,
                        policy=fast_policy()).proven
    assert logs[1].count("weights-v1") == 2, logs  # via the env path and via the mount path
    assert live_volumes(sandbox) == ["tp-vol-shared"]  # pod teardown never deletes the volume


def test_the_emulator_keeps_the_specs_volume_rules(sandbox: Sandbox) -> None:
    headers = {"Authorization": f"Bearer {sandbox.runpod_key}"}
    url = sandbox.runpod_url

    def post(path: str, body: object) -> httpx.Response:
        return httpx.post(url + path, json=body, headers=headers, timeout=5)

    assert post("/v2/network-volumes", {"name": "a", "size": 50, "dataCenter": "EU-RO-1",
                                        "extra": 1}).status_code == 400
    assert post("/v2/network-volumes", {"name": "a", "size": 9,
                                        "dataCenter": "EU-RO-1"}).status_code == 422
    vid = post("/v2/network-volumes", {"name": "a", "size": 50,
                                       "dataCenter": "EU-RO-1"}).json()["id"]
    shrink = httpx.patch(f"{url}/v2/network-volumes/{vid}", json={"size": 40}, headers=headers,
                         timeout=5)
    assert shrink.status_code == 400
    grow = httpx.patch(f"{url}/v2/network-volumes/{vid}", json={"size": 60}, headers=headers,
                       timeout=5)
    assert grow.status_code == 200 and grow.json()["size"] == 60
    base = {"name": "tp-x", "image": "img", "gpu": {"id": "NVIDIA A40", "count": 1}}
    both = {**base, "mounts": {"persistent": {"size": 5, "path": "/w"},
                               "network": [{"volumeId": vid, "path": "/workspace"}]}}
    assert post("/v2/pods", both).status_code == 400
    two = {**base, "mounts": {"network": [{"volumeId": vid, "path": "/a"},
                                          {"volumeId": vid, "path": "/b"}]}}
    assert post("/v2/pods", two).status_code == 422
    community = {**base, "cloud": "COMMUNITY",
                 "mounts": {"network": [{"volumeId": vid, "path": "/workspace"}]}}
    assert post("/v2/pods", community).status_code == 400
    elsewhere = {**base, "dataCenterIds": ["SBX-LOCAL-1"],
                 "mounts": {"network": [{"volumeId": vid, "path": "/workspace"}]}}
    assert post("/v2/pods", elsewhere).status_code == 400
    no_gpu_there = {**base, "gpu": {"id": "NVIDIA H200", "count": 1},
                    "mounts": {"network": [{"volumeId": vid, "path": "/workspace"}]}}
    assert post("/v2/pods", no_gpu_there).status_code == 400
    assert sandbox.billing_now()[0]["name"] == "a" and len(sandbox.billing_now()) == 1
    ok = post("/v2/pods", {**base, "mounts": {"network": [{"volumeId": vid,
                                                          "path": "/workspace"}]}})
    assert ok.status_code == 201 and ok.json()["dataCenterId"] == "EU-RO-1"
    # a mounted volume is not deleted under its pod [unverified at RunPod]
    assert httpx.delete(f"{url}/v2/network-volumes/{vid}", headers=headers,
                        timeout=5).status_code == 400
    billing = httpx.get(url + "/v2/billing/network-volumes", headers=headers, timeout=5).json()
    assert billing["records"][0]["networkVolumeId"] == vid
    assert billing["metadata"]["totals"]["highPerformanceAmount"] == 0.0


@pytest.mark.parametrize("step", ["intent", "creating-not-sent", "creating-sent"])
def test_a_crash_at_any_step_of_create_leaves_nothing_unseen(
        sandbox: Sandbox, tailpod_home: Path, cli_env: dict[str, str], step: str,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A `volume create` killed after writing its record, after marking it creating, or after
    the provider created the volume but before the id was written: `volume ls` (and so status
    and down) finds whatever bills, and settles what never came to exist."""
    ledger = Ledger(tailpod_home)
    with ledger.volume_transaction() as volumes:
        volumes["tp-vol-crash"] = vol.VolumeRecord(
            name="tp-vol-crash", provider="runpod", size_gb=10, data_center="SBX-LOCAL-1",
            status="intent" if step == "intent" else "creating")
    if step == "creating-sent":
        created = httpx.post(sandbox.runpod_url + "/v2/network-volumes", timeout=5,
                             headers={"Authorization": f"Bearer {sandbox.runpod_key}"},
                             json={"name": "tp-vol-crash", "size": 10,
                                   "dataCenter": "SBX-LOCAL-1"})
        assert created.status_code == 201
    runner = CliRunner()
    fresh = json.loads(runner.invoke(app, ["volume", "ls", "--json"]).stdout)
    if step == "creating-sent":
        [row] = fresh["kept_on_purpose"]
        assert row["volume_id"] == created.json()["id"]
        assert Ledger(tailpod_home).volume("tp-vol-crash").status == "kept"  # type: ignore[union-attr]
        return
    # moments after the crash it may still be in flight: shown as possibly billing
    assert [r["state"] for r in fresh["billing_by_mistake"]] == ["creating"]
    monkeypatch.setattr(vol, "CREATE_GRACE_S", 0.0)  # later: settled as never created
    later = json.loads(runner.invoke(app, ["volume", "ls", "--json"]).stdout)
    assert later["kept_on_purpose"] == [] and later["billing_by_mistake"] == []
    assert Ledger(tailpod_home).volume("tp-vol-crash").status == "deleted"  # type: ignore[union-attr]


def test_a_kept_volume_never_reads_as_a_pod_billing_on(
        sandbox: Sandbox, tailpod_home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The account's spend rate includes storage (as the sandbox plays it; unverified at
    RunPod): a 4 TB volume's ~$0.31/h, more than the proof's tolerance for an A40 pod (half its
    rate), must be explained, or every pod's proof would fail."""
    settings = settings_for(sandbox, tailpod_home)
    provider = get_provider("runpod", settings, timings=fast_timings())
    ledger = Ledger(tailpod_home)
    vol.create_volume_safely(provider, ledger, "big", 4096,
                             vol.Placement("SBX-LOCAL-1", None, ["NVIDIA A40"]))
    rate = next(r["rate_per_hr"] for r in sandbox.billing_now() if r["name"] == "tp-vol-big")
    # the documented tiers: $0.07/GB/month for the first TB, $0.05 beyond
    assert rate == pytest.approx((1024 * 0.07 + 3072 * 0.05) / SANDBOX_HOURS_PER_MONTH, abs=1e-5)

    def one_pod() -> bool:
        tag = new_run_tag()
        spec = PodSpec(run_tag=tag, gpu_preference=["NVIDIA A40"], image="img",
                       start_command=["sleep", "30"])
        spec.ttl_at = ttl_deadline(1.0, time.time())
        create_pod_safely(provider, spec, ledger, PodRecord(run_tag=tag, provider="runpod"),
                          policy=fast_policy())
        record = ledger.get(tag)
        assert record is not None
        try:
            return teardown(provider, ledger, record, tailpod_home / "run" / tag,
                            policy=fast_policy()).proven
        except Exception:
            return False

    assert one_pod()
    # the check is not vacuous: with the volumes left unexplained, the same proof fails
    monkeypatch.setattr(type(provider), "volumes_rate_per_hr", lambda self: 0.0)
    assert not one_pod()
