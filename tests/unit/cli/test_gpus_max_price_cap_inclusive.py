"""`gpus --max-price` at the cap (issue 37 item 10): the cap is inclusive, as `up`'s is
(docs/cli.md, `gpus`): an offer priced exactly at the cap is listed, and only those above it are
counted as "above --max-price". The cap is each offer's own price as the uncapped listing gave it,
so the comparison is exact."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from tailpod.cli.main import app


def _json(args: list[str]) -> dict:
    result = CliRunner().invoke(app, ["gpus", "--json", *args])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


@pytest.mark.parametrize("provider", ["runpod", "vast"])
def test_an_offer_priced_exactly_at_the_cap_is_listed(cloud_env: dict[str, str],
                                                      provider: str) -> None:
    every = _json(["--provider", provider])["offers"]
    prices = sorted({r["price_per_hr"] for r in every if r["price_per_hr"] is not None})
    assert len(prices) >= 3
    cap = prices[len(prices) // 2]  # a price in the middle: some offers below, some above
    at_cap = {r["gpu"] for r in every if r["price_per_hr"] == cap}
    below_or_at = {r["gpu"] for r in every
                   if r["price_per_hr"] is not None and r["price_per_hr"] <= cap}
    above = [r for r in every if r["price_per_hr"] is None or r["price_per_hr"] > cap]
    doc = _json(["--provider", provider, "--max-price", repr(cap)])
    listed = {r["gpu"] for r in doc["offers"]}
    assert at_cap and at_cap <= listed
    assert listed == below_or_at
    assert doc["above_max_price"] == len(above)
