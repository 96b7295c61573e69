"""`gpus`, `check-requirements` and `up` ask the providers one query with one set of filters, so
what `gpus` lists `up` can rent (newcomer 2.21, 4.3; adversary 30; issue 37 item 3).

The sandbox's vast.ai market (tailpod/sandbox/model.py default_vast_offers) has RTX 3090 hosts
whose driver reaches CUDA 12.2 only, and the sandbox image vllm/vllm-openai:v0.11.0 states CUDA
12.8.1 (tailpod/sandbox/images.py): `up` asks hosts for CUDA >= 12.8, so no RTX 3090 can run it.
Expected values are computed here from the sandbox's own tables, not from tailpod's code.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tailpod.cli.main import app
from tailpod.config import load_settings
from tailpod.errors import CapacityError
from tailpod.ledger import new_run_tag
from tailpod.provision.base import PodSpec
from tailpod.provision.providers import get_provider
from tailpod.sandbox import Sandbox, start_sandbox
from tailpod.sandbox.model import default_runpod_catalog, default_vast_offers
from tailpod.sandbox.world import SANDBOX_IMAGE, registry_images
from tests.helpers.api_timings import fast_timings

DISK = 80  # TAILPOD_DISK_GB's default: what `up` rents and `gpus` prices
IMAGE_CUDA = (12, 8)  # CUDA_VERSION=12.8.1 of the sandbox's vllm/vllm-openai config


@pytest.fixture()
def world(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Sandbox]:
    """The sandbox clouds and a registry that serves the sandbox image, with the environment
    `sandbox serve --env-file` gives a user (TAILPOD_IMAGE included)."""
    sb = start_sandbox(start_delay_s=0.05, workdir=tmp_path / "sandbox",
                       stand_in_config={"registry": {"images": registry_images()}})
    env = {**sb.env(), "TAILPOD_HOME": str(tmp_path / "home"), "TAILPOD_ENV_FILE": os.devnull,
           "TAILPOD_IMAGE": SANDBOX_IMAGE, "COLUMNS": "100"}
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    try:
        yield sb
    finally:
        sb.close()


def _gpus(*args: str) -> tuple[int, dict]:
    result = CliRunner().invoke(app, ["gpus", "--json", *args])
    return result.exit_code, json.loads(result.stdout)


def _vast_rentable(cuda: tuple[int, int] | None = IMAGE_CUDA, reliability: float = 0.95
                   ) -> dict[str, float]:
    """The cheapest total $/h of each GPU a one-GPU `up` could rent on the sandbox's vast.ai."""
    best: dict[str, float] = {}
    for o in default_vast_offers():
        host = tuple(int(p) for p in str(o.cuda_max_good).split("."))
        if o.num_gpus != 1 or o.reliability < reliability or o.disk_space < DISK \
                or o.inet_down < 100 or (cuda is not None and host < cuda):
            continue
        total = o.dph_base + o.storage_cost * DISK / 720
        best[o.gpu_name] = min(best.get(o.gpu_name, 1e9), total)
    return best


def test_gpus_lists_only_what_up_can_rent_and_says_what_each_filter_hid(world: Sandbox) -> None:
    code, doc = _gpus("--provider", "vastai")
    assert code == 0, doc
    listed = {r["gpu"]: r["price_per_hr"] for r in doc["offers"] if r["available"]}
    expected = _vast_rentable()
    assert "RTX 3090" not in expected  # the finding: the sandbox's 3090 hosts reach CUDA 12.2
    assert listed.keys() == expected.keys()
    for name, price in expected.items():
        assert listed[name] == pytest.approx(price, abs=1e-4)
    # both RTX 3090 offers are hidden, and by the CUDA floor alone
    hidden = {r["gpu"]: r for r in doc["hidden"]}
    assert hidden["RTX 3090"]["offers"] == 2
    assert hidden["RTX 3090"]["by"] == {"cuda": 2}
    assert doc["filters"]["vastai"]["min_cuda"] == "12.8"
    assert doc["filters"]["vastai"]["min_reliability"] == 0.95


def test_the_table_names_the_hidden_offers_and_the_filter(world: Sandbox) -> None:
    result = CliRunner().invoke(app, ["gpus", "--provider", "vastai"])
    assert result.exit_code == 0, result.output
    text = " ".join(result.output.split())
    assert "RTX 3090" in text and "2 offers hidden" in text and "CUDA" in text


def test_the_filters_are_flags_with_the_same_names_as_ups(world: Sandbox) -> None:
    # no CUDA floor asked and no image: the 3090s come back, at the reliability asked
    code, doc = _gpus("--provider", "vastai", "--min-cuda", "12.0",
                      "--min-reliability", "0.98", "--image", "")
    assert code == 0, doc
    listed = {r["gpu"] for r in doc["offers"] if r["available"]}
    assert listed == set(_vast_rentable(cuda=(12, 0), reliability=0.98))
    assert "RTX 3090" in listed  # the PL host, reliability 0.985; the CA one (0.970) is hidden
    hidden = {r["gpu"]: r for r in doc["hidden"]}
    assert hidden["RTX 3090"]["by"] == {"reliability": 1}
    for command in ("gpus", "up", "check-requirements"):
        help_text = CliRunner().invoke(app, [command, "--help"], env={"COLUMNS": "200"}).output
        for flag in ("--min-reliability", "--min-cuda", "--disk-gb"):
            assert flag in help_text, (command, flag)


def _vast_spec(gpu: str, cap: float) -> PodSpec:
    tag = new_run_tag()
    return PodSpec(run_tag=tag, gpu_preference=[gpu], image=SANDBOX_IMAGE,
                   start_command=["sleep", "60"], max_price=cap, disk_gb=DISK, min_cuda="12.8")


def test_up_rents_what_gpus_lists_at_its_listed_price_as_the_cap(world: Sandbox) -> None:
    code, doc = _gpus("--provider", "vastai")
    assert code == 0, doc
    cheapest = min((r for r in doc["offers"] if r["available"]), key=lambda r: r["price_per_hr"])
    provider = get_provider("vastai", load_settings(), timings=fast_timings())
    info = provider.create(_vast_spec(cheapest["gpu"], cheapest["price_per_hr"]))  # cap inclusive
    try:
        assert info.gpu_type == cheapest["gpu"]
    finally:
        provider.terminate(info.pod_id)


def test_up_refusing_a_gpu_names_the_filter_not_other_spellings(world: Sandbox) -> None:
    provider = get_provider("vastai", load_settings(), timings=fast_timings())
    with pytest.raises(CapacityError) as caught:
        provider.create(_vast_spec("RTX 3090", 0.5))
    text = f"{caught.value.message} {caught.value.hint}"
    assert "CUDA >= 12.8" in text
    assert "2 offer" in text  # how many the filters hid
    assert "names GPUs like" not in text  # the user spelled the name right


def test_check_requirements_fails_the_gpu_gpus_hides(world: Sandbox) -> None:
    result = CliRunner().invoke(app, ["check-requirements", "--provider", "vastai", "--gpu",
                                      "RTX 3090", "--max-price", "0.5", "--json"])
    doc = json.loads(result.stdout)
    offers = next(c for c in doc["checks"] if c["name"] == "offers")
    assert offers["status"] == "fail", offers
    assert "CUDA >= 12.8" in offers["detail"]


def test_a_family_name_resolves_to_the_variants_each_provider_sells(world: Sandbox) -> None:
    code, doc = _gpus("--gpu", "H100", "--image", "")
    assert code == 0, doc
    got = {(r["provider"], r["gpu"]) for r in doc["offers"]}
    runpod_h100 = {g.gpu_id for g in default_runpod_catalog() if "H100" in g.gpu_id.split()}
    vast_h100 = {o.gpu_name for o in default_vast_offers() if "H100" in o.gpu_name.split()}
    assert got == {("runpod", g) for g in runpod_h100} | {("vastai", g) for g in vast_h100}


def test_the_count_form_is_the_gpu_and_its_count(world: Sandbox) -> None:
    code, doc = _gpus("--provider", "runpod", "--gpu", "A40:2")
    assert code == 0, doc
    a40 = next(g for g in default_runpod_catalog() if g.name == "A40")
    assert doc["gpu_count"] == 2
    assert [(r["gpu"], r["gpu_count"]) for r in doc["offers"]] == [(a40.gpu_id, 2)]
    assert doc["offers"][0]["price_per_hr"] == pytest.approx(2 * a40.secure_price)
    conflict = CliRunner().invoke(app, ["gpus", "--provider", "runpod", "--gpu", "A40:2",
                                        "--gpu-count", "1"])
    assert conflict.exit_code == 2, conflict.output


def test_the_environments_count_prices_pods_as_up_rents_them(
        world: Sandbox, monkeypatch: pytest.MonkeyPatch) -> None:
    """TAILPOD_GPUS=A40:2 (or TAILPOD_GPU_COUNT=2) is the pod `up` rents: `gpus` prices that pod,
    not a one-GPU one (a newcomer saw "(1 GPU per pod)" prices beside an `up` that rents two)."""
    a40 = next(g for g in default_runpod_catalog() if g.name == "A40")
    monkeypatch.setenv("TAILPOD_GPUS", "A40:2")
    code, doc = _gpus("--provider", "runpod", "--gpu", "A40")
    assert code == 0, doc
    assert doc["gpu_count"] == 2
    assert doc["offers"][0]["price_per_hr"] == pytest.approx(2 * a40.secure_price)
    monkeypatch.delenv("TAILPOD_GPUS")
    monkeypatch.setenv("TAILPOD_GPU_COUNT", "3")
    code, doc = _gpus("--provider", "runpod", "--gpu", "A40")
    assert code == 0 and doc["gpu_count"] == 3, doc


def test_an_unknown_gpu_is_a_usage_error_on_every_provider(world: Sandbox) -> None:
    result = CliRunner().invoke(app, ["gpus", "--gpu", "H1OO"])
    assert result.exit_code == 2, result.output
    assert "H1OO" in result.output and "H100" in result.output  # named, and the near match


def test_gpus_against_a_silent_api_ends_at_its_timeout_and_exits_3(
        world: Sandbox, silent_api: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TAILPOD_RUNPOD_URL", silent_api)
    started = time.monotonic()
    result = CliRunner().invoke(app, ["gpus", "--timeout", "3", "--image", ""])
    took = time.monotonic() - started
    assert result.exit_code == 3, result.output
    assert took < 10, took
    assert "runpod" in result.output and "could not" in result.output
    assert "vastai" in result.output  # the provider that answered is still listed


def test_runpod_calls_a_type_unavailable_when_no_host_reaches_the_images_cuda(
        world: Sandbox) -> None:
    # the sandbox's A40 hosts reach CUDA 12.4 only: RunPod's create refuses them for a 12.8
    # image, so the catalog asked with the same minCudaVersion must not call A40 available
    world.cloud.runpod_catalog["NVIDIA A40"].cuda = "12.4"
    code, doc = _gpus("--provider", "runpod", "--gpu", "A40")
    assert code == 0, doc
    assert [(r["gpu"], r["available"]) for r in doc["offers"]] == [("NVIDIA A40", False)]
    assert [(h["provider"], h["gpu"], h["by"]) for h in doc["hidden"]] == [
        ("runpod", "NVIDIA A40", {"cuda": 1})]  # said why, not only "no"
    assert doc["filters"]["runpod"] == {"min_cuda": "12.8"}
    code, doc = _gpus("--provider", "runpod", "--gpu", "A40", "--image", "")
    assert [(r["gpu"], r["available"]) for r in doc["offers"]] == [("NVIDIA A40", True)]
    provider = get_provider("runpod", load_settings(), timings=fast_timings())
    spec = PodSpec(run_tag=new_run_tag(), gpu_preference=["A40"], image=SANDBOX_IMAGE,
                   start_command=["sleep", "60"], disk_gb=DISK, min_cuda="12.8")
    with pytest.raises(CapacityError):
        provider.create(spec)


def test_check_requirements_reads_the_count_form(world: Sandbox) -> None:
    result = CliRunner().invoke(app, ["check-requirements", "--provider", "runpod", "--gpu",
                                      "A40:2", "--max-price", "5", "--json"])
    doc = json.loads(result.stdout)
    offers = next(c for c in doc["checks"] if c["name"] == "offers")
    a40 = next(g for g in default_runpod_catalog() if g.name == "A40")
    assert offers["data"]["expected"]["gpu"] == a40.gpu_id
    assert offers["data"]["expected"]["count"] == 2
    assert offers["data"]["expected"]["price_per_hr"] == pytest.approx(2 * a40.secure_price)


def test_up_refuses_two_counts_before_anything(world: Sandbox) -> None:
    result = CliRunner().invoke(app, ["up", "--provider", "runpod", "--gpu", "A40:2",
                                      "--gpu-count", "1"])
    assert result.exit_code == 2, result.output
    assert "A40:2" in result.output and "--gpu-count" in result.output
    assert world.cloud.pods == {}  # nothing rented


def test_check_requirements_names_the_variants_a_family_stands_for(world: Sandbox) -> None:
    # vast.ai has no "H100": its market sells "H100 SXM"; the check names it instead of
    # "no matching offer" (what `up` runs as its preflight)
    result = CliRunner().invoke(app, ["check-requirements", "--provider", "vastai", "--gpu",
                                      "H100", "--max-price", "5", "--json", "--image", ""])
    doc = json.loads(result.stdout)
    offers = next(c for c in doc["checks"] if c["name"] == "offers")
    vast_h100 = sorted({o.gpu_name for o in default_vast_offers()
                        if "H100" in o.gpu_name.split()})
    assert offers["status"] == "fail", offers
    for name in vast_h100:
        assert repr(name) in offers["detail"], offers["detail"]


def test_matrix_prices_a_card_as_up_would_rent_it(world: Sandbox) -> None:
    result = CliRunner().invoke(app, [
        "matrix", "--dry-run", "--json", "--card", "runpod:A40", "--card", "vastai:RTX 3090",
        "--card", "vastai:RTX 4090", "--budget", "5", "--model", "Qwen/Qwen3-0.6B",
        "--image", SANDBOX_IMAGE])
    doc = json.loads(result.stdout)
    prices = doc["prices"] if "prices" in doc else doc["error"]
    assert prices["vastai:RTX 3090"]["price_per_hr"] is None, prices  # every host below 12.8
    assert prices["vastai:RTX 4090"]["price_per_hr"] == pytest.approx(
        _vast_rentable()["RTX 4090"], abs=1e-4)


def test_a_listed_price_taken_as_the_cap_rents_whatever_its_rounding(world: Sandbox) -> None:
    # an offer whose total lies just above a 4-decimal price: listing it rounded down would
    # make the listed price a cap that `up` refuses
    offer = next(o for o in world.cloud.vast_offers.values() if o.gpu_name == "L40S")
    offer.dph_base = 0.14002 - offer.storage_cost * DISK / 720  # total $0.14002/h
    code, doc = _gpus("--provider", "vastai", "--gpu", "L40S")
    assert code == 0, doc
    listed = doc["offers"][0]["price_per_hr"]
    assert listed >= 0.14002  # never below what the rent costs
    provider = get_provider("vastai", load_settings(), timings=fast_timings())
    info = provider.create(_vast_spec("L40S", listed))
    try:
        assert info.gpu_type == "L40S"
    finally:
        provider.terminate(info.pod_id)
    table = CliRunner().invoke(app, ["gpus", "--provider", "vastai", "--gpu", "L40S"]).output
    assert f"{listed:g}" in table  # the table shows the same price, not 0.14


def test_gpus_keeps_an_offer_priced_at_the_cap(world: Sandbox) -> None:
    a40 = next(g for g in default_runpod_catalog() if g.name == "A40")
    code, doc = _gpus("--provider", "runpod", "--max-price", f"{a40.secure_price}")
    assert code == 0, doc
    within = {g.gpu_id for g in default_runpod_catalog() if g.secure_price <= a40.secure_price}
    assert a40.gpu_id in within
    assert {r["gpu"] for r in doc["offers"]} == within
    assert doc["above_max_price"] == len(default_runpod_catalog()) - len(within)


def test_a_family_of_several_runpod_types_is_listed_by_gpus_and_named_by_the_check(
        world: Sandbox) -> None:
    from tailpod.sandbox.model import RunPodGpuType

    world.cloud.runpod_catalog["NVIDIA H100 PCIe"] = RunPodGpuType(
        "NVIDIA H100 PCIe", "H100 PCIe", 80, 2.39, 1.99)
    code, doc = _gpus("--provider", "runpod", "--gpu", "H100")
    assert code == 0, doc
    assert {r["gpu"] for r in doc["offers"]} == {"NVIDIA H100 80GB HBM3", "NVIDIA H100 PCIe"}
    result = CliRunner().invoke(app, ["check-requirements", "--provider", "runpod", "--gpu",
                                      "H100", "--max-price", "5", "--json"])
    offers = next(c for c in json.loads(result.stdout)["checks"] if c["name"] == "offers")
    assert offers["status"] == "fail"
    assert "unknown" not in offers["detail"]  # it is known: it names two types
    assert "'NVIDIA H100 80GB HBM3'" in offers["detail"]
    assert "'NVIDIA H100 PCIe'" in offers["detail"]
