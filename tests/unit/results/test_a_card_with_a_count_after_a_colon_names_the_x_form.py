"""`up --gpu A40:2` and `TAILPOD_GPUS=A40:2` ask for two GPUs (SkyPilot's form), so a newcomer
writes `matrix --card "vastai:RTX 4090:2"` and was told "the purchase '2' is not spot or
on-demand", with a hint about spot cards. A card counts its GPUs as `xN`: the refusal says so,
with the card spelled that way (the purchase marker kept after it)."""

from __future__ import annotations

import pytest

from tailpod.errors import ConfigError
from tailpod.results.matrix import parse_card


@pytest.mark.parametrize(("text", "spelled"), [
    ("vastai:RTX 4090:2", '"vastai:RTX 4090x2"'),
    ("vastai:RTX 4090:2:spot", '"vastai:RTX 4090x2:spot"'),
])
def test_a_count_after_a_colon_is_refused_with_the_x_form(text: str, spelled: str) -> None:
    with pytest.raises(ConfigError) as got:
        parse_card(text)
    assert "counts its GPUs as xN" in got.value.message
    assert got.value.hint is not None and spelled in got.value.hint
    assert parse_card(spelled.strip('"')).count == 2


def test_an_unknown_word_keeps_the_purchase_refusal() -> None:
    with pytest.raises(ConfigError) as got:
        parse_card("vastai:RTX 4090:cheap")
    assert "the purchase 'cheap' is not spot or on-demand" in got.value.message
