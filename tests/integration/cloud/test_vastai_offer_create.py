"""vast.ai's offer search and rent (provision/vastai/provider.py), against a mock API the test
scripts answer by answer: the search query and every rent body are captured and checked key by
key, the offers are planted, and each expected choice (which GPU, which offer, what was destroyed,
what the error says) is worked out by hand from them. Written to kill the mutants of the offer
and create paths (docs/testing.md, "provision/vastai/provider.py: offers and create").

Field names are vast's own, as the sandbox's emulator (tailpod/sandbox/vast_api.py) and
docs/providers.md cite them: `POST /api/v0/bundles/` answers `{"offers": [...]}` with `id`,
`machine_id`, `gpu_name`, `gpu_ram` (MB), `dph_total`, `dph_base`, `reliability`; `PUT
/api/v0/asks/{id}/` answers `{"success": true, "new_contract": N}` or `{"success": false,
"error": code, "msg": text}` (404/410 `no_such_ask`)."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import httpx
import pytest

from tailpod.config import load_settings
from tailpod.errors import AuthError, CapacityError, ConfigError, ProviderError
from tailpod.provision.apiclient import ApiError, ApiTimings
from tailpod.provision.base import AccountFacts, Offer, PodSpec, PodState
from tailpod.provision.vastai import provider as vast_module
from tailpod.provision.vastai.limits import WindowPacer
from tailpod.provision.vastai.provider import VastProvider, normalise_gpu_name
from tailpod.secrets import Secret

KEY = "vast_OFFERcreateKEY_0123456789ab"
TAG = "tp-20260101-000000-eeeeee"
IMAGE = "vllm/vllm-openai@sha256:" + "ab" * 32
TIMINGS = ApiTimings(request_timeout_s=5.0, attempts=1, backoff_s=0.0, backoff_max_s=0.0,
                     max_retry_after_s=0.0, create_attempts=3, readback_attempts=2,
                     readback_interval_s=0.0, max_offers_per_gpu=3)
# The search query every create and offers() sends, less what the call adds (hand-written from
# docs/providers.md's "vast.ai" section: verified, rentable, unrented, cheapest first).
BASE_QUERY: dict[str, Any] = {
    "verified": {"eq": True},
    "external": {"eq": False},
    "rentable": {"eq": True},
    "rented": {"eq": False},
    "reliability": {"gte": 0.95},
    "inet_down": {"gte": 100.0},
    "order": [["dph_total", "asc"]],
    "type": "on-demand",
    "limit": 64,
}


def offer(offer_id: int, gpu: str, dph: Any, machine: int | None = None, **extra: Any
          ) -> dict[str, Any]:
    return {"id": offer_id, "machine_id": offer_id + 1000 if machine is None else machine,
            "gpu_name": gpu, "num_gpus": 1, "dph_total": dph, "reliability": 0.99, **extra}


def instance(pod_id: int, gpu: str, dph: float, label: str = TAG,
             status: str = "running") -> dict[str, Any]:
    return {"id": pod_id, "label": label, "actual_status": status, "gpu_name": gpu,
            "num_gpus": 1, "dph_total": dph, "machine_id": 7}


def answer(status: int, body: Any = None) -> httpx.Response:
    return httpx.Response(status, json=body) if body is not None else httpx.Response(status)


def created(pod_id: int) -> httpx.Response:
    return answer(200, {"success": True, "new_contract": pod_id})


@dataclass
class FakeVast:
    offers: Any = field(default_factory=list)  # the `offers` of every search answer
    search_answer: httpx.Response | None = None  # instead of `{"offers": offers}`
    rents: dict[str, list[Any]] = field(default_factory=dict)  # offer id -> answers, in turn
    listing: list[dict[str, Any]] = field(default_factory=list)  # GET /api/v1/instances/
    instances: dict[str, dict[str, Any]] = field(default_factory=dict)  # GET /api/v0/instances/N/
    log_answer: httpx.Response | None = None
    events: list[tuple[str, Any]] = field(default_factory=list)
    queries: list[Any] = field(default_factory=list)
    rented: list[tuple[str, Any]] = field(default_factory=list)
    seen: list[httpx.Request] = field(default_factory=list)

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.seen.append(request)
        path, method = request.url.path, request.method
        body = json.loads(request.content) if request.content else None
        if method == "POST" and path == "/api/v0/bundles/":
            self.queries.append(body)
            return self.search_answer or answer(200, {"offers": self.offers})
        if method == "PUT" and path.startswith("/api/v0/asks/"):
            offer_id = path.split("/")[4]
            self.rented.append((offer_id, body))
            self.events.append(("rent", offer_id))
            script = self.rents.get(offer_id)
            got = script.pop(0) if script else created(int(offer_id) + 9000)
            if isinstance(got, Exception):
                raise got
            return got
        if method == "GET" and path == "/api/v1/instances/":
            self.events.append(("list", None))
            return answer(200, {"instances": self.listing})
        if method == "GET" and path.startswith("/api/v0/instances/"):
            return answer(200, {"instances": self.instances.get(path.split("/")[4])})
        if method == "DELETE" and path.startswith("/api/v0/instances/"):
            self.events.append(("destroy", path.split("/")[4]))
            return answer(200, {"success": True})
        if method == "PUT" and path.startswith("/api/v0/instances/request_logs/"):
            self.events.append(("log", body))
            return self.log_answer or answer(404)
        if method == "GET" and path == "/api/v0/users/current/":
            return answer(200, {"credit": 12.5, "balance": -3.0})
        return answer(405)


@pytest.fixture(autouse=True)
def no_avoided_machines(monkeypatch: pytest.MonkeyPatch) -> set[str]:
    """The avoided machines are process-wide: each test starts with none."""
    fresh: set[str] = set()
    monkeypatch.setattr(vast_module, "AVOIDED_MACHINES", fresh)
    return fresh


def provider(fake: FakeVast, tmp_path: Path, *, timings: ApiTimings = TIMINGS,
             url: str = "http://vast.invalid", **kwargs: Any) -> VastProvider:
    settings = load_settings(env={"VAST_API_KEY": KEY, "TAILPOD_HOME": str(tmp_path),
                                  "TAILPOD_VAST_URL": url},
                             dotenv_path=tmp_path / "absent.env")
    vp = VastProvider(settings, timings=timings, transport=httpx.MockTransport(fake),
                      sleep=lambda s: None, **kwargs)
    vp.on_created = lambda pod_id: fake.events.append(("recorded", pod_id))
    return vp


def spec(*gpus: str, **overrides: Any) -> PodSpec:
    values: dict[str, Any] = {"run_tag": TAG, "gpu_preference": list(gpus), "image": IMAGE,
                              "start_command": ["python3", "-m", "serve", "--model", "a b"],
                              "disk_gb": 40}
    values.update(overrides)
    return PodSpec(**values)


def rented_ids(fake: FakeVast) -> list[str]:
    return [offer_id for offer_id, _ in fake.rented]


# -- names ------------------------------------------------------------------------------------------

@pytest.mark.parametrize(("raw", "want"), [
    ("RTX_4090", "RTX 4090"), ("H100__SXM", "H100 SXM"), ("  A100\tSXM4 ", "A100 SXM4"),
    ("H200", "H200"), ("_L40S_", "L40S"),
])
def test_gpu_names_take_vasts_spelling(raw: str, want: str) -> None:
    assert normalise_gpu_name(raw) == want


# -- the search --------------------------------------------------------------------------------------

def test_the_search_asks_for_verified_reliable_unrented_offers_cheapest_first(
        tmp_path: Path) -> None:
    fake = FakeVast(offers=[offer(1, "H100 SXM", 2.0)])
    got = provider(fake, tmp_path).search(["H100 SXM", "H200"], 2, 40)
    assert got == [offer(1, "H100 SXM", 2.0)]
    assert fake.queries == [{**BASE_QUERY, "disk_space": {"gte": 40}, "allocated_storage": 40,
                             "num_gpus": {"eq": 2}, "gpu_name": {"in": ["H100 SXM", "H200"]}}]
    assert fake.seen[0].headers["Authorization"] == f"Bearer {KEY}"


def test_the_search_carries_the_providers_own_floors(tmp_path: Path) -> None:
    fake = FakeVast()
    provider(fake, tmp_path, min_reliability=0.9, min_inet_down_mbps=500.0).search(
        ["RTX 4090"], 1, 8)
    assert fake.queries[0]["reliability"] == {"gte": 0.9}
    assert fake.queries[0]["inet_down"] == {"gte": 500.0}


@pytest.mark.parametrize(("own", "image", "want"), [
    (None, None, None), (None, "12.8", 12.8), (12.4, None, 12.4), (12.4, "12.8", 12.8),
    (12.9, "12.8", 12.9), (0.0, None, 0.0),
])
def test_the_cuda_floor_is_the_higher_of_the_providers_and_the_images(
        tmp_path: Path, own: float | None, image: str | None, want: float | None) -> None:
    fake = FakeVast()
    provider(fake, tmp_path, min_cuda=own).search(["H200"], 1, 8, image)
    assert fake.queries[0].get("cuda_max_good") == (None if want is None else {"gte": want})
    assert ("cuda_max_good" in fake.queries[0]) is (want is not None)


def test_search_all_asks_for_every_gpu_and_count_at_the_minimum_disk(tmp_path: Path) -> None:
    fake = FakeVast(offers=[offer(1, "RTX 4090", 0.3), offer(2, "H200", 3.0)])
    assert [o["id"] for o in provider(fake, tmp_path).search_all()] == [1, 2]
    assert fake.queries == [{**BASE_QUERY, "disk_space": {"gte": 8}, "allocated_storage": 8}]


def test_the_search_keeps_only_offers_it_can_rent(tmp_path: Path,
                                                 no_avoided_machines: set[str]) -> None:
    fake = FakeVast(offers=[offer(1, "H200", 3.0, machine=41), "junk",
                            {"machine_id": 42, "gpu_name": "H200"},  # no id: cannot be rented
                            offer(3, "H200", 3.1, machine=43), offer(4, "H200", 3.2, machine=44)])
    vp = provider(fake, tmp_path)
    vp.avoid_machine(None)  # an instance whose machine is not known avoids nothing
    assert no_avoided_machines == set()
    vp.avoid_machine(43)
    assert no_avoided_machines == {"43"}
    assert [o["id"] for o in vp.search(["H200"], 1, 8)] == [1, 4]


def test_a_volumes_machine_searches_its_own_offers_only(tmp_path: Path) -> None:
    fake = FakeVast(offers=[offer(1, "H200", 3.0, machine=41), offer(2, "H200", 3.1, machine=42),
                            offer(3, "H200", 3.2, machine=43)])
    got = provider(fake, tmp_path).search(["H200"], 1, 8, machine_ids=["42", "43"])
    assert [o["id"] for o in got] == [2, 3]
    assert fake.queries[0]["machine_id"] == {"in": [42, 43]}


@pytest.mark.parametrize("body", [{"bundles": []}, {"offers": {"1": {}}}, ["x"]])
def test_a_search_answer_without_an_offers_list_is_refused(tmp_path: Path, body: Any) -> None:
    fake = FakeVast(search_answer=answer(200, body))
    with pytest.raises(ProviderError) as caught:
        provider(fake, tmp_path).search(["H200"], 1, 8)
    assert caught.value.message == "vast.ai: the offer search answer has no `offers` list"


def test_a_failed_search_names_the_call(tmp_path: Path) -> None:
    fake = FakeVast(search_answer=answer(500, {"msg": "down"}))
    with pytest.raises(ProviderError) as caught:
        provider(fake, tmp_path).search(["H200"], 1, 8)
    assert str(caught.value) == "vast.ai: searching offers failed (HTTP 500: down)"


def test_searches_to_vast_itself_are_paced_and_others_only_when_asked(
        tmp_path: Path) -> None:
    assert provider(FakeVast(), tmp_path).search_pacer is None
    vendor = provider(FakeVast(), tmp_path, url="https://console.vast.ai/")
    assert vendor.search_pacer is vast_module.SEARCH_PACER
    waits: list[float] = []
    now = [0.0]
    pacer = WindowPacer(1, 60.0, clock=lambda: now[0], sleep=waits.append)
    fake = FakeVast()
    vp = provider(fake, tmp_path, search_pacer=pacer)
    assert vp.search_pacer is pacer
    vp.search(["H200"], 1, 8)
    now[0] = 20.0
    vp.search(["H200"], 1, 8)  # one a minute: the second waits the 40 s left
    assert waits == [40.0] and len(fake.queries) == 2


# -- offers() -----------------------------------------------------------------------------------------

def test_offers_names_the_cheapest_of_each_gpu_and_flags_it_against_the_cap(
        tmp_path: Path) -> None:
    fake = FakeVast(offers=[
        offer(1, "H100 SXM", 2.5, gpu_ram=81559, reliability=0.97),
        offer(2, "h100 sxm", 2.25, gpu_ram=81559, reliability=0.96),  # vast's case may differ
        offer(3, "RTX 4090", 0.4, gpu_ram=24564),
        offer(4, "RTX 4090", "0.1"),  # a price that is not a number is never the cheapest
        {"id": 5, "machine_id": 1005, "gpu_name": "A100 SXM4", "dph_base": 1.23456789,
         "reliability": 0.99},  # no total: the base price
        offer(6, "A100 SXM4", None, dph_base=0.1),  # a total of null is no price, not the base
        offer(7, "L40S", 0.9),  # not asked for
    ])
    got = provider(fake, tmp_path).offers(["H100_SXM", " ", "RTX 4090", "A100 SXM4", "H200"],
                                          1, 1.2)
    assert got == [
        Offer("vastai", "H100 SXM", 1, 2.25, True, offer_id="2", gpu_memory_gb=79.6,
              detail={"offers": 2, "reliability": 0.96, "above_cap": True}),
        Offer("vastai", "RTX 4090", 1, 0.4, True, offer_id="3", gpu_memory_gb=24.0,
              detail={"offers": 2, "reliability": 0.99, "above_cap": False}),
        Offer("vastai", "A100 SXM4", 1, 1.2346, True, offer_id="5", gpu_memory_gb=None,
              detail={"offers": 2, "reliability": 0.99, "above_cap": True}),
        Offer("vastai", "H200", 1, None, False, detail={"error": "no matching offer"}),
    ]
    # searched (so priced: dph_total holds the storage) with the disk `up` rents,
    # TAILPOD_DISK_GB's default of 80 GB
    assert fake.queries == [{**BASE_QUERY, "disk_space": {"gte": 80}, "allocated_storage": 80,
                             "num_gpus": {"eq": 1},
                             "gpu_name": {"in": ["H100 SXM", "RTX 4090", "A100 SXM4", "H200"]}}]


def test_offers_are_searched_with_the_disk_the_run_rents(tmp_path: Path) -> None:
    fake = FakeVast(offers=[offer(3, "RTX 4090", 0.4, gpu_ram=24564)])
    settings = load_settings(env={"VAST_API_KEY": KEY, "TAILPOD_HOME": str(tmp_path),
                                  "TAILPOD_VAST_URL": "http://vast.invalid",
                                  "TAILPOD_DISK_GB": "250"}, dotenv_path=tmp_path / "absent.env")
    vp = VastProvider(settings, timings=TIMINGS, transport=httpx.MockTransport(fake),
                      sleep=lambda s: None)
    vp.offers(["RTX 4090"], 1, None)
    assert fake.queries[0]["disk_space"] == {"gte": 250}
    assert fake.queries[0]["allocated_storage"] == 250


def test_a_gpu_with_no_offer_does_not_hide_the_next_ones(tmp_path: Path) -> None:
    fake = FakeVast(offers=[offer(1, "H200", 3.4, gpu_ram=143771)])
    got = provider(fake, tmp_path).offers(["B200", "H200"], 8, None)
    assert got == [
        Offer("vastai", "B200", 8, None, False, detail={"error": "no matching offer"}),
        Offer("vastai", "H200", 8, 3.4, True, offer_id="1", gpu_memory_gb=140.4,  # MB / 1024
              detail={"offers": 1, "reliability": 0.99, "above_cap": False}),
    ]


def test_an_offer_at_the_cap_is_not_above_it_and_no_cap_flags_nothing(tmp_path: Path) -> None:
    fake = FakeVast(offers=[offer(1, "RTX 4090", 0.5), offer(2, "H200", 3.0),
                            offer(3, "L4", "n/a")])
    at_cap = provider(fake, tmp_path).offers(["RTX 4090"], 2, 0.5)
    assert at_cap[0].detail["above_cap"] is False and at_cap[0].gpu_count == 2
    uncapped = provider(fake, tmp_path).offers(["H200", "L4"], 1, None)
    assert [o.detail["above_cap"] for o in uncapped] == [False, False]
    assert uncapped[1].price_per_hr == float("inf")


# -- the rent body -----------------------------------------------------------------------------------

def test_the_rent_body_pins_the_image_env_ports_start_command_and_disk(tmp_path: Path) -> None:
    fake = FakeVast(offers=[offer(1, "H200", 3.0)], instances={"9001": instance(9001, "H200", 3.0)})
    s = spec("H200", env={"HF_TOKEN": Secret("hf_offerCREATEsecret0123"), "MODE": "bench"},
             ports=[8000, 22, 9090, 8000], ssh_public_key="ssh-ed25519 AAAAC3Nz tailpod")
    provider(fake, tmp_path).create(s)
    assert fake.rented == [("1", {
        "client_id": "me",
        "image": IMAGE,
        "disk": 40,
        "label": TAG,
        "env": {"HF_TOKEN": "hf_offerCREATEsecret0123", "MODE": "bench",
                "PUBLIC_KEY": "ssh-ed25519 AAAAC3Nz tailpod", "-p 8000:8000": "1",
                "-p 9090:9090": "1"},
        "runtype": "ssh_direct",
        "cancel_unavail": True,
        "onstart": "python3 -m serve --model 'a b'",
    })]


def test_a_public_key_already_in_the_env_is_kept_and_no_command_sends_no_onstart(
        tmp_path: Path) -> None:
    vp = provider(FakeVast(), tmp_path)
    body = vp._rent_body(spec("H200", env={"PUBLIC_KEY": "ssh-ed25519 mine"}, start_command=[],
                              ports=[22], ssh_public_key="ssh-ed25519 other"))
    assert body["env"] == {"PUBLIC_KEY": "ssh-ed25519 mine"}
    assert "onstart" not in body and "volume_info" not in body
    assert "PUBLIC_KEY" not in vp._rent_body(spec("H200", ports=[]))["env"]


def test_a_volume_is_attached_at_rent_at_its_mount_path(tmp_path: Path) -> None:
    vp = provider(FakeVast(), tmp_path)
    assert vp._rent_body(spec("H200", volume_id="321", volume_mount_path="/models")
                         )["volume_info"] == {"mount_path": "/models", "create_new": False,
                                              "volume_id": 321}
    assert vp._rent_body(spec("H200", volume_id="322"))["volume_info"] == {
        "mount_path": "/data", "create_new": False, "volume_id": 322}


# -- choosing what to rent --------------------------------------------------------------------------

def test_no_offer_of_the_first_gpu_falls_back_to_the_cheapest_acceptable_next(
        tmp_path: Path) -> None:
    # preference [H200, H100]: no H200 offer; H100s at 2.9 (above the 2.5 cap), 2.4 and 2.1:
    # the 2.1 one is rented, and the pod says why it is not an H200
    fake = FakeVast(offers=[offer(1, "H100 SXM", 2.9), offer(2, "H100 SXM", 2.4),
                            offer(3, "H100 SXM", 2.1), offer(4, "RTX 4090", 0.3)],
                    instances={"9003": instance(9003, "H100 SXM", 2.1)})
    info = provider(fake, tmp_path).create(spec("H200", "H100_SXM", "h200", max_price=2.5))
    assert rented_ids(fake) == ["3"]
    assert fake.queries == [{**BASE_QUERY, "disk_space": {"gte": 40}, "allocated_storage": 40,
                             "num_gpus": {"eq": 1}, "gpu_name": {"in": ["H200", "H100 SXM"]}}]
    assert (info.pod_id, info.gpu_type, info.price_per_hr) == ("9003", "H100 SXM", 2.1)
    assert info.detail["requested"] == "H200"
    assert info.detail["fallback_from"] == "H200"
    assert info.detail["fallback_reasons"] == ["H200: no matching offer"]
    assert fake.events == [("rent", "3"), ("recorded", "9003")]


def test_the_first_gpu_is_rented_when_it_has_an_affordable_offer(tmp_path: Path) -> None:
    fake = FakeVast(offers=[offer(1, "RTX 4090", 0.2), offer(2, "H200", 3.5),
                            offer(3, "H200", 3.0)],
                    instances={"9003": instance(9003, "h200", 3.0)})
    info = provider(fake, tmp_path).create(spec("H200", "RTX 4090", gpu_count=2, max_price=3.0,
                                                min_cuda="12.8", disk_gb=8))
    assert rented_ids(fake) == ["3"]  # at the cap exactly: rented
    assert fake.queries[0]["num_gpus"] == {"eq": 2}
    assert fake.queries[0]["cuda_max_good"] == {"gte": 12.8}
    assert fake.queries[0]["disk_space"] == {"gte": 8}
    assert info.detail["requested"] == "H200"
    assert "fallback_from" not in info.detail and "fallback_reasons" not in info.detail


def test_a_gpu_whose_offers_are_all_above_the_cap_is_passed_over(tmp_path: Path) -> None:
    fake = FakeVast(offers=[offer(1, "H200", 3.01), offer(2, "RTX 4090", 0.6),
                            offer(3, "RTX 4090", 0.2)],
                    instances={"9003": instance(9003, "RTX 4090", 0.2)})
    info = provider(fake, tmp_path).create(spec("H200", "L40S", "RTX 4090", max_price=3.0))
    assert rented_ids(fake) == ["3"]
    assert info.detail["fallback_reasons"] == ["L40S: no matching offer",
                                               "H200: every offer is above the cap"]


def test_no_cap_rents_the_cheapest_offer_whatever_it_costs(tmp_path: Path) -> None:
    fake = FakeVast(offers=[offer(1, "H200", 40.0), offer(2, "H200", 30.0)],
                    instances={"9002": instance(9002, "H200", 30.0)})
    assert provider(fake, tmp_path).create(spec("H200")).pod_id == "9002"
    assert rented_ids(fake) == ["2"]


def test_every_offer_above_the_cap_rents_nothing_and_names_the_cheapest(
        tmp_path: Path) -> None:
    fake = FakeVast(offers=[offer(1, "H200", 3.5), offer(2, "H100 SXM", 2.75),
                            offer(3, "H100 SXM", 2.6)])
    with pytest.raises(CapacityError) as caught:
        provider(fake, tmp_path).create(spec("H200", "H100 SXM", max_price=2.5))
    assert caught.value.message == (
        "the price cap $2.50/h is below every matching vast.ai offer; nothing was created "
        "(cheapest: H100 SXM at $2.60/h)")
    assert caught.value.hint == "raise --max-price or add cheaper GPU types"
    assert fake.rented == []


def test_no_matching_offer_rents_nothing_and_says_what_was_asked(tmp_path: Path) -> None:
    fake = FakeVast(offers=[offer(1, "L40S", 0.5)])
    with pytest.raises(CapacityError) as caught:
        provider(fake, tmp_path).create(spec("H200", "H100 SXM", gpu_count=2))
    # every host filter is named (issue 37 item 3: not only reliability and disk), and the hint
    # no longer suggests other spellings of a name that may be right
    assert caught.value.message == (
        "no vast.ai offer matches 'H200', 'H100 SXM' with 2 GPU(s), reliability >= 0.95, "
        "disk >= 40 GB, download >= 100 Mbps; nothing was created")
    assert caught.value.hint == ("`tailpod gpus --provider vastai` lists what is rentable now; "
                                 "loosen --min-reliability, --min-cuda or --disk-gb to see more")
    with pytest.raises(CapacityError) as caught:
        provider(FakeVast(), tmp_path).create(spec("H200", data_center_ids=["42", "43"]))
    assert caught.value.message.startswith("no vast.ai offer on machine 42, 43 matches 'H200'")
    assert fake.rented == []


def test_a_volumes_machine_is_the_only_place_the_pod_is_rented(tmp_path: Path) -> None:
    fake = FakeVast(offers=[offer(1, "H200", 2.0, machine=41), offer(2, "H200", 3.0, machine=42)],
                    instances={"9002": instance(9002, "H200", 3.0)})
    provider(fake, tmp_path).create(spec("H200", data_center_ids=[42], volume_id="5"))
    assert rented_ids(fake) == ["2"]
    assert fake.queries[0]["machine_id"] == {"in": [42]}


def test_a_machine_that_failed_is_avoided_on_the_retry(tmp_path: Path) -> None:
    fake = FakeVast(offers=[offer(1, "H200", 2.0, machine=41), offer(2, "H200", 2.5, machine=42)],
                    instances={"9002": instance(9002, "H200", 2.5)})
    vp = provider(fake, tmp_path)
    vp.avoid_machine(41)  # what `up` does when machine 41 left an instance `offline`
    assert vp.create(spec("H200")).pod_id == "9002"
    assert rented_ids(fake) == ["2"]


# -- refusals before anything is sent ---------------------------------------------------------------

@pytest.mark.parametrize(("gpus", "count", "message"), [
    ([], 1, "the GPU preference list is empty; nothing was created"),
    (["", "  "], 1, "the GPU preference list is empty; nothing was created"),
    (["H200"], 0, "gpu_count must be at least 1"),
])
def test_an_empty_preference_or_no_gpus_is_refused_before_any_call(
        tmp_path: Path, gpus: list[str], count: int, message: str) -> None:
    fake = FakeVast(offers=[offer(1, "H200", 1.0)])
    with pytest.raises(ConfigError) as caught:
        provider(fake, tmp_path).create(spec(*gpus, gpu_count=count))
    assert caught.value.message == message
    if not gpus or not "".join(gpus).strip():
        assert caught.value.hint == "name at least one GPU, e.g. --gpu 'RTX 4090'"
    assert fake.seen == []


def test_a_request_over_vasts_limits_is_refused_before_any_call(tmp_path: Path) -> None:
    fake = FakeVast(offers=[offer(1, "H200", 1.0)])
    with pytest.raises(ConfigError) as caught:
        provider(fake, tmp_path).create(spec("H200", disk_gb=7, start_command=["x" * 4097],
                                             run_tag="t" * 257))
    assert caught.value.message == (
        "the vast.ai rent request breaks a vendor limit; nothing was created: "
        "onstart is 4097 characters; vast.ai accepts at most 4048; "
        "args, args_str and onstart are 4097 characters together; vast.ai accepts at most 4096; "
        "the label is 257 characters; vast.ai accepts at most 256; "
        "the disk is 7 GB; vast.ai needs at least 8 GB")
    assert caught.value.hint == ("shorten the start command or the environment "
                                 "(tailpod/provision/vastai/limits.py lists the limits)")
    with pytest.raises(ConfigError) as caught:
        provider(fake, tmp_path).create(spec("H200", image="i" * 1025,
                                             env={"K": "v" * 255}))
    assert caught.value.message.endswith(
        "created: the image name is 1025 characters; vast.ai accepts at most 1024; "
        "environment variable K is 257 characters as KEY=value; vast.ai accepts at most 256 "
        "per entry")
    assert fake.seen == []


def test_the_gpus_are_deduplicated_whatever_their_spelling(tmp_path: Path) -> None:
    fake = FakeVast(offers=[offer(1, "H200", 3.0)], instances={"9001": instance(9001, "H200", 3)})
    provider(fake, tmp_path).create(spec("H200", "h200", "RTX_4090", "RTX 4090", " "))
    assert fake.queries[0]["gpu_name"] == {"in": ["H200", "RTX 4090"]}


# -- when a rent fails ------------------------------------------------------------------------------

def test_an_offer_gone_moves_on_to_the_next_and_then_the_next_gpu(tmp_path: Path) -> None:
    gone = {"success": False, "error": "no_such_ask", "msg": "no longer available"}
    fake = FakeVast(offers=[offer(1, "H200", 3.0), offer(2, "H200", 3.1), offer(3, "H200", 3.2),
                            offer(4, "H200", 3.3), offer(5, "RTX 4090", 0.4)],
                    rents={"1": [answer(404, gone)], "2": [answer(410, gone)],
                           "3": [answer(410, gone)]},
                    instances={"9005": instance(9005, "RTX 4090", 0.4)})
    info = provider(fake, tmp_path).create(spec("H200", "RTX 4090"))
    # three offers a GPU type (TIMINGS.max_offers_per_gpu): the fourth H200 is never tried
    assert rented_ids(fake) == ["1", "2", "3", "5"]
    assert info.detail["fallback_reasons"] == [
        "offer 1 (H200): no longer available (no_such_ask: no longer available)",
        "offer 2 (H200): no longer available (no_such_ask: no longer available)",
        "offer 3 (H200): no longer available (no_such_ask: no longer available)"]
    bodies = [body for _, body in fake.rented]
    assert bodies[0] == bodies[3]  # the same request to every offer


@pytest.mark.parametrize(("per_gpu", "tried"), [(0, ["1"]), (1, ["1"]), (2, ["1", "2"])])
def test_at_least_one_offer_a_gpu_is_tried(tmp_path: Path, per_gpu: int,
                                           tried: list[str]) -> None:
    gone = {"success": False, "error": "no_such_ask", "msg": "gone"}
    fake = FakeVast(offers=[offer(1, "H200", 3.0), offer(2, "H200", 3.1), offer(3, "H200", 3.2)],
                    rents={str(i): [answer(404, gone)] for i in (1, 2, 3)})
    timings = replace(TIMINGS, max_offers_per_gpu=per_gpu)
    with pytest.raises(CapacityError) as caught:
        provider(fake, tmp_path, timings=timings).create(spec("H200"))
    assert rented_ids(fake) == tried
    assert caught.value.message == "vast.ai could not rent any offer: " + "; ".join(
        f"offer {i} (H200): no longer available (no_such_ask: gone)" for i in tried)
    assert caught.value.hint == "add GPU types, raise the price cap, or retry later"


def test_a_rent_that_errors_is_looked_up_and_the_instance_found_is_returned(
        tmp_path: Path) -> None:
    # a 500 may mean the instance exists: before trying again, the listing by tag is read,
    # and the instance it shows is the one rented (never a second rent)
    fake = FakeVast(offers=[offer(1, "H200", 3.0)],
                    rents={"1": [answer(500, {"success": False, "error": "server_error",
                                              "msg": "Internal server error"})]},
                    listing=[instance(9100, "H200", 3.0, label="tp-20260101-000000-ffffff"),
                             instance(9101, "H200", 3.0)],
                    instances={"9101": instance(9101, "H200", 3.0)})
    info = provider(fake, tmp_path).create(spec("H200"))
    assert info.pod_id == "9101"
    assert fake.events == [("rent", "1"), ("list", None), ("recorded", "9101")]


def test_a_rent_that_times_out_is_looked_up_before_it_is_sent_again(tmp_path: Path) -> None:
    fake = FakeVast(offers=[offer(1, "H200", 3.0)],
                    rents={"1": [httpx.ReadTimeout("slow"), created(9200)]},
                    instances={"9200": instance(9200, "H200", 3.0)})
    assert provider(fake, tmp_path).create(spec("H200")).pod_id == "9200"
    assert fake.events == [("rent", "1"), ("list", None), ("rent", "1"), ("recorded", "9200")]


@pytest.mark.parametrize("reply", [
    {"success": True},  # no contract
    {"success": True, "new_contract": 0},
    {"success": True, "new_contract": None},
    "not json",
])
def test_a_200_without_an_instance_is_tried_again_after_a_lookup(tmp_path: Path,
                                                                 reply: Any) -> None:
    first = (httpx.Response(200, text=reply) if isinstance(reply, str)
             else answer(200, reply))
    fake = FakeVast(offers=[offer(1, "H200", 3.0)], rents={"1": [first, created(9300)]},
                    instances={"9300": instance(9300, "H200", 3.0)})
    assert provider(fake, tmp_path).create(spec("H200")).pod_id == "9300"
    assert fake.events == [("rent", "1"), ("list", None), ("rent", "1"), ("recorded", "9300")]


def test_a_rent_that_keeps_failing_is_looked_up_each_time_then_given_up(
        tmp_path: Path) -> None:
    # three tries (TIMINGS.create_attempts), a lookup by tag before each retry and after the
    # last: nothing found, so the offer is given up and the reason names the failing call
    fake = FakeVast(offers=[offer(1, "H200", 3.0)],
                    rents={"1": [httpx.ConnectError("refused") for _ in range(3)]})
    with pytest.raises(CapacityError) as caught:
        provider(fake, tmp_path).create(spec("H200"))
    assert caught.value.message == (
        "vast.ai could not rent any offer: offer 1: the API kept failing (vast.ai: renting "
        "offer 1 (H200) failed (no answer: ConnectError at http://vast.invalid (from "
        "TAILPOD_VAST_URL: a stopped sandbox or a stale value?)))")
    assert fake.events == [("rent", "1"), ("list", None), ("rent", "1"), ("list", None),
                           ("rent", "1"), ("list", None)]


def test_a_200_without_success_but_with_a_contract_is_the_instance(tmp_path: Path) -> None:
    fake = FakeVast(offers=[offer(1, "H200", 3.0)], rents={"1": [answer(200, {"new_contract":
                                                                               9400})]},
                    instances={"9400": instance(9400, "H200", 3.0)})
    assert provider(fake, tmp_path).create(spec("H200")).pod_id == "9400"
    assert fake.events == [("rent", "1"), ("recorded", "9400")]


@pytest.mark.parametrize(("status", "body", "detail"), [
    (400, {"success": False, "error": "invalid_args", "msg": "instance created but could not "
           "be scheduled", "new_contract": 9500},
     "invalid_args: instance created but could not be scheduled"),
    (200, {"success": False, "error": "scheduling", "msg": "could not schedule",
           "new_contract": 9500}, "scheduling: could not schedule"),
    (201, {"success": True, "new_contract": 9500}, "{'success': True, 'new_contract': 9500}"),
])
def test_an_error_that_names_an_instance_records_and_destroys_it_then_tries_the_next(
        tmp_path: Path, status: int, body: dict[str, Any], detail: str) -> None:
    fake = FakeVast(offers=[offer(1, "H200", 3.0), offer(2, "H200", 3.2)],
                    rents={"1": [answer(status, body)], "2": [created(9501)]},
                    instances={"9501": instance(9501, "H200", 3.2)})
    vp = provider(fake, tmp_path)
    info = vp.create(spec("H200", "RTX 4090"))
    assert info.pod_id == "9501"
    # the stray is in the ledger before it is destroyed: nothing bills outside it
    assert fake.events == [("rent", "1"), ("recorded", "9500"), ("destroy", "9500"),
                           ("rent", "2"), ("recorded", "9501")]
    assert info.detail["requested"] == "H200"
    assert "fallback_reasons" not in info.detail
    # the reason is kept for the next failure's message
    fake2 = FakeVast(offers=[offer(1, "H200", 3.0)], rents={"1": [answer(status, body)]})
    with pytest.raises(CapacityError) as caught:
        provider(fake2, tmp_path).create(spec("H200"))
    assert caught.value.message == (
        f"vast.ai could not rent any offer: offer 1: error after creating instance 9500 "
        f"(HTTP {status}: {detail}); destroyed it")


def test_a_refused_key_while_renting_is_an_auth_error(tmp_path: Path) -> None:
    for status in (401, 403):
        fake = FakeVast(offers=[offer(1, "H200", 3.0), offer(2, "H200", 3.1)],
                        rents={"1": [answer(status, {"success": False, "error": "auth"})]})
        with pytest.raises(AuthError) as caught:
            provider(fake, tmp_path).create(spec("H200"))
        assert caught.value.message == (
            f"vast.ai refused the API key (HTTP {status}) while renting")
        assert caught.value.hint == "check VAST_API_KEY"
        assert rented_ids(fake) == ["1"]


@pytest.mark.parametrize(("body", "detail"), [
    ({"success": False, "error": "insufficient_credit", "msg": "no"}, "insufficient_credit: no"),
    ({"success": False, "error": "invalid_args", "msg": "error 400: Insufficient credit to "
      "rent this instance"}, "invalid_args: error 400: Insufficient credit to rent this instance"),
    ({"success": False, "error": "MISSING_BILLING", "msg": ""}, "MISSING_BILLING"),
    ({"success": False, "msg": "Your CREDIT is too low"}, "Your CREDIT is too low"),
    ({"success": False, "error": "Credit"}, "Credit"),
])
def test_an_account_that_cannot_pay_stops_the_create(tmp_path: Path, body: Any,
                                                     detail: str) -> None:
    fake = FakeVast(offers=[offer(1, "H200", 3.0), offer(2, "H200", 3.1)],
                    rents={"1": [answer(400, body)]})
    with pytest.raises(ProviderError) as caught:
        provider(fake, tmp_path).create(spec("H200"))
    assert caught.value.message == (
        f"vast.ai: the account cannot pay for an instance ({detail}); nothing was created")
    assert caught.value.hint == "add credit at vast.ai"
    assert rented_ids(fake) == ["1"]


def test_any_other_refusal_stops_the_create_with_the_vendors_words(tmp_path: Path) -> None:
    fake = FakeVast(offers=[offer(7, "H200", 3.0), offer(8, "H200", 3.1)],
                    rents={"7": [answer(400, {"success": False, "error": "invalid_args",
                                              "msg": "bad image"})]})
    with pytest.raises(ApiError) as caught:
        provider(fake, tmp_path).create(spec("H200"))
    assert str(caught.value) == (
        "vast.ai: renting offer 7 (H200) failed (HTTP 400: invalid_args: bad image)")
    assert caught.value.status == 400
    assert rented_ids(fake) == ["7"]
    fake = FakeVast(offers=[offer(7, "H200", 3.0)], rents={"7": [httpx.Response(400,
                                                                                text="nope")]})
    with pytest.raises(ApiError) as caught:
        provider(fake, tmp_path).create(spec("H200"))
    assert str(caught.value) == "vast.ai: renting offer 7 (H200) failed (HTTP 400: nope)"


def test_the_offer_id_is_quoted_into_the_rent_path(tmp_path: Path) -> None:
    fake = FakeVast(rents={"a": [created(9600)]})  # the mock reads the decoded path's 5th part
    vp = provider(fake, tmp_path)
    assert vp._rent(spec("H200"), {"id": "a/b", "gpu_name": "H200"}, []) == "9600"
    assert fake.seen[0].url.raw_path == b"/api/v0/asks/a%2Fb/"
    assert fake.seen[0].method == "PUT"


# -- after the rent ---------------------------------------------------------------------------------

def test_an_instance_that_states_a_price_above_the_cap_is_destroyed_at_once(
        tmp_path: Path) -> None:
    fake = FakeVast(offers=[offer(1, "H200", 2.5)],
                    instances={"9001": instance(9001, "H200", 2.51)})
    with pytest.raises(CapacityError) as caught:
        provider(fake, tmp_path).create(spec("H200", max_price=2.5))
    assert caught.value.message == (
        "vast.ai rented 9001 at $2.51/h, above the cap $2.50/h; it was destroyed at once")
    assert caught.value.hint == "run `tailpod down` to prove billing stopped"
    assert fake.events == [("rent", "1"), ("recorded", "9001"), ("destroy", "9001")]


def test_an_instance_at_the_cap_or_with_no_stated_price_is_kept(tmp_path: Path) -> None:
    fake = FakeVast(offers=[offer(1, "H200", 2.5)], instances={"9001": instance(9001, "H200",
                                                                                2.5)})
    assert provider(fake, tmp_path).create(spec("H200", max_price=2.5)).price_per_hr == 2.5
    unpriced = {**instance(9001, "H200", 0.0), "dph_total": None}
    fake = FakeVast(offers=[offer(1, "H200", 2.5)], instances={"9001": unpriced})
    assert provider(fake, tmp_path).create(spec("H200", max_price=2.5)).pod_id == "9001"
    assert ("destroy", "9001") not in fake.events


def test_an_instance_not_visible_yet_is_still_returned_by_its_id(tmp_path: Path) -> None:
    fake = FakeVast(offers=[offer(1, "H200", 2.5)])
    info = provider(fake, tmp_path).create(spec("H200", max_price=3.0))
    assert (info.pod_id, info.run_tag, info.state) == ("9001", TAG, PodState.UNKNOWN)
    assert info.detail == {"readback_error": "not visible", "requested": "H200"}


# -- account and log --------------------------------------------------------------------------------

def test_the_account_is_the_credit_alone(tmp_path: Path) -> None:
    assert provider(FakeVast(), tmp_path).account() == AccountFacts(12.5)


class Clock:
    """The provider's `time`: only the test moves it (each sleep advances it)."""

    def __init__(self) -> None:
        self.now = 500.0
        self.slept: list[float] = []

    def monotonic(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds


def fetcher(answers: list[httpx.Response], calls: list[tuple[str, dict[str, Any]]]
            ) -> Callable[..., httpx.Response]:
    def get(url: str, **kwargs: Any) -> httpx.Response:
        calls.append((url, kwargs))
        return answers.pop(0) if answers else httpx.Response(404)
    return get


def test_the_container_log_is_fetched_from_its_result_url_without_the_key(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    clock = Clock()
    calls: list[tuple[str, dict[str, Any]]] = []
    monkeypatch.setattr(vast_module, "time", clock)
    monkeypatch.setattr(vast_module.httpx, "get", fetcher(
        [httpx.Response(404), httpx.Response(403),
         httpx.Response(200, text="boot\n\n  \nserving on 8000\n")], calls))
    fake = FakeVast(log_answer=answer(200, {"success": True, "result_url": "https://s3/x"}))
    assert provider(fake, tmp_path).container_log("77", tail=50) == ["boot", "serving on 8000"]
    assert fake.events == [("log", {"tail": "50"})]
    assert fake.seen[0].method == "PUT"
    assert fake.seen[0].url.path == "/api/v0/instances/request_logs/77/"
    assert calls == [("https://s3/x", {"timeout": 10.0})] * 3
    assert clock.slept == [0.3, 0.3]


def test_a_log_that_never_comes_is_none_after_about_nine_seconds(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    clock = Clock()
    calls: list[tuple[str, dict[str, Any]]] = []
    monkeypatch.setattr(vast_module, "time", clock)
    monkeypatch.setattr(vast_module.httpx, "get", fetcher([], calls))
    fake = FakeVast(log_answer=answer(200, {"result_url": "https://s3/y"}))
    assert provider(fake, tmp_path).container_log("77") is None
    assert fake.events == [("log", {"tail": "200"})]
    assert abs(len(calls) - 9.0 / 0.3) <= 1 and clock.now - 500.0 >= 9.0


@pytest.mark.parametrize("reply", [
    answer(400, {"success": False, "error": "bad"}), answer(404),
    answer(200, {"success": True}), answer(200, {"result_url": 5}), answer(200, ["x"]),
    answer(400, {"result_url": "https://s3/z"}),
])
def test_no_log_for_the_instance_is_none(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                         reply: httpx.Response) -> None:
    calls: list[tuple[str, dict[str, Any]]] = []
    monkeypatch.setattr(vast_module.httpx, "get", fetcher([httpx.Response(200, text="x")], calls))
    assert provider(FakeVast(log_answer=reply), tmp_path).container_log("77") is None
    assert calls == []


def test_a_failed_log_request_names_the_call(tmp_path: Path) -> None:
    fake = FakeVast(log_answer=answer(500, {"msg": "down"}))
    with pytest.raises(ProviderError) as caught:
        provider(fake, tmp_path).container_log("77")
    assert str(caught.value) == "vast.ai: requesting instance 77's log failed (HTTP 500: down)"
