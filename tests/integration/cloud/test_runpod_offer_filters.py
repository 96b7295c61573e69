"""RunPod's side of the one offer query: the catalog asked with the create's CUDA floor, what
that floor hides, and the names a family stands for (tailpod/provision/runpod/provider.py
`catalog`, `filters`, `hidden`, `gpu_names`, `resolve_gpu`, `offers`, `create`).

Driven by the scripted RunPod of test_runpod_offer_create.py; `CudaRunPod` scopes the catalog's
`availability` by `minCudaVersion` as listGpuTypes documents ("scoped by the same filters",
runpod/docs api-reference-v2/openapi.json @ a900806e).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from tailpod.config import load_settings
from tailpod.errors import ConfigError
from tailpod.provision.runpod.provider import RunPodProvider
from tests.integration.cloud.test_runpod_offer_create import (
    A40,
    CATALOG,
    H100,
    KEY,
    L40S,
    TIMINGS,
    FakeRunPod,
    gpu,
    pod,
    spec,
)

HOST_CUDA = {H100: (12, 8), A40: (12, 4), L40S: (12, 8)}  # the newest driver each type's hosts run


def settings(tmp_path: Path, **env: str) -> Any:
    return load_settings(env={"RUNPOD_API_KEY": KEY, "TAILPOD_HOME": str(tmp_path),
                              "TAILPOD_RUNPOD_URL": "http://runpod.invalid", **env},
                         dotenv_path=tmp_path / "absent.env")


@dataclass
class CudaRunPod(FakeRunPod):
    def __call__(self, request: httpx.Request) -> httpx.Response:
        if request.url.path == "/v2/catalog/gpus" and request.method == "GET":
            self.seen.append(request)
            floor = request.url.params.get("minCudaVersion")
            want = tuple(int(p) for p in floor.split(".")) if floor else (0, 0)
            gpus = [{**g, "availability": "NONE"} if g.get("availability") not in (None, "NONE")
                    and HOST_CUDA.get(g["id"], (99, 0)) < want else g for g in self.gpus]
            return httpx.Response(200, json={"gpus": gpus})
        return super().__call__(request)


def runpod(fake: FakeRunPod, tmp_path: Path, **env: str) -> RunPodProvider:
    return RunPodProvider(settings(tmp_path, **env), timings=TIMINGS,
                          transport=httpx.MockTransport(fake), sleep=lambda s: None)


def floors(fake: FakeRunPod) -> list[str | None]:
    return [r.url.params.get("minCudaVersion") for r in fake.seen
            if r.url.path == "/v2/catalog/gpus"]


def test_the_catalog_is_asked_with_the_higher_of_the_settings_and_the_images_cuda(
        tmp_path: Path) -> None:
    fake = FakeRunPod()
    runpod(fake, tmp_path).catalog(1)
    runpod(fake, tmp_path).catalog(1, "12.8")
    runpod(fake, tmp_path, TAILPOD_MIN_CUDA="12.4").catalog(1)
    runpod(fake, tmp_path, TAILPOD_MIN_CUDA="12.10").catalog(1, "12.8")
    assert floors(fake) == [None, "12.8", "12.4", "12.10"]


def test_the_create_asks_the_catalog_and_the_pod_for_the_same_floor(tmp_path: Path) -> None:
    fake = FakeRunPod(creates=[(201, {"id": "p1"})], pods={"p1": [pod("p1", A40, cost=0.44)]})
    runpod(fake, tmp_path, TAILPOD_MIN_CUDA="12.9").create(spec([A40], min_cuda="12.8"))
    assert floors(fake) == ["12.9"]
    assert fake.bodies[0]["gpu"]["minCudaVersion"] == "12.9"
    fake = FakeRunPod(creates=[(201, {"id": "p2"})], pods={"p2": [pod("p2", A40, cost=0.44)]})
    runpod(fake, tmp_path).create(spec([A40], min_cuda="12.8"))
    assert floors(fake) == ["12.8"] and fake.bodies[0]["gpu"]["minCudaVersion"] == "12.8"


def test_hidden_names_the_types_whose_stock_is_below_the_floor(tmp_path: Path) -> None:
    fake = CudaRunPod()
    vp = runpod(fake, tmp_path, TAILPOD_MIN_CUDA="12.8")
    assert vp.filters() == {"min_cuda": "12.8"}
    assert vp.hidden([], 1) == {A40: {"offers": 1, "cuda": 1}}  # H200 has no stock at all
    assert vp.hidden([H100, L40S], 1) == {}  # asked, and not hidden
    assert vp.hidden([A40], 2) == {A40: {"offers": 1, "cuda": 1}}
    assert [dict(r.url.params).get("count") for r in fake.seen][-2:] == ["2", "2"]
    assert runpod(CudaRunPod(), tmp_path).hidden([], 1) == {}  # no floor, nothing hidden
    assert runpod(CudaRunPod(), tmp_path).filters() == {"min_cuda": None}


def test_the_names_are_the_catalogs_ids_and_short_names(tmp_path: Path) -> None:
    fake = FakeRunPod()
    got = runpod(fake, tmp_path).gpu_names(4)
    assert got == {g["id"]: str(g["name"] or "") for g in CATALOG}
    assert dict(fake.seen[0].url.params)["count"] == "4"
    runpod(fake, tmp_path).gpu_names()
    assert dict(fake.seen[1].url.params)["count"] == "1"


FAMILY = [*CATALOG, gpu("NVIDIA H100 PCIe", "H100 PCIe", 80, 2.39, 1.99, "HIGH")]


def test_offers_of_a_family_name_its_types_or_take_its_one_type(tmp_path: Path) -> None:
    offers = runpod(FakeRunPod(gpus=FAMILY), tmp_path).offers(["H100", "SXM", "A4"], 1, None)
    assert offers[0].available is False
    assert offers[0].detail == {"error": "several GPU types", "matches": [H100,
                                                                           "NVIDIA H100 PCIe"]}
    assert offers[1].gpu_type == H100  # a family of one type ("H100 SXM") is that type
    assert offers[2].detail == {"error": "unknown GPU type"}  # "A4" is no word of "A40"


def test_a_create_of_a_family_of_several_types_rents_nothing(tmp_path: Path) -> None:
    fake = FakeRunPod(gpus=FAMILY)
    with pytest.raises(ConfigError) as caught:
        runpod(fake, tmp_path).create(spec(["H100"]))
    assert caught.value.message == ("'H100' names several RunPod GPU types: "
                                    f"'{H100}', 'NVIDIA H100 PCIe'")
    assert caught.value.hint == ("name the ones you want, in preference order (tailpod gpus "
                                 "--gpu 'H100' lists them with their prices)")
    assert fake.bodies == []


def test_every_family_of_several_types_is_named_in_the_refusal(tmp_path: Path) -> None:
    catalog = [*FAMILY, gpu("NVIDIA A40 PCIe", "A40 PCIe", 48, 0.5, 0.4, "HIGH")]
    with pytest.raises(ConfigError) as caught:
        runpod(FakeRunPod(gpus=catalog), tmp_path).create(spec(["H100", "PCIe"]))
    assert caught.value.message == (
        f"'H100' names several RunPod GPU types: '{H100}', 'NVIDIA H100 PCIe'; 'PCIe' names "
        "several RunPod GPU types: 'NVIDIA H100 PCIe', 'NVIDIA A40 PCIe'")


def test_a_type_without_a_short_name_has_none(tmp_path: Path) -> None:
    catalog = [gpu("NVIDIA B200", None, 180, 5.99, 4.99, "HIGH")]  # type: ignore[arg-type]
    assert runpod(FakeRunPod(gpus=catalog), tmp_path).gpu_names() == {"NVIDIA B200": ""}
