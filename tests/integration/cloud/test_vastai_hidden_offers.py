"""vast.ai's host filters, stated and counted: what `gpus` and a refused `up` say they hid
(tailpod/provision/vastai/provider.py `filters`, `hidden`, `gpu_names`, `listed_price`).

Driven by the scripted vast.ai of test_vastai_offer_create.py (answers every search with the
offers it holds, whatever the query): the filtering counted here is tailpod's own reading.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest

from tailpod.config import load_settings
from tailpod.errors import CapacityError
from tailpod.provision.vastai.provider import VastProvider, listed_price
from tests.integration.cloud.test_vastai_offer_create import (
    BASE_QUERY,
    KEY,
    TIMINGS,
    FakeVast,
    answer,
    no_avoided_machines,  # noqa: F401 (autouse: each test starts with no avoided machine)
    offer,
    provider,
    spec,
)

GOOD = {"reliability": 0.99, "disk_space": 400.0, "inet_down": 800.0, "cuda_max_good": 12.8}


def market() -> list[dict]:
    return [
        offer(1, "RTX 3090", 0.2, **{**GOOD, "reliability": 0.9}),
        offer(2, "RTX 3090", 0.2, **{**GOOD, "disk_space": 20.0, "cuda_max_good": 12.2}),
        offer(3, "RTX 3090", 0.3, **GOOD),
        offer(4, "RTX_4090", 0.4, **{**GOOD, "inet_down": 50.0}),
        offer(5, "RTX 3090", 0.5, **{k: v for k, v in GOOD.items() if k != "reliability"},
              reliability=None),
        offer(6, "L40S", 0.7, **{**GOOD, "cuda_max_good": 12.0}),
    ]


def test_hidden_counts_each_offer_once_and_each_filter_it_fails(tmp_path: Path) -> None:
    fake = FakeVast(offers=[offer(7, "L40S", 0.1, **{**GOOD, "reliability": 0.1}), *market()])
    got = provider(fake, tmp_path).hidden(["RTX 3090", "RTX 4090"], 1, 100, "12.8")
    assert got == {"RTX 3090": {"offers": 3, "reliability": 2, "disk": 1, "cuda": 1},
                   "RTX 4090": {"offers": 1, "download": 1}}  # the L40S was not asked
    # the query without the host filters, for the same GPUs, count and priced disk
    assert fake.queries == [{**{k: v for k, v in BASE_QUERY.items()
                                if k not in ("reliability", "inet_down")},
                             "allocated_storage": 100, "num_gpus": {"eq": 1},
                             "gpu_name": {"in": ["RTX 3090", "RTX 4090"]}}]


def test_hidden_defaults_to_the_disk_up_rents_and_keeps_to_a_volumes_machine(
        tmp_path: Path) -> None:
    offers = [offer(1, "RTX 3090", 0.2, machine=41, **{**GOOD, "disk_space": 60.0}),
              offer(2, "RTX 3090", 0.2, machine=42, **{**GOOD, "disk_space": 60.0}),
              offer(3, None, 0.2, **{**GOOD, "reliability": 0.1})]
    fake = FakeVast(offers=offers)
    vp = provider(fake, tmp_path)
    assert vp.hidden(["RTX 3090"], 1) == {"RTX 3090": {"offers": 2, "disk": 2}}  # 80 GB
    assert vp.hidden(["RTX 3090"], 1, 40, None, ["41"]) == {}
    assert vp.hidden(["RTX 3090"], 1, 80, None, ["41"]) == {"RTX 3090": {"offers": 1,
                                                                          "disk": 1}}
    assert fake.queries[-1]["machine_id"] == {"in": [41]}
    assert vp.hidden([], 1, 40) == {"?": {"offers": 1, "reliability": 1}}  # a nameless offer


def test_hidden_of_every_gpu_and_without_a_cuda_floor(tmp_path: Path) -> None:
    got = provider(FakeVast(offers=market()), tmp_path).hidden([], 1, 10)
    assert got == {"RTX 3090": {"offers": 2, "reliability": 2},
                   "RTX 4090": {"offers": 1, "download": 1}}
    # the provider's own floor (TAILPOD_MIN_CUDA) counts like the image's
    own = provider(FakeVast(offers=market()), tmp_path, min_cuda="12.4").hidden([], 1, 10)
    assert own["L40S"] == {"offers": 1, "cuda": 1}
    assert own["RTX 3090"] == {"offers": 3, "reliability": 2, "cuda": 1}


def test_the_filters_are_stated_as_the_query_sends_them(tmp_path: Path) -> None:
    vp = provider(FakeVast(), tmp_path, min_reliability=0.9, min_inet_down_mbps=500.0)
    assert vp.filters() == {"min_reliability": 0.9, "disk_gb": 80, "min_inet_down_mbps": 500.0,
                            "min_cuda": None}
    assert vp.filters(40, "12.8") == {"min_reliability": 0.9, "disk_gb": 40,
                                      "min_inet_down_mbps": 500.0, "min_cuda": "12.8"}
    assert vp.describe_filters(40, "12.8") == ("reliability >= 0.9, disk >= 40 GB, "
                                               "download >= 500 Mbps, CUDA >= 12.8")


def test_the_market_names_are_vasts_spelling_whatever_the_host(tmp_path: Path) -> None:
    fake = FakeVast(offers=market())
    assert provider(fake, tmp_path).gpu_names(2) == {"RTX 3090": "", "RTX 4090": "", "L40S": ""}
    assert fake.queries[0]["num_gpus"] == {"eq": 2} and "reliability" not in fake.queries[0]
    provider(fake, tmp_path).gpu_names()
    assert fake.queries[1]["num_gpus"] == {"eq": 1}


def test_the_filters_come_from_the_settings(tmp_path: Path) -> None:
    settings = load_settings(env={"VAST_API_KEY": KEY, "TAILPOD_HOME": str(tmp_path),
                                  "TAILPOD_VAST_URL": "http://vast.invalid",
                                  "TAILPOD_MIN_CUDA": "12.4", "TAILPOD_MIN_RELIABILITY": "0.8",
                                  "TAILPOD_DISK_GB": "120"},
                             dotenv_path=tmp_path / "absent.env")
    fake = FakeVast()
    vp = VastProvider(settings, timings=TIMINGS, transport=httpx.MockTransport(fake),
                      sleep=lambda s: None)
    assert vp.filters() == {"min_reliability": 0.8, "disk_gb": 120, "min_inet_down_mbps": 100.0,
                            "min_cuda": "12.4"}
    vp.search(["H200"], 1, min_cuda="")  # a blank floor is none; the settings' stays
    assert fake.queries[0]["cuda_max_good"] == {"gte": 12.4}
    assert fake.queries[0]["reliability"] == {"gte": 0.8}


@dataclass
class Market(FakeVast):
    """A vast.ai that filters as the real one: the host filters of a query apply."""

    hosts: list[dict[str, Any]] = field(default_factory=list)
    loose_answer: httpx.Response | None = None

    def __call__(self, request: httpx.Request) -> httpx.Response:
        if request.method == "POST" and request.url.path == "/api/v0/bundles/":
            query = json.loads(request.content)
            self.queries.append(query)
            strict = "reliability" in query
            if not strict and self.loose_answer is not None:
                return self.loose_answer
            floor = (query.get("cuda_max_good") or {}).get("gte", 0)
            names = (query.get("gpu_name") or {}).get("in")
            count = (query.get("num_gpus") or {}).get("eq")
            found = [o for o in self.hosts
                     if (not names or o["gpu_name"] in names)
                     and (count is None or o["num_gpus"] == count)
                     and (not strict or (o["reliability"] >= query["reliability"]["gte"]
                                         and o["cuda_max_good"] >= floor))]
            return answer(200, {"offers": found})
        return super().__call__(request)


def test_a_refused_create_says_what_each_filter_hid(tmp_path: Path) -> None:
    fake = Market(hosts=[offer(1, "RTX 3090", 0.2, **{**GOOD, "reliability": 0.5}),
                         offer(2, "RTX 3090", 0.2, **{**GOOD, "cuda_max_good": 12.2})])
    with pytest.raises(CapacityError) as caught:
        provider(fake, tmp_path).create(spec("RTX 3090", min_cuda="12.8", disk_gb=80))
    assert caught.value.message == (
        "no vast.ai offer matches 'RTX 3090' with 1 GPU(s), reliability >= 0.95, disk >= 80 GB, "
        "download >= 100 Mbps, CUDA >= 12.8; nothing was created (RTX 3090: 2 offers hidden by "
        "reliability >= 0.95 (1), CUDA >= 12.8 (1))")
    # the name was spelled right: the hint is about the filters, not other names
    assert caught.value.hint == ("`tailpod gpus --provider vastai` lists what is rentable now; "
                                 "loosen --min-reliability, --min-cuda or --disk-gb to see more")
    loose = [q for q in fake.queries if "reliability" not in q]
    assert loose[0]["allocated_storage"] == 80 and loose[0]["num_gpus"] == {"eq": 1}
    assert fake.rented == []


def test_a_refused_create_on_a_volumes_machine_counts_that_machine_only(tmp_path: Path) -> None:
    fake = Market(hosts=[offer(1, "RTX 3090", 0.2, machine=41, **{**GOOD, "reliability": 0.5}),
                         offer(2, "RTX 3090", 0.2, machine=42, **{**GOOD, "reliability": 0.5})])
    with pytest.raises(CapacityError) as caught:
        provider(fake, tmp_path).create(spec("RTX 3090", data_center_ids=["41"], disk_gb=80))
    assert caught.value.message.endswith(
        "(RTX 3090: 1 offer hidden by reliability >= 0.95 (1))")


@pytest.mark.parametrize(("asked", "count", "hint"), [
    ("H100", 2, "vast.ai offers 'H100 NVL', 'H100 SXM' now; name one, or loosen "
                "--min-reliability, --min-cuda or --disk-gb"),  # a family
    ("RTX 309O", 1, "vast.ai offers 'RTX 3090' now; name one, or loosen --min-reliability, "
                    "--min-cuda or --disk-gb"),  # a typo
    ("B300", 1, "`tailpod gpus --provider vastai` lists what is rentable now; loosen "
                "--min-reliability, --min-cuda or --disk-gb to see more"),
])
def test_a_refused_create_names_what_the_market_sells_under_that_name(
        tmp_path: Path, asked: str, count: int, hint: str) -> None:
    hosts = [offer(1, "H100 SXM", 2.0, **GOOD), offer(2, "H100 NVL", 2.0, **GOOD),
             offer(3, "RTX 3090", 0.2, **GOOD)]
    for o in hosts:
        o["num_gpus"] = count
    fake = Market(hosts=hosts)
    with pytest.raises(CapacityError) as caught:
        provider(fake, tmp_path).create(spec(asked, gpu_count=count))
    assert caught.value.hint == hint
    assert all(q["num_gpus"] == {"eq": count} for q in fake.queries)


def test_a_market_that_cannot_be_read_still_refuses_with_the_plain_words(tmp_path: Path) -> None:
    fake = Market(hosts=[], loose_answer=answer(503))
    with pytest.raises(CapacityError) as caught:
        provider(fake, tmp_path).create(spec("RTX 3090", disk_gb=80))
    assert caught.value.message.endswith("download >= 100 Mbps; nothing was created")
    assert caught.value.hint.startswith("`tailpod gpus --provider vastai`")


@pytest.mark.parametrize(("price", "listed"), [
    (0.14002, 0.1401), (0.14, 0.14), (2.25, 2.25), (0.36666667, 0.3667), (0.10000001, 0.1001),
])
def test_a_listed_price_is_rounded_up_to_4_decimals(price: float, listed: float) -> None:
    assert listed_price(price) == listed
    assert listed_price(price) >= price


def test_a_price_that_is_no_number_stays_so() -> None:
    assert math.isinf(listed_price(math.inf))


def test_the_cap_holds_the_listed_price_in_offers_and_create(tmp_path: Path) -> None:
    fake = FakeVast(offers=[offer(1, "L40S", 0.14002, **GOOD)])
    vp = provider(fake, tmp_path)
    listed = vp.offers(["L40S"], 1, 0.1401)[0]
    assert listed.price_per_hr == 0.1401 and listed.detail["above_cap"] is False
    assert vp.offers(["L40S"], 1, 0.14002)[0].detail["above_cap"] is True
    with pytest.raises(CapacityError):  # a cap between the raw and the listed price rents nothing
        vp.create(spec("L40S", max_price=0.14002))
    assert fake.rented == []


def test_a_refused_create_counts_at_the_disk_it_would_rent_for_each_gpu(tmp_path: Path) -> None:
    fake = Market(hosts=[offer(1, "RTX 3090", 0.2, **{**GOOD, "reliability": 0.5,
                                                      "disk_space": 30.0}),
                         offer(2, "RTX 3090", 0.2, **{**GOOD, "reliability": 0.5,
                                                      "disk_space": 60.0}),  # enough for 40
                         offer(3, "RTX 4090", 0.3, **{**GOOD, "reliability": 0.5})])
    with pytest.raises(CapacityError) as caught:
        provider(fake, tmp_path).create(spec("RTX 3090", "RTX 4090", disk_gb=40))
    assert caught.value.message.endswith(
        "(RTX 3090: 2 offers hidden by reliability >= 0.95 (2), disk >= 40 GB (1); "
        "RTX 4090: 1 offer hidden by reliability >= 0.95 (1))")
