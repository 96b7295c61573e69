"""vast.ai's host filters, stated and counted: what `gpus` and a refused `up` say they hid
(tailpod/provision/vastai/provider.py `filters`, `hidden`, `gpu_names`, `listed_price`).

Driven by the scripted vast.ai of test_vastai_offer_create.py (answers every search with the
offers it holds, whatever the query): the filtering counted here is tailpod's own reading.
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from tailpod.errors import CapacityError
from tailpod.provision.vastai.provider import listed_price
from tests.integration.cloud.test_vastai_offer_create import (
    BASE_QUERY,
    FakeVast,
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
    fake = FakeVast(offers=market())
    got = provider(fake, tmp_path).hidden(["RTX 3090", "RTX 4090"], 1, 80, "12.8")
    assert got == {"RTX 3090": {"offers": 3, "reliability": 2, "disk": 1, "cuda": 1},
                   "RTX 4090": {"offers": 1, "download": 1}}
    # the query without the host filters, for the same GPUs, count and priced disk
    assert fake.queries == [{**{k: v for k, v in BASE_QUERY.items()
                                if k not in ("reliability", "inet_down")},
                             "allocated_storage": 80, "num_gpus": {"eq": 1},
                             "gpu_name": {"in": ["RTX 3090", "RTX 4090"]}}]


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
