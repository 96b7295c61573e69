"""A card says how it is bought (issue 40, a mixed matrix): `provider:GPU[xN]:spot` or
`:on-demand` after the shape; an unmarked card is on-demand, or spot under `matrix --spot`. A
marker that is neither is refused with the marker named, and `--spot` beside an `:on-demand` card
is refused rather than guessed."""

from __future__ import annotations

import pytest

from tailpod.errors import ConfigError
from tailpod.results.matrix import Card, parse_card, parse_cards, purchase_text


@pytest.mark.parametrize(
    ("text", "provider", "gpu", "count", "spot", "label"),
    [
        ("vastai:RTX 4090:spot", "vastai", "RTX 4090", 1, True, "vastai:RTX 4090:spot"),
        ('vastai:"RTX 4090"x2:spot', "vastai", "RTX 4090", 2, True, "vastai:RTX 4090x2:spot"),
        ("vast:RTX 4090 x4 : SPOT", "vastai", "RTX 4090", 4, True, "vastai:RTX 4090x4:spot"),
        ("runpod:NVIDIA A40:on-demand", "runpod", "NVIDIA A40", 1, False,
         "runpod:NVIDIA A40:on-demand"),
        ("runpod:NVIDIA A40:ondemand", "runpod", "NVIDIA A40", 1, False,
         "runpod:NVIDIA A40:on-demand"),
        ("runpod:NVIDIA A40", "runpod", "NVIDIA A40", 1, None, "runpod:NVIDIA A40"),
    ],
)
def test_the_purchase_marker_is_read_after_the_shape(
        text: str, provider: str, gpu: str, count: int, spot: bool | None, label: str) -> None:
    card = parse_card(text)
    assert (card.provider, card.gpu, card.count, card.spot) == (provider, gpu, count, spot)
    assert card.label == label
    assert parse_card(card.label) == card  # the label reads back as the same card


@pytest.mark.parametrize("text", ["vastai:RTX 4090:spto", "vastai:RTX 4090:", "vastai:A:B:spot"])
def test_a_bad_marker_is_refused_naming_it(text: str) -> None:
    with pytest.raises(ConfigError, match="is not spot or on-demand"):
        parse_cards([text])


def test_unmarked_cards_follow_spot_and_marked_ones_keep_their_purchase() -> None:
    plain, spot, demand = parse_cards(["vastai:RTX 4090", "vastai:RTX 3090:spot",
                                       "runpod:NVIDIA A40:on-demand"])
    assert [plain.is_spot(False), spot.is_spot(False), demand.is_spot(False)] == \
        [False, True, False]
    assert [plain.is_spot(True), spot.is_spot(True)] == [True, True]


def test_spot_for_every_card_beside_an_on_demand_card_is_refused() -> None:
    with pytest.raises(ConfigError, match="marked on-demand, but --spot rents every card spot"):
        parse_cards(["vastai:RTX 4090", "runpod:NVIDIA A40:on-demand"], every_card_spot=True)


def test_the_same_shape_bought_two_ways_is_two_cards_but_bought_one_way_twice_is_a_duplicate(
        ) -> None:
    both = parse_cards(["vastai:RTX 4090", "vastai:RTX 4090:spot"])
    assert [c.slug for c in both] == ["vastai-rtx-4090", "vastai-rtx-4090-spot"]
    with pytest.raises(ConfigError, match="duplicate card"):
        parse_cards(["vastai:RTX 4090", "vastai:rtx 4090:on-demand"])
    with pytest.raises(ConfigError, match="duplicate card"):  # both spot under --spot
        parse_cards(["vastai:RTX 4090", "vastai:RTX 4090:spot"], every_card_spot=True)


def test_a_marked_card_survives_matrix_json() -> None:
    card = Card("vastai", "RTX 4090", 2, spot=True)
    raw = card.to_json()
    assert raw["spot"] is True and raw["label"] == "vastai:RTX 4090x2:spot"
    assert Card(**{k: v for k, v in raw.items() if k != "label"}) == card
    assert "spot" not in Card("runpod", "NVIDIA A40").to_json()  # unmarked: as before


def test_the_purchase_reads_as_the_plan_and_report_say_it() -> None:
    assert purchase_text({"spot": False}) == "on-demand"
    assert purchase_text({"spot": True, "bid": 0.25, "on_demand_per_hr": 0.4267}) == \
        "spot at a bid of $0.25/h (+ storage); on-demand $0.43/h"
    assert purchase_text({"spot": True, "bid": None}) == \
        "spot at each offer's minimum bid (+ storage)"
