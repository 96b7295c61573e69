"""vast.ai local volumes on the sandbox: ledger first, tied to one machine, attached at rent on
that machine only, kept by `down` and `down --all`, deleted (proven) only by `volume rm`; bad
input refused before anything is created; a crash between the ledger and the create leaves
nothing `volume ls`, `status` and `down --all` cannot see; each undocumented answer played.

Expected prices come from the sandbox's own offer table (tailpod/sandbox/model.py
default_vast_offers: machine 41001 has storage_cost $0.10/GB/month and 400 GB of disk, 41000 is
the cheaper RTX 4090) and vast's 720-hour month (search_volumes.yaml's storage_total_cost
example), never read back from the code under test."""

from __future__ import annotations

import json
import time
from pathlib import Path

import httpx
import pytest
from typer.testing import CliRunner

from tailpod.cli.main import app
from tailpod.config import load_settings, ttl_deadline
from tailpod.engines.base import EngineConfig
from tailpod.errors import ConfigError, ProviderError
from tailpod.ledger import Ledger, PodRecord, new_run_tag
from tailpod.pods.cloud import _mount_volume
from tailpod.provision import volumes as vol
from tailpod.provision.base import PodSpec
from tailpod.provision.create import create_pod_safely, up_remote
from tailpod.provision.providers import get_provider
from tailpod.provision.teardown import teardown
from tailpod.sandbox import Sandbox
from tests.helpers.api_timings import fast_timings
from tests.helpers.container_log import wait_for_log
from tests.helpers.lifecycle_policy import fast_policy
from tests.integration.contracts.contract import Recorder, contract_problems

from .conftest import settings_for, shell_for
from .test_volumes import down_keeps_cache1, rm_proves_cache1_gone

MACHINE = "41001"  # RTX 4090, Sweden, $0.42/h, storage $0.10/GB/month
CHEAPER_4090_MACHINE = 41000  # RTX 4090, $0.35/h: where an unfiltered rent would go
GB_MONTH = 0.10
VAST_MONTH_H = 720.0
ROOM_GB = 400


@pytest.fixture()
def cli_env(sandbox: Sandbox, tailpod_home: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    return shell_for(sandbox, tailpod_home, monkeypatch, "vastai")


def provider_for(sandbox: Sandbox, home: Path):  # type: ignore[no-untyped-def]
    return get_provider("vastai", settings_for(sandbox, home), timings=fast_timings())


def live(sandbox: Sandbox) -> dict[str, int | None]:
    """Live vast volumes at the emulator: label -> machine."""
    return {v.name: v.machine_id for v in sandbox.cloud.volumes.values()
            if v.deleted_at is None and v.provider == "vast"}


def vast_api(sandbox: Sandbox, method: str, path: str, **kw: object) -> httpx.Response:
    return httpx.request(method, sandbox.vast_url + path, timeout=5,
                         headers={"Authorization": f"Bearer {sandbox.vast_key}"},
                         **kw)  # type: ignore[arg-type]


def _spec(gpus: list[str], tag: str = "tp-vast-vol") -> PodSpec:
    return PodSpec(run_tag=tag, gpu_preference=gpus, image="vllm/vllm-openai@sha256:ab",
                   start_command=["sleep", "30"], disk_gb=10)


def test_create_ls_status_up_down_rm_on_vast_through_the_cli(
        sandbox: Sandbox, tailpod_home: Path, cli_env: dict[str, str]) -> None:
    runner = CliRunner()
    made = runner.invoke(app, ["volume", "create", "cache1", "--provider", "vastai",
                               "--size-gb", "50", "--datacenter", MACHINE,
                               "--gpu", "H100 SXM", "--gpu", "RTX 4090"])
    assert made.exit_code == 0, made.output
    assert "machine 41001 has none of H100 SXM" in made.output  # the GPU list shrinks, said
    # vast names take letters, digits and underscores: tp-vol-cache1 goes as tp_vol_cache1
    assert live(sandbox) == {"tp_vol_cache1": int(MACHINE)}
    [row] = [r for r in sandbox.billing_now() if r["name"] == "tp_vol_cache1"]
    assert row["rate_per_hr"] == pytest.approx(50 * GB_MONTH / VAST_MONTH_H, abs=1e-6)
    record = Ledger(tailpod_home).volume("tp-vol-cache1")
    assert record is not None and record.status == "kept" and record.volume_id
    assert record.provider == "vastai" and record.data_center == MACHINE
    assert [e["event"] for e in record.events][:2] == ["intent", "creating"]
    assert record.price_per_month == pytest.approx(50 * GB_MONTH)

    listing = runner.invoke(app, ["volume", "ls", "--json"])
    assert listing.exit_code == 0, listing.output
    [kept] = json.loads(listing.stdout)["kept_on_purpose"]
    assert kept["price_per_month"] == pytest.approx(50 * GB_MONTH)
    assert kept["volume_id"] == record.volume_id and kept["data_center"] == MACHINE
    plain = runner.invoke(app, ["status"])
    assert "kept on purpose: 50 GB at $5.00/month" in plain.output, plain.output

    # `up --volume cache1`: placed on the volume's machine, the list filtered and said
    settings = settings_for(sandbox, tailpod_home, **cli_env)
    ledger = Ledger(settings.state_dir)
    said: list[str] = []
    spec = _spec(["H100 SXM", "RTX 4090"], tag="tp-vast-vol-run-1")
    cfg = EngineConfig(engine="vllm", model=str(tailpod_home), context_length=1024)
    _mount_volume(settings, ledger, cfg, spec, "cache1", said.append)
    assert spec.gpu_preference == ["RTX 4090"] and spec.data_center_ids == [MACHINE]
    assert spec.volume_id == record.volume_id and spec.volume_mount_path == "/data"
    assert any("machine 41001, which has none of H100 SXM" in line for line in said), said
    assert str(spec.env["HF_HOME"]) == "/data/tailpod/hf"
    _rec, info = up_remote(settings, ledger, spec, policy=fast_policy(),
                           timings=fast_timings())
    pod = next(p for p in sandbox.cloud.pods.values() if p.pod_id == info.pod_id)
    # the volume's machine, though machine 41000 rents the same GPU for less
    assert pod.meta["machine_id"] == int(MACHINE) != CHEAPER_4090_MACHINE
    assert pod.meta["volume_id"] == record.volume_id and pod.meta["volume_path"] == "/data"
    vol.note_use(ledger, "tp-vol-cache1", "tp-vast-vol-run-1")

    down = down_keeps_cache1(sandbox, tailpod_home, "tp-vast-vol-run-1",
                             "kept on purpose: 50 GB at $5.00/month", "tp_vol_cache1")

    down_all = runner.invoke(app, ["down", "--all"])
    assert down_all.exit_code == 0, down_all.output
    assert "kept on purpose" in down_all.output and live(sandbox) == {"tp_vol_cache1": 41001}

    gone = rm_proves_cache1_gone(sandbox, tailpod_home, record.volume_id)
    outputs = made.output + listing.output + down.output + gone.output + down_all.output
    assert sandbox.vast_key not in outputs


@pytest.mark.parametrize("args, words", [
    (["--size-gb", "0", "--datacenter", MACHINE], "1-65536 GB"),
    (["--size-gb", str(ROOM_GB + 1), "--datacenter", MACHINE], "has room for 400 GB"),
    (["--size-gb", "50", "--datacenter", MACHINE, "--gpu", "H100 SXM"],
     "machine 41001 has none of the GPUs"),
    (["--size-gb", "50", "--datacenter", "99999"], "unknown machine '99999'"),
    (["--size-gb", "50", "--datacenter", MACHINE, "--type", "HIGH_PERFORMANCE"],
     "one of LOCAL"),
    (["--size-gb", "50"], "name a data center"),
])
def test_bad_input_is_refused_before_anything_is_created(
        sandbox: Sandbox, tailpod_home: Path, cli_env: dict[str, str], args: list[str],
        words: str) -> None:
    result = CliRunner().invoke(app, ["volume", "create", "bad", "--provider", "vastai", *args])
    assert result.exit_code == 2, result.output
    assert words in " ".join(result.output.split()), result.output
    assert live(sandbox) == {} and sandbox.meter()["billing_count"] == 0
    assert Ledger(tailpod_home).volumes() == []


def test_the_machine_is_chosen_from_the_gpu_list(sandbox: Sandbox, tailpod_home: Path) -> None:
    provider = provider_for(sandbox, tailpod_home)
    assert isinstance(provider, vol.SupportsVolumes)
    place = vol.choose_data_center(provider, data_center=None,
                                   gpu_preference=["B200", "L40S"], volume_type=None)
    # L40S is only on machine 41008 (the 9th offer), whose disk is 400 GB at $0.15/GB/month
    assert (place.data_center, place.gpus, place.dropped) == ("41008", ["L40S"], ["B200"])
    assert place.space_gb == ROOM_GB and place.gb_month == pytest.approx(0.15)
    # a machine without room for the size is passed over: the other H100 SXM machine (41007)
    provider.volume_create("tp-vol-fill", ROOM_GB - 10, "41006", None)  # type: ignore[attr-defined]
    place = vol.choose_data_center(provider, data_center=None, gpu_preference=["H100 SXM"],
                                   volume_type=None, size_gb=50)
    assert place.data_center == "41007"


def test_up_volume_on_a_machine_without_the_gpus_rents_nothing(
        sandbox: Sandbox, tailpod_home: Path) -> None:
    provider = provider_for(sandbox, tailpod_home)
    vol.create_volume_safely(provider, Ledger(tailpod_home), "ro", 20,
                             vol.Placement(MACHINE, None, ["RTX 4090"]))
    settings = settings_for(sandbox, tailpod_home, TAILPOD_PROVIDER="vastai")
    with pytest.raises(ConfigError, match="machine 41001, which has none of H100 SXM"):
        _mount_volume(settings, Ledger(tailpod_home), EngineConfig(engine="vllm", model="m"),
                      _spec(["H100 SXM"]), "ro", lambda _line: None)
    assert [r["name"] for r in sandbox.billing_now()] == ["tp_vol_ro"]  # no instance


def test_up_volume_when_its_machine_is_rented_by_someone_else_rents_nothing(
        sandbox: Sandbox, tailpod_home: Path) -> None:
    """The volume cannot follow the pod: its machine's only offer is taken, so `up` refuses."""
    provider = provider_for(sandbox, tailpod_home)
    vol.create_volume_safely(provider, Ledger(tailpod_home), "busy", 20,
                             vol.Placement(MACHINE, None, ["RTX 4090"]))
    taken = next(o for o in sandbox.cloud.vast_offers.values() if o.machine_id == int(MACHINE))
    taken.rented = True
    settings = settings_for(sandbox, tailpod_home, TAILPOD_PROVIDER="vastai")
    with pytest.raises(ConfigError, match="machine 41001, which has none of RTX 4090"):
        _mount_volume(settings, Ledger(tailpod_home), EngineConfig(engine="vllm", model="m"),
                      _spec(["RTX 4090"]), "busy", lambda _line: None)
    assert [r["name"] for r in sandbox.billing_now()] == ["tp_vol_busy"]


def test_a_volume_the_listing_does_not_show_yet_is_kept_from_the_create_answer(
        sandbox: Sandbox, tailpod_home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The create answered `V.<id>` but the listing lags: the ledger keeps it (it bills)."""
    provider = provider_for(sandbox, tailpod_home)
    monkeypatch.setattr(provider, "volume_list", lambda: [])
    record = vol.create_volume_safely(provider, Ledger(tailpod_home), "lagging", 20,
                                      vol.Placement(MACHINE, None, ["RTX 4090"]))
    [volume_id] = [k for k, v in sandbox.cloud.volumes.items() if v.deleted_at is None]
    assert (record.status, record.volume_id) == ("kept", volume_id)
    assert record.price_per_month == pytest.approx(20 * GB_MONTH)


def test_a_create_error_leaves_a_volume_the_ledger_knows(
        sandbox: Sandbox, tailpod_home: Path, cli_env: dict[str, str]) -> None:
    """The emulator creates the volume and answers 500: tailpod looks it up by its name."""
    sandbox.add_fault("error_after_create", provider="vast", op="volume_create", times=1)
    ledger = Ledger(tailpod_home)
    with pytest.raises(ProviderError, match="exists"):
        vol.create_volume_safely(provider_for(sandbox, tailpod_home), ledger, "flaky", 20,
                                 vol.Placement(MACHINE, None, ["RTX 4090"]))
    record = ledger.volume("tp-vol-flaky")
    assert record is not None and record.status == "kept"
    assert list(live(sandbox)) == ["tp_vol_flaky"]  # sent once, never blindly retried
    status = CliRunner().invoke(app, ["status"])
    assert "kept on purpose: 20 GB at $2.00/month" in status.output, status.output


@pytest.mark.parametrize("step", ["intent", "creating-sent", "lost-ledger"])
def test_a_crash_between_intent_and_create_leaves_nothing_unseen(
        sandbox: Sandbox, tailpod_home: Path, cli_env: dict[str, str], step: str,
        monkeypatch: pytest.MonkeyPatch) -> None:
    ledger = Ledger(tailpod_home)
    if step != "lost-ledger":
        with ledger.volume_transaction() as volumes:
            volumes["tp-vol-crash"] = vol.VolumeRecord(
                name="tp-vol-crash", provider="vastai", size_gb=10, data_center=MACHINE,
                status="intent" if step == "intent" else "creating")
    if step != "intent":  # the create reached vast before the process died
        offer = vast_api(sandbox, "POST", "/api/v0/volumes/search/",
                         json={"machine_id": {"eq": int(MACHINE)}}).json()["offers"][0]
        made = vast_api(sandbox, "PUT", "/api/v0/volumes/",
                        json={"id": offer["id"], "size": 10, "name": "tp_vol_crash"})
        assert made.status_code == 200
    runner = CliRunner()
    fresh = json.loads(runner.invoke(app, ["volume", "ls", "--json"]).stdout)
    if step == "creating-sent":
        [row] = fresh["kept_on_purpose"]
        assert row["name"] == "crash" and row["price_per_month"] == pytest.approx(10 * GB_MONTH)
        assert Ledger(tailpod_home).volume("tp-vol-crash").status == "kept"  # type: ignore[union-attr]
        return
    if step == "lost-ledger":  # a tp- volume the ledger never knew: billing by mistake
        [row] = fresh["billing_by_mistake"]
        assert row["state"] == "orphan" and row["name"] == "crash"
        down_all = runner.invoke(app, ["down", "--all"])
        assert down_all.exit_code == 0, down_all.output
        assert "billing by mistake?" in down_all.output and list(live(sandbox)) == ["tp_vol_crash"]
        gone = runner.invoke(app, ["volume", "rm", "crash", "--provider", "vastai"])
        assert gone.exit_code == 0, gone.output
        assert live(sandbox) == {} and sandbox.meter()["billing_count"] == 0
        return
    assert [r["state"] for r in fresh["billing_by_mistake"]] == ["creating"]
    monkeypatch.setattr(vol, "CREATE_GRACE_S", 0.0)
    later = json.loads(runner.invoke(app, ["volume", "ls", "--json"]).stdout)
    assert later["kept_on_purpose"] == [] and later["billing_by_mistake"] == []
    assert Ledger(tailpod_home).volume("tp-vol-crash").status == "deleted"  # type: ignore[union-attr]


@pytest.mark.parametrize("strict", [True, False])
@pytest.mark.parametrize("names_id", [True, False])
def test_each_undocumented_answer_is_played(sandbox: Sandbox, tailpod_home: Path,
                                            strict: bool, names_id: bool) -> None:
    """Whether vast refuses a name with '-' and whether its create answer names the volume
    are not settled by vast's text: tailpod works under each."""
    sandbox.cloud.vast_volume_names_strict = strict
    sandbox.cloud.vast_volume_answer_names_id = names_id
    provider = provider_for(sandbox, tailpod_home)
    ledger = Ledger(tailpod_home)
    record = vol.create_volume_safely(provider, ledger, "either-way", 12,
                                      vol.Placement(MACHINE, None, ["RTX 4090"]))
    [(volume_id, volume)] = [(k, v) for k, v in sandbox.cloud.volumes.items()
                             if v.deleted_at is None]
    assert record.volume_id == volume_id and volume.size_gb == 12
    hyphen = vast_api(sandbox, "PUT", "/api/v0/volumes/",
                      json={"id": 5000000 + int(MACHINE), "size": 1, "name": "tp-vol-x"})
    assert hyphen.status_code == (400 if strict else 200)
    assert vol.delete_volume_proven(provider, ledger, "either-way")["proven"]


def test_the_emulator_keeps_vasts_volume_rules(sandbox: Sandbox, tailpod_home: Path) -> None:
    offer = vast_api(sandbox, "POST", "/api/v0/volumes/search/",
                     json={"machine_id": {"eq": int(MACHINE)}}).json()["offers"]
    assert [(o["machine_id"], o["disk_space"], o["storage_cost"]) for o in offer] == \
        [(int(MACHINE), ROOM_GB, GB_MONTH)]
    too_big = vast_api(sandbox, "PUT", "/api/v0/volumes/",
                       json={"id": offer[0]["id"], "size": ROOM_GB + 1, "name": "a"})
    assert too_big.status_code == 400
    made = vast_api(sandbox, "PUT", "/api/v0/volumes/",
                    json={"id": offer[0]["id"], "size": 100, "name": "a"})
    volume_id = int(made.json()["volume_name"].split(".")[1])
    room = vast_api(sandbox, "POST", "/api/v0/volumes/search/",
                    json={"machine_id": {"eq": int(MACHINE)}}).json()["offers"][0]
    assert room["disk_space"] == ROOM_GB - 100  # the machine's room shrinks by the volume
    rent = {"image": "img", "disk": 10, "label": "tp-x", "runtype": "ssh_direct",
            "volume_info": {"mount_path": "/data", "create_new": False, "volume_id": volume_id}}
    elsewhere = vast_api(sandbox, "PUT", f"/api/v0/asks/{9100001}/", json=rent)  # machine 41000
    assert elsewhere.status_code == 400 and "machine" in elsewhere.json()["msg"]
    here = vast_api(sandbox, "PUT", f"/api/v0/asks/{9100001 + 17}/", json=rent)  # machine 41001
    assert here.status_code == 200
    instance = here.json()["new_contract"]
    shown = vast_api(sandbox, "GET", f"/api/v0/instances/{instance}/").json()["instances"]
    assert shown["volume_info"] == [{"id": volume_id, "mount_path": "/data"}]
    [listed] = vast_api(sandbox, "GET", "/api/v0/volumes/",
                        params={"owner": "me", "type": "local_volume"}).json()["volumes"]
    assert listed["instances"] == [{"id": instance}] and listed["label"] == "a"
    late = vast_api(sandbox, "PUT", f"/api/v0/instances/{instance}/",
                    json={"volume_info": rent["volume_info"]})
    assert late.status_code == 400  # attach only at create
    # not deleted while an instance (running or stopped) uses it
    vast_api(sandbox, "PUT", f"/api/v0/instances/{instance}/", json={"state": "stopped"})
    assert vast_api(sandbox, "DELETE", "/api/v0/volumes/",
                    params={"id": volume_id}).status_code == 400
    assert vast_api(sandbox, "DELETE", f"/api/v0/instances/{instance}/").status_code == 200
    # the id in the body (the OpenAPI) as well as in the query (the CLI)
    assert vast_api(sandbox, "DELETE", "/api/v0/volumes/",
                    json={"id": volume_id}).status_code == 200
    again = vast_api(sandbox, "DELETE", "/api/v0/volumes/", params={"id": volume_id})
    assert again.status_code == 404 and again.json()["error"] == "no_such_volume"
    assert sandbox.meter()["billing_count"] == 0


def test_a_second_instance_on_the_machine_finds_what_the_first_wrote(
        sandbox: Sandbox, tailpod_home: Path) -> None:
    provider = provider_for(sandbox, tailpod_home)
    ledger = Ledger(tailpod_home)
    record = vol.create_volume_safely(provider, ledger, "shared", 10,
                                      vol.Placement(MACHINE, None, ["RTX 4090"]))
    logs = []
    for i, script in enumerate(['mkdir -p "$HF_HOME" && echo weights-v1 > "$HF_HOME/marker"; '
                                'echo wrote; sleep 30',
                                'cat "$HF_HOME/marker"; cat data/hf/marker; sleep 30']):
        tag = new_run_tag()
        spec = PodSpec(run_tag=tag, gpu_preference=["RTX 4090"], image="img", disk_gb=10,
                       start_command=["sh", "-c", script], env={"HF_HOME": "/data/hf"},
                       volume_id=record.volume_id, volume_mount_path="/data",
                       data_center_ids=[MACHINE])
        spec.ttl_at = ttl_deadline(1.0, time.time())
        info = create_pod_safely(provider, spec, ledger, PodRecord(run_tag=tag,
                                                                   provider="vastai"),
                                 policy=fast_policy())
        assert info.detail["machine_id"] == int(MACHINE)
        pod = next(p for p in sandbox.cloud.pods.values() if p.pod_id == info.pod_id)
        log = sandbox.cloud.host.container_log(pod)  # type: ignore[attr-defined]
        logs.append(wait_for_log(log, "wrote") if i == 0 else wait_for_log(log, "weights-v1", times=2))
        pod_record = ledger.get(tag)
        assert pod_record is not None
        assert teardown(provider, ledger, pod_record, tailpod_home / "run" / tag,
                        policy=fast_policy()).proven
    assert logs[1].count("weights-v1") == 2, logs  # via the env path and via the mount path
    assert list(live(sandbox)) == ["tp_vol_shared"]  # instance teardown never deletes it


def test_volume_traffic_matches_the_published_contracts(sandbox: Sandbox, tmp_path: Path) -> None:
    """Every volume request and answer against the schemas derived from vast-ai/docs
    api-reference/openapi.yaml @ c624622 (tests/integration/contracts/vast/*volume*.json)."""
    recorder = Recorder()
    home = tmp_path / "home"
    settings = load_settings(env={**sandbox.env(), "TAILPOD_HOME": str(home)},
                             dotenv_path=tmp_path / "absent.env")
    provider = get_provider("vastai", settings, timings=fast_timings(), transport=recorder)
    ledger = Ledger(home)
    place = vol.choose_data_center(provider, data_center=MACHINE,  # type: ignore[arg-type]
                                   gpu_preference=["RTX 4090"], volume_type=None)
    record = vol.create_volume_safely(provider, ledger, "contract", 10, place)
    tag = new_run_tag()
    spec = PodSpec(run_tag=tag, gpu_preference=place.gpus, image="img", disk_gb=10,
                   start_command=["sleep", "30"], volume_id=record.volume_id,
                   volume_mount_path="/data", data_center_ids=[place.data_center])
    spec.ttl_at = ttl_deadline(1.0, time.time())
    create_pod_safely(provider, spec, ledger, PodRecord(run_tag=tag, provider="vastai"),
                      policy=fast_policy())
    pod = ledger.get(tag)
    assert pod is not None
    assert teardown(provider, ledger, pod, tmp_path / "run", policy=fast_policy()).proven
    vol.delete_volume_proven(provider, ledger, "contract")
    provider.volume_delete(str(record.volume_id))  # already gone: 404, success

    problems, seen = contract_problems("vast", recorder.exchanges)
    assert not problems, "\n".join(problems)
    assert {"search_volumes", "rent_volume", "list_volumes", "delete_volume",
            "create_instance", "search_offers"} <= seen
