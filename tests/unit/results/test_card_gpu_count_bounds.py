"""A matrix card's GPU count (`provider:GPUxN`) is held to the bounds `up --gpu-count` is
(config.py MAX_GPU_COUNT): `x17` or a count of 20 digits is refused with exit 2 naming the card,
before any offer query, rather than sent to a provider as a pod of that many GPUs."""

from __future__ import annotations

import pytest

from tailpod.config import MAX_GPU_COUNT
from tailpod.errors import ConfigError
from tailpod.results.matrix import parse_card


@pytest.mark.parametrize("count", [MAX_GPU_COUNT + 1, 10**20])
def test_a_count_past_the_bound_is_refused_naming_the_card(count: int) -> None:
    text = f"runpod:NVIDIA A40x{count}"
    with pytest.raises(ConfigError, match=rf"card '{text}': the GPU count must be 1-16"):
        parse_card(text)


@pytest.mark.parametrize("count", [1, 8, MAX_GPU_COUNT])
def test_counts_within_the_bound_pass(count: int) -> None:
    assert parse_card(f"vastai:RTX 4090x{count}:spot").count == count
