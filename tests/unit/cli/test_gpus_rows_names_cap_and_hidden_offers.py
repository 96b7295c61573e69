"""What `tailpod gpus` makes of the providers' answers (cli/gpus.py), against in-memory providers
the test scripts: which names a wanted GPU resolves to, the row each offer becomes, an unknown
name's refusal and its "did you mean", the providers asked by default, the price cap (inclusive,
as `up`'s), the stock filter and the order, the table's cells, what the host filters hid, and
which providers answered, refused or could not be asked. Written to kill the module's mutants
(docs/testing.md, "first contact, gpus, logs (session 19)"); every expected value is written out
by hand from the script. tests/unit/cli/test_cli_gpus.py and test_gpus_max_price_cap_inclusive.py
run the command itself against the sandbox clouds."""

from __future__ import annotations

import math
from collections.abc import Iterable
from pathlib import Path
from typing import Any, ClassVar

import pytest

import tailpod.cli.gpus as gpus
import tailpod.provision.apiclient as apiclient
from tailpod.config import load_settings
from tailpod.errors import AuthError, ConfigError, ProviderError
from tailpod.provision.base import (
    BillingEvidence,
    Offer,
    PodInfo,
    PodSpec,
    Provider,
    SupportsGpuNames,
    SupportsHiddenOffers,
)

H100, NVL, A40, L4 = "NVIDIA H100 80GB HBM3", "NVIDIA H100 NVL", "NVIDIA A40", "NVIDIA L4"
NAMES = {H100: "H100 SXM", NVL: "H100 NVL", A40: "A40", L4: ""}


class Plain(Provider):
    """A provider with offers only: no list of names, no host filters, no spot."""

    name = "plain"

    def __init__(self, offers: Iterable[Offer] = ()) -> None:
        self.catalog = {o.gpu_type: o for o in offers}
        self.asked: list[tuple[list[str], int, float | None]] = []

    def offers(self, gpu_preference: list[str], gpu_count: int,
               max_price: float | None) -> list[Offer]:
        self.asked.append((list(gpu_preference), gpu_count, max_price))
        return [self.catalog.get(g) or Offer(self.name, g, gpu_count, None, False,
                                             detail={"error": "unknown GPU type"})
                for g in gpu_preference]

    def create(self, spec: PodSpec) -> PodInfo:
        raise AssertionError("gpus rents nothing")

    def get(self, pod_id: str) -> PodInfo | None:
        raise AssertionError("gpus reads no pod")

    def list_by_tag(self, run_tag: str | None = None) -> list[PodInfo]:
        raise AssertionError("gpus lists no pod")

    def terminate(self, pod_id: str) -> None:
        raise AssertionError("gpus ends no pod")

    def billing_evidence(self, run_tag: str, pod_id: str | None, price_per_hr: float | None,
                         *, known_active_tags: Iterable[str] = ()) -> BillingEvidence:
        raise AssertionError("gpus proves nothing")


class Market(Plain, SupportsGpuNames, SupportsHiddenOffers):
    """A provider that names its GPUs, filters its hosts and counts what they hide."""

    name = "market"
    spot_route: ClassVar[str | None] = "bid"

    def __init__(self, offers: Iterable[Offer] = (), names: dict[str, str] | None = None,
                 hidden: dict[str, dict[str, int]] | None = None,
                 filters: dict[str, Any] | None = None, spot: dict[str, float] | None = None
                 ) -> None:
        super().__init__(offers)
        self.names = dict(NAMES if names is None else names)
        self.hid = hidden or {}
        self.used = filters if filters is not None else {"min_reliability": 0.95}
        self.spot = spot or {}
        self.names_asked: list[int] = []
        self.hidden_asked: list[tuple[list[str], int]] = []
        self.spot_asked: list[tuple[list[str], int]] = []

    def gpu_names(self, gpu_count: int = 1) -> dict[str, str]:
        self.names_asked.append(gpu_count)
        return dict(self.names)

    def filters(self) -> dict[str, Any]:
        return dict(self.used)

    def hidden(self, gpu_names: list[str], gpu_count: int) -> dict[str, dict[str, int]]:
        self.hidden_asked.append((list(gpu_names), gpu_count))
        return self.hid

    def spot_prices(self, gpu_types: list[str], gpu_count: int, bid: float | None = None
                    ) -> dict[str, float]:
        self.spot_asked.append((list(gpu_types), gpu_count))
        return {g: p for g, p in self.spot.items() if g in gpu_types}


def offer(gpu: str, price: float | None, available: bool = True, provider: str = "market",
          count: int = 1, memory: float | None = 80.0, **detail: Any) -> Offer:
    return Offer(provider, gpu, count, price, available, gpu_memory_gb=memory, detail=detail)


# -- names ---------------------------------------------------------------------------------------

def test_a_family_resolves_to_every_variant_once_and_unknown_names_are_kept_apart() -> None:
    market = Market()
    resolved, missing, known = gpus.resolve(market, ["H100", "A40", "B200", "NVIDIA A40"], 2)
    assert resolved == [H100, NVL, A40]
    assert missing == ["B200"]
    assert known == NAMES and market.names_asked == [2]


def test_without_a_list_of_names_the_names_are_asked_as_given() -> None:
    assert gpus.resolve(Plain(), ["H100", "x"], 1) == (["H100", "x"], [], {})
    assert gpus.resolve(Market(names={}), ["H100"], 1) == (["H100"], [], {})


# -- rows ----------------------------------------------------------------------------------------

def test_each_offer_becomes_one_row() -> None:
    market = Market([offer(H100, 2.69, stock="HIGH"), offer(L4, None, available=False,
                                                             memory=None, offers=3)])
    rows = gpus.offer_rows(market, [H100, L4], 2, 3.0, {H100: "H100 SXM", L4: ""})
    assert market.asked == [([H100, L4], 2, 3.0)]
    assert rows == [
        {"provider": "market", "gpu": H100, "also": "H100 SXM", "gpu_count": 1,
         "memory_gb": 80.0, "price_per_hr": 2.69, "available": True, "stock": "HIGH",
         "offers": None, "error": None},
        {"provider": "market", "gpu": L4, "also": None, "gpu_count": 1, "memory_gb": None,
         "price_per_hr": None, "available": False, "stock": None, "offers": 3, "error": None},
    ]


def test_the_whole_listing_leaves_out_names_a_filter_hides() -> None:
    market = Market([offer(H100, 2.69), offer(NVL, None, False, error="no matching offer"),
                     offer(A40, 0.44), offer(L4, 0.39)])
    rows = gpus.offer_rows(market, [], 2, None)
    assert market.asked == [([H100, NVL, A40, L4], 2, None)]
    assert market.names_asked == [2]  # the names sold for pods of 2 GPUs
    assert [(r["gpu"], r["also"]) for r in rows] == [(H100, "H100 SXM"), (A40, "A40"), (L4, None)]
    # asked by name, the row stays, with its reason
    (row,) = gpus.offer_rows(market, [NVL], 1, None, {NVL: "H100 NVL"})
    assert (row["error"], row["also"]) == ("no matching offer", "H100 NVL")


def test_a_provider_without_names_lists_nothing_and_asks_for_no_offer() -> None:
    plain = Plain([offer(A40, 0.44)])
    assert gpus.offer_rows(plain, [], 1, None) == []
    assert plain.asked == []


def test_an_unknown_name_is_refused_with_the_near_names() -> None:
    with pytest.raises(ConfigError) as caught:
        gpus.offer_rows(Market([offer(A40, 0.44)]), ["A4O", "B300"], 1, None)
    assert caught.value.message == "market has no GPU type 'A4O', 'B300'"
    assert caught.value.hint == "did you mean 'A40', 'NVIDIA A40'"


def test_an_unknown_name_near_nothing_points_at_the_listing() -> None:
    with pytest.raises(ConfigError) as caught:
        gpus.offer_rows(Market(), ["zzzz"], 1, None, {A40: "A40"})
    assert caught.value.message == "market has no GPU type 'zzzz'"
    assert caught.value.hint == "tailpod gpus --provider market lists them"


def test_the_near_names_come_from_the_names_given_else_the_providers() -> None:
    with pytest.raises(ConfigError) as caught:
        gpus.offer_rows(Market(), ["H10O SXM"], 1, None, {A40: "A40"})
    assert caught.value.hint == "tailpod gpus --provider market lists them"  # not H100's
    market = Market()
    with pytest.raises(ConfigError) as caught:
        gpus.offer_rows(market, ["H10O SXM"], 4, None)
    assert caught.value.hint is not None and "'H100 SXM'" in caught.value.hint
    assert market.names_asked == [4]


# -- which providers -----------------------------------------------------------------------------

def _settings(tmp_path: Path, **env: str) -> Any:
    return load_settings(env={"TAILPOD_HOME": str(tmp_path), **env},
                         dotenv_path=tmp_path / "absent.env")


def test_the_providers_named_once_each_by_their_own_name(tmp_path: Path) -> None:
    assert gpus._providers(_settings(tmp_path), ["vast", "RunPod", "vastai", "local"]) == \
        ["vastai", "runpod", "local"]


def test_by_default_every_cloud_with_a_key(tmp_path: Path) -> None:
    assert gpus._providers(_settings(tmp_path, VAST_API_KEY="vast_key_0123456789"), []) == \
        ["vastai"]
    both = _settings(tmp_path, VAST_API_KEY="vast_key_0123456789",
                     RUNPOD_API_KEY="rp_key_0123456789abcdef")
    assert gpus._providers(both, []) == ["runpod", "vastai"]


def test_no_cloud_key_names_the_variables_and_local(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as caught:
        gpus._providers(_settings(tmp_path), [])
    assert caught.value.message == "no cloud API key is set, so there is no catalog to ask"
    assert caught.value.hint == ("set RUNPOD_API_KEY or VAST_API_KEY (.env), or pass "
                                 "--provider local for this machine")


# -- the cap, the stock filter, the order --------------------------------------------------------

def row(gpu: str, price: Any, available: bool = True, provider: str = "market") -> dict[str, Any]:
    return {"provider": provider, "gpu": gpu, "price_per_hr": price, "available": available}


def test_the_cap_is_inclusive_and_an_unpriced_row_is_above_it() -> None:
    at, below, over, unpriced = row("at", 0.5), row("below", 0.25), row("over", 0.5000001), \
        row("unpriced", None)
    listed, above = gpus.select_rows([over, at, unpriced, below], 0.5, False)
    assert listed == [below, at]
    assert above == [over, unpriced]
    listed, above = gpus.select_rows([over, at, unpriced, below], None, False)
    assert listed == [below, at, over, unpriced] and above == []


def test_in_stock_first_then_cheapest_then_provider_and_name() -> None:
    rows = [row("b", 1.0, False), row("z", 1.0, provider="a"), row("a", 1.0, provider="b"),
            row("y", 1.0, provider="a"), row("c", 0.5, False), row("d", 2)]
    listed, _ = gpus.select_rows(rows, None, False)
    assert [(r["provider"], r["gpu"]) for r in listed] == [
        ("a", "y"), ("a", "z"), ("b", "a"), ("market", "d"), ("market", "c"), ("market", "b")]
    listed, _ = gpus.select_rows(rows, None, True)  # --available
    assert [r["gpu"] for r in listed] == ["y", "z", "a", "d"]
    listed, above = gpus.select_rows(rows, 1.0, True)
    assert [r["gpu"] for r in listed] == ["y", "z", "a"]
    assert [r["gpu"] for r in above] == ["d"]  # above the cap is counted in stock or not


def test_a_price_is_a_number_else_infinite() -> None:
    assert gpus._price({"price_per_hr": 2}) == 2.0 and isinstance(gpus._price({"price_per_hr": 2}), float)
    assert gpus._price({"price_per_hr": 0.44}) == 0.44
    assert gpus._price({"price_per_hr": None}) == math.inf
    assert gpus._price({"price_per_hr": "0.44"}) == math.inf
    assert gpus._price({}) == math.inf


@pytest.mark.parametrize(("price", "shown"), [
    (0.44, "0.44"), (3.0, "3.00"), (0.1, "0.10"), (0.4938, "0.4938"), (0.125, "0.125"),
    (2.5, "2.50"), (0.0001, "0.0001"), (10.0, "10.00"),
])
def test_dollars_in_cents_or_the_four_places_an_offer_states(price: float, shown: str) -> None:
    assert gpus._dollars(price) == shown


# -- the table -----------------------------------------------------------------------------------

def cells(table: Any) -> list[list[str]]:
    return [list(c._cells) for c in table.columns]


def full_row(gpu: str, also: str | None, memory: Any, price: Any, available: bool = True,
             stock: str | None = None, offers: int | None = None, error: str | None = None,
             **more: Any) -> dict[str, Any]:
    return {"provider": "market", "gpu": gpu, "also": also, "memory_gb": memory,
            "price_per_hr": price, "available": available, "stock": stock, "offers": offers,
            "error": error, **more}


def test_the_tables_cells() -> None:
    rows = [full_row(H100, "H100 SXM", 80.0, 2.69, stock="HIGH"),
            full_row("RTX 4090", "RTX 4090", 24.5, 0.4938, offers=1),
            full_row("RTX 3090", None, None, None, offers=3, stock="LOW"),
            full_row("RTX 3080", None, 10, 0.2, offers=2),
            full_row(A40, "A40", 48, 0.44, available=False),
            full_row(L4, "", 24, 0.39, available=True, error="no matching offer")]
    table = gpus._table(rows, 1)
    assert table.title == "GPU offers (1 GPU per pod)"
    assert table.title_justify == "left"
    assert [c.header for c in table.columns] == ["provider", "--gpu (also)", "GB", "USD/h",
                                                 "available"]
    assert cells(table) == [
        ["market"] * 6,
        [f"{H100} (H100 SXM)", "RTX 4090", "RTX 3090", "RTX 3080", f"{A40} (A40)", L4],
        ["80", "24.5", "—", "10", "48", "24"],
        ["2.69", "0.4938", "—", "0.20", "0.44", "0.39"],
        ["yes (high)", "yes (1 offer)", "yes (low) (3 offers)", "yes (2 offers)", "no",
         "no matching offer"],
    ]
    assert [c.justify for c in table.columns] == ["left", "left", "right", "right", "left"]
    assert [c.no_wrap for c in table.columns] == [True, False, True, True, True]
    assert table.columns[1].overflow == "fold"


def test_the_spot_column_and_a_pod_of_several_gpus() -> None:
    rows = [full_row(A40, "A40", 48, 0.88, spot_price_per_hr=0.4),
            full_row(L4, None, 24, 0.78)]
    table = gpus._table(rows, 2, spot=True)
    assert table.title == "GPU offers (2 GPUs per pod)"
    assert [c.header for c in table.columns] == ["provider", "--gpu (also)", "GB", "USD/h",
                                                 "spot USD/h", "available"]
    assert cells(table)[4] == ["0.40", "—"]
    assert (table.columns[4].justify, table.columns[4].no_wrap) == ("right", True)


# -- what the filters hid ------------------------------------------------------------------------

def test_what_the_host_filters_hid_one_row_a_gpu_by_name() -> None:
    filters = {"min_reliability": 0.95, "disk_gb": 80, "min_cuda": "12.8"}
    market = Market(hidden={"RTX 5090": {"offers": 1, "cuda": 1},
                            "RTX 4090": {"offers": 3, "reliability": 2, "disk": 1}},
                    filters=filters)
    rows, used = gpus._hidden(market, ["RTX 4090", "RTX 5090"], 2)
    assert market.hidden_asked == [(["RTX 4090", "RTX 5090"], 2)]
    assert used == filters
    assert rows == [
        {"provider": "market", "gpu": "RTX 4090", "offers": 3,
         "by": {"reliability": 2, "disk": 1},
         "words": "3 offers hidden by reliability >= 0.95 (2), disk >= 80 GB (1)"},
        {"provider": "market", "gpu": "RTX 5090", "offers": 1, "by": {"cuda": 1},
         "words": "1 offer hidden by CUDA >= 12.8 (1)"},
    ]
    assert gpus._hidden(Plain(), ["RTX 4090"], 1) == ([], None)


# -- asking the providers ------------------------------------------------------------------------

@pytest.fixture
def providers(monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """get_provider answers the provider put under its name, or raises the exception put there."""
    made: dict[str, Any] = {}

    def get_provider(name: str, settings: Any) -> Any:
        made.setdefault("settings", []).append(settings)
        found = made[name]
        if isinstance(found, Exception):
            raise found
        return found

    monkeypatch.setattr(gpus, "get_provider", get_provider)
    return made


SETTINGS: Any = object()  # what `gpus` built; passed through to each provider as it is


def ask(names: list[str], wanted: list[str], count: int = 1, cap: float | None = None,
        spot: bool = False) -> gpus.Answers:
    return gpus.ask_providers(names, SETTINGS, wanted, count, cap, 1e12, spot)


def test_each_provider_answers_for_the_names_it_sells(providers: dict[str, Any]) -> None:
    providers["one"] = Market([offer(A40, 0.44, provider="one"), offer(H100, 2.69, provider="one")],
                              names={A40: "A40", H100: "H100 SXM"},
                              hidden={A40: {"offers": 2, "reliability": 2}})
    providers["two"] = Market([offer("RTX 4090", 0.35, provider="two")],
                              names={"RTX 4090": ""}, filters={})
    got = ask(["one", "two"], ["A40", "RTX 4090", "B200"], count=2, cap=1.0)
    assert [(r["provider"], r["gpu"]) for r in got.rows] == [("one", A40), ("two", "RTX 4090")]
    assert providers["one"].asked == [([A40], 2, 1.0)]
    assert providers["two"].asked == [(["RTX 4090"], 2, 1.0)]
    assert [(h["provider"], h["gpu"], h["offers"]) for h in got.hidden] == [("market", A40, 2)]
    assert got.filters == {"one": {"min_reliability": 0.95}, "two": {}}
    assert got.missing == {"A40": ["two"], "RTX 4090": ["one"], "B200": ["one", "two"]}
    assert got.near == {"A40": [], "RTX 4090": [], "B200": []}
    assert got.errors == [] and got.unasked == []
    assert "spot_price_per_hr" not in got.rows[0]
    assert [r["also"] for r in got.rows] == ["A40", None]  # each provider's other name
    assert providers["one"].names_asked == [2] and providers["two"].names_asked == [2]
    assert providers["settings"] == [SETTINGS, SETTINGS]


def test_a_provider_selling_none_of_the_names_does_not_stop_the_next(
        providers: dict[str, Any]) -> None:
    providers["one"] = Market(names={H100: "H100 SXM"})
    providers["two"] = Market([offer(A40, 0.44, provider="two")], names={A40: "A40"})
    got = ask(["one", "two"], ["A40"])
    assert [(r["provider"], r["gpu"]) for r in got.rows] == [("two", A40)]
    assert got.missing == {"A40": ["one"]}


def test_spot_is_off_unless_asked(providers: dict[str, Any]) -> None:
    providers["one"] = Market([offer(A40, 0.44)], names={A40: "A40"}, spot={A40: 0.2})
    got = gpus.ask_providers(["one"], SETTINGS, [], 1, None, 1e12)
    assert "spot_price_per_hr" not in got.rows[0] and providers["one"].spot_asked == []


def test_every_call_runs_under_the_deadline(providers: dict[str, Any]) -> None:
    seen: list[float | None] = []

    class Timed(Market):
        def offers(self, gpu_preference: list[str], gpu_count: int,
                   max_price: float | None) -> list[Offer]:
            seen.append(apiclient._DEADLINE.get())
            return super().offers(gpu_preference, gpu_count, max_price)

    providers["one"] = Timed([offer(A40, 0.44)], names={A40: "A40"})
    gpus.ask_providers(["one"], SETTINGS, [], 1, None, 1234.5)
    assert seen == [1234.5] and apiclient._DEADLINE.get() is None


def test_a_provider_selling_none_of_the_names_is_not_asked_for_offers(
        providers: dict[str, Any]) -> None:
    providers["one"] = Market(names={A40: "A40"})
    got = ask(["one"], ["A4O"])
    assert got.rows == [] and providers["one"].asked == [] and providers["one"].hidden_asked == []
    assert got.missing == {"A4O": ["one"]}
    assert got.near == {"A4O": ["A40", "NVIDIA A40"]}
    assert got.filters == {}


def test_no_names_wanted_lists_everything(providers: dict[str, Any]) -> None:
    providers["one"] = Market([offer(A40, 0.44), offer(L4, 0.39)], names={A40: "A40", L4: ""})
    got = ask(["one"], [])
    assert [r["gpu"] for r in got.rows] == [A40, L4]
    assert providers["one"].hidden_asked == [([], 1)]
    assert got.missing == {} and got.near == {}


def test_spot_prices_beside_the_rows_where_the_provider_sells_spot(
        providers: dict[str, Any]) -> None:
    providers["one"] = Market([offer(A40, 0.44), offer(L4, 0.39)], names={A40: "A40", L4: ""},
                              spot={A40: 0.2})
    plain = Plain([offer(A40, 0.5, provider="plain"), offer(L4, 0.45, provider="plain")])
    providers["plain"] = plain
    got = ask(["one", "plain"], [A40, L4], count=2, spot=True)
    assert providers["one"].spot_asked == [([A40, L4], 2)]
    assert [(r["provider"], r["spot_price_per_hr"]) for r in got.rows] == [
        ("market", 0.2), ("market", None), ("plain", None), ("plain", None)]


def test_no_rows_asks_for_no_spot_price(providers: dict[str, Any]) -> None:
    providers["one"] = Market(names={})  # no names: nothing listed
    got = ask(["one"], [], spot=True)
    assert got.rows == [] and providers["one"].spot_asked == []


def test_a_refused_provider_is_an_error_and_an_unanswered_one_is_unknown(
        providers: dict[str, Any]) -> None:
    providers["keyless"] = ConfigError("keyless: refused token hf_" + "Zq7" * 10)
    providers["denied"] = AuthError("denied refused the key")
    providers["down"] = ProviderError("down did not answer")
    providers["up"] = Market([offer(A40, 0.44)], names={A40: "A40"})
    got = ask(["keyless", "denied", "down", "up"], [])
    assert got.errors == [{"provider": "keyless", "error": "keyless: refused token ***"},
                          {"provider": "denied", "error": "denied refused the key"}]
    assert got.unasked == [{"provider": "down", "error": "down did not answer"}]
    assert [r["gpu"] for r in got.rows] == [A40]


def test_the_only_provider_refused_for_its_settings_stops_gpus(
        providers: dict[str, Any]) -> None:
    providers["keyless"] = ConfigError("keyless: no API key")
    with pytest.raises(ConfigError, match="^keyless: no API key$"):
        ask(["keyless"], [])
    providers["denied"] = AuthError("denied refused the key")
    got = ask(["denied"], [])
    assert got.errors == [{"provider": "denied", "error": "denied refused the key"}]
