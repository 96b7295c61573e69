"""`tailpod gpus` against the sandbox clouds: every type, its price, memory and stock, and the
name `up --gpu` takes."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from tailpod.cli.main import app
from tailpod.sandbox.model import default_runpod_catalog, default_vast_offers


def _json(args: list[str]) -> dict:
    result = CliRunner().invoke(app, ["gpus", "--json", *args])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def test_runpod_lists_its_whole_catalog_at_the_secure_price(cloud_env: dict[str, str]) -> None:
    doc = _json(["--provider", "runpod"])
    got = {r["gpu"]: r for r in doc["offers"]}
    expected = {g.gpu_id: g for g in default_runpod_catalog()}
    assert set(got) == set(expected)
    for gpu_id, g in expected.items():
        assert got[gpu_id]["price_per_hr"] == pytest.approx(g.secure_price)
        assert got[gpu_id]["memory_gb"] == g.memory_gb
        assert got[gpu_id]["also"] == g.name
    prices = [r["price_per_hr"] for r in doc["offers"] if r["available"]]
    assert prices == sorted(prices)


def test_vast_lists_the_cheapest_offer_of_each_type(cloud_env: dict[str, str]) -> None:
    doc = _json(["--provider", "vast"])
    # priced as `up` rents: dph_total is the GPU's price plus the storage of the disk searched
    # with, which is TAILPOD_DISK_GB (80 by default; the emulator bills $/GB-month over 720 h),
    # and a host without that much disk is no offer
    disk = 80
    single = [o for o in default_vast_offers() if o.num_gpus == 1 and o.disk_space >= disk]
    cheapest: dict[str, float] = {}
    for o in single:
        total = o.dph_base + o.storage_cost * disk / 720
        cheapest[o.gpu_name] = min(cheapest.get(o.gpu_name, 1e9), total)
    got = {r["gpu"]: r for r in doc["offers"]}
    assert set(got) == set(cheapest)
    for name, total in cheapest.items():
        assert got[name]["price_per_hr"] == pytest.approx(total, abs=1e-4)


def test_max_price_and_gpu_filters(cloud_env: dict[str, str]) -> None:
    doc = _json(["--provider", "runpod", "--max-price", "0.5"])
    expected = {g.gpu_id for g in default_runpod_catalog() if g.secure_price <= 0.5}
    assert {r["gpu"] for r in doc["offers"]} == expected
    assert doc["above_max_price"] == len(default_runpod_catalog()) - len(expected)
    one = _json(["--provider", "runpod", "--gpu", "A40"])
    assert [r["gpu"] for r in one["offers"]] == ["NVIDIA A40"]


def test_default_is_every_keyed_cloud_and_the_table_fits_80_columns(
        cloud_env: dict[str, str]) -> None:
    result = CliRunner().invoke(app, ["gpus"])
    assert result.exit_code == 0, result.output
    assert "runpod" in result.output and "vastai" in result.output
    assert "NVIDIA A40" in result.output and "RTX 3090" in result.output
    assert all(len(line) <= 80 for line in result.output.splitlines())
    assert "…" not in result.output


def test_no_key_is_a_usage_error(cloud_env: dict[str, str],
                                 monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("RUNPOD_API_KEY")
    monkeypatch.delenv("VAST_API_KEY")
    result = CliRunner().invoke(app, ["gpus"])
    assert result.exit_code == 2, result.output
    assert "no cloud API key" in result.output


def test_unknown_gpu_name_says_what_exists(cloud_env: dict[str, str]) -> None:
    result = CliRunner().invoke(app, ["gpus", "--provider", "runpod", "--gpu", "A4O"])
    assert result.exit_code == 2, result.output
    assert "A40" in result.output
