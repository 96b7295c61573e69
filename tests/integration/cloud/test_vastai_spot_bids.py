"""vast.ai spot bids (issue 40), against a mock API the test scripts: which offers a bid can rent,
the `price` each rent sends, the cap applied to what the instance bills (bid plus storage), and
which instance states read as a lost bid. Every expected figure is worked out by hand from the
planted offers: `min_bid` is vast's "current minimum bid price in $/hr for interruptible"
(vast-ai/vast-cli @ 5567983 vast.py search offers), `storage_total_cost` the disk's $/h."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import pytest

from tailpod.config import load_settings
from tailpod.errors import CapacityError
from tailpod.provision.apiclient import ApiTimings
from tailpod.provision.base import PodSpec
from tailpod.provision.vastai import provider as vast_module
from tailpod.provision.vastai.provider import VastProvider

TAG = "tp-20260101-000000-5b0b1d"
TIMINGS = ApiTimings(request_timeout_s=5.0, attempts=1, backoff_s=0.0, backoff_max_s=0.0,
                     max_retry_after_s=0.0, create_attempts=3, readback_attempts=2,
                     readback_interval_s=0.0, max_offers_per_gpu=3)


def offer(offer_id: int, min_bid: float, storage: float, gpu: str = "RTX 4090") -> dict[str, Any]:
    # a bid search prices dph_total at the minimum bid (search_offers.yaml `type`)
    return {"id": offer_id, "machine_id": offer_id + 1000, "gpu_name": gpu, "num_gpus": 1,
            "min_bid": min_bid, "storage_total_cost": storage,
            "dph_total": round(min_bid + storage, 6), "reliability": 0.99}


class FakeVast:
    def __init__(self, offers: list[dict[str, Any]]) -> None:
        self.offers = offers
        self.queries: list[dict[str, Any]] = []
        self.rents: list[tuple[str, dict[str, Any]]] = []
        self.instances: dict[str, dict[str, Any]] = {}

    def __call__(self, request: httpx.Request) -> httpx.Response:
        path, method = request.url.path, request.method
        body = json.loads(request.content) if request.content else None
        if method == "POST" and path == "/api/v0/bundles/":
            self.queries.append(body)
            return httpx.Response(200, json={"offers": self.offers})
        if method == "PUT" and path.startswith("/api/v0/asks/"):
            offer_id = path.split("/")[4]
            self.rents.append((offer_id, body))
            pod_id = str(int(offer_id) + 9000)
            chosen = next(o for o in self.offers if str(o["id"]) == offer_id)
            self.instances[pod_id] = {
                "id": int(pod_id), "label": TAG, "actual_status": "loading",
                "is_bid": "price" in body, "gpu_name": chosen["gpu_name"], "num_gpus": 1,
                "dph_total": round(body.get("price", chosen["dph_total"])
                                   + chosen["storage_total_cost"], 6)}
            return httpx.Response(200, json={"success": True, "new_contract": int(pod_id)})
        if method == "GET" and path.startswith("/api/v0/instances/"):
            return httpx.Response(200, json={"instances": self.instances.get(path.split("/")[4])})
        if method == "GET" and path == "/api/v1/instances/":
            return httpx.Response(200, json={"instances": list(self.instances.values())})
        if method == "DELETE" and path.startswith("/api/v0/instances/"):
            self.instances.pop(path.split("/")[4], None)
            return httpx.Response(200, json={"success": True})
        return httpx.Response(405)


@pytest.fixture(autouse=True)
def no_avoided_machines(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(vast_module, "AVOIDED_MACHINES", set())


def provider(fake: FakeVast, tmp_path: Path) -> VastProvider:
    settings = load_settings(env={"VAST_API_KEY": "vast_SPOTbidsKEY_0123456789",
                                  "TAILPOD_HOME": str(tmp_path),
                                  "TAILPOD_VAST_URL": "http://vast.invalid"},
                             dotenv_path=tmp_path / "absent.env")
    return VastProvider(settings, timings=TIMINGS, transport=httpx.MockTransport(fake),
                        sleep=lambda s: None)


def spec(**overrides: Any) -> PodSpec:
    values: dict[str, Any] = {"run_tag": TAG, "gpu_preference": ["RTX 4090"], "image": "img",
                              "start_command": ["sleep", "1"], "disk_gb": 40, "spot": True}
    values.update(overrides)
    return PodSpec(**values)


def test_an_on_demand_rent_searches_on_demand_and_sends_no_price(tmp_path: Path) -> None:
    fake = FakeVast([offer(1, 0.2, 0.01)])
    provider(fake, tmp_path).create(spec(spot=False))
    assert [q["type"] for q in fake.queries] == ["on-demand"]
    assert "price" not in fake.rents[0][1]


def test_a_spot_rent_searches_bids_and_sends_the_users_bid(tmp_path: Path) -> None:
    fake = FakeVast([offer(1, 0.2, 0.01)])
    info = provider(fake, tmp_path).create(spec(bid=0.25))
    assert [q["type"] for q in fake.queries] == ["bid"]
    assert fake.rents == [("1", fake.rents[0][1])]
    assert fake.rents[0][1]["price"] == 0.25
    assert fake.rents[0][1]["cancel_unavail"] is True  # no stopped instance for a losing bid
    assert info.detail["spot"] is True and info.detail["bid"] == 0.25
    assert info.price_per_hr == pytest.approx(0.26)


def test_without_a_bid_each_offer_gets_its_minimum(tmp_path: Path) -> None:
    fake = FakeVast([offer(1, 0.31, 0.02), offer(2, 0.22, 0.05)])
    info = provider(fake, tmp_path).create(spec())
    # cheapest to run: offer 2 bills 0.22 + 0.05 = 0.27 against 0.31 + 0.02 = 0.33
    assert [(o, b["price"]) for o, b in fake.rents] == [("2", 0.22)]
    assert info.detail["bid"] == 0.22


def test_offers_whose_minimum_bid_is_above_the_bid_are_not_tried(tmp_path: Path) -> None:
    fake = FakeVast([offer(1, 0.40, 0.01), offer(2, 0.20, 0.03)])
    provider(fake, tmp_path).create(spec(bid=0.3))
    assert [o for o, _ in fake.rents] == ["2"]


def test_a_bid_below_every_minimum_rents_nothing_and_says_so(tmp_path: Path) -> None:
    fake = FakeVast([offer(1, 0.40, 0.01), offer(2, 0.35, 0.03)])
    with pytest.raises(CapacityError) as caught:
        provider(fake, tmp_path).create(spec(bid=0.3))
    assert fake.rents == []
    assert "minimum bid is above the bid $0.3/h (lowest $0.35/h)" in caught.value.message


@pytest.mark.parametrize(("cap", "rented"), [(0.3199, []), (0.32, ["1"])])
def test_the_cap_holds_the_bid_plus_the_storage(tmp_path: Path, cap: float,
                                               rented: list[str]) -> None:
    fake = FakeVast([offer(1, 0.2, 0.02)])  # bid 0.30 + storage 0.02 = 0.32 an hour
    prov = provider(fake, tmp_path)
    if rented:
        prov.create(spec(bid=0.3, max_price=cap))
    else:
        with pytest.raises(CapacityError, match="price cap"):
            prov.create(spec(bid=0.3, max_price=cap))
    assert [o for o, _ in fake.rents] == rented


@pytest.mark.parametrize(("row", "want"), [
    ({"is_bid": True, "actual_status": "stopped", "intended_status": "stopped",
      "cur_state": "stopped", "next_state": "stopped"}, True),
    ({"is_bid": True, "actual_status": "stopped"}, True),  # states not given: not contradicted
    ({"is_bid": False, "actual_status": "stopped", "intended_status": "stopped"}, False),
    ({"is_bid": True, "actual_status": "running", "intended_status": "running"}, False),
    ({"is_bid": True, "actual_status": "stopped", "intended_status": "running"}, False),
    ({"is_bid": True, "actual_status": "exited", "intended_status": "stopped"}, False),
])
def test_a_lost_bid_is_a_stopped_bid_instance(tmp_path: Path, row: dict[str, Any],
                                              want: bool) -> None:
    info = provider(FakeVast([]), tmp_path).to_info({"id": 5, "label": TAG, **row})
    assert info.detail["preempted"] is want
    assert info.detail["spot"] is row["is_bid"]
