"""The GPU names users type, read one way by `up`, `gpus` and `check-requirements`
(tailpod/provision/gpu_names.py; the `NAME:N` form in tailpod/config.py, which TAILPOD_GPUS shares):
SkyPilot's `NAME:N`, families, near names, the CUDA floor."""

from __future__ import annotations

from pathlib import Path

import pytest

from tailpod.config import gpu_flags, load_settings, split_count
from tailpod.errors import ConfigError
from tailpod.provision.gpu_names import (
    cuda_floor,
    family_matches,
    near_names,
)
from tailpod.provision.runpod.provider import RunPodProvider


@pytest.mark.parametrize(("raw", "want"), [
    ("A40:1", ("A40", 1)), ("A40:2", ("A40", 2)), (" RTX 4090 : 8 ", ("RTX 4090", 8)),
    ("NVIDIA A40", ("NVIDIA A40", None)), ("H100", ("H100", None)),
])
def test_the_count_form_splits_the_name_from_its_count(raw: str, want: tuple) -> None:
    assert split_count(raw) == want


def test_a_zero_count_is_refused() -> None:
    with pytest.raises(ConfigError):
        split_count("A40:0")


@pytest.mark.parametrize(("gpus", "count", "want"), [
    (["A40:2", "L40S"], None, (("A40", "L40S"), 2)),
    (["A40:2", "L40S:2"], 2, (("A40", "L40S"), 2)),
    (["A40"], 4, (("A40",), 4)),
    (None, 3, (None, 3)),
    (["A40"], None, (("A40",), None)),
])
def test_the_gpu_flags_give_names_and_one_count(gpus: list[str] | None, count: int | None,
                                                want: tuple) -> None:
    assert gpu_flags(gpus, count) == want


@pytest.mark.parametrize(("gpus", "count"), [(["A40:2"], 1), (["A40:2", "L40S:4"], None)])
def test_two_counts_for_one_pod_are_refused(gpus: list[str], count: int | None) -> None:
    with pytest.raises(ConfigError) as caught:
        gpu_flags(gpus, count)
    assert caught.value.exit_code == 2


RUNPOD = {"NVIDIA H100 80GB HBM3": ("H100 SXM",), "NVIDIA H100 PCIe": ("H100 PCIe",),
          "NVIDIA A100 80GB PCIe": ("A100 PCIe",), "NVIDIA A10": ("A10",),
          "NVIDIA GeForce RTX 4090": ("RTX 4090",)}


@pytest.mark.parametrize(("wanted", "want"), [
    ("H100", ["NVIDIA H100 80GB HBM3", "NVIDIA H100 PCIe"]),
    ("h100 sxm", ["NVIDIA H100 80GB HBM3"]),  # an exact name wins over the family
    ("A10", ["NVIDIA A10"]),  # exact; never A100
    ("A100", ["NVIDIA A100 80GB PCIe"]),
    ("RTX 4090", ["NVIDIA GeForce RTX 4090"]),
    ("4090", ["NVIDIA GeForce RTX 4090"]),
    ("H200", []),
    ("", []),
])
def test_a_family_names_its_variants_by_whole_words(wanted: str, want: list[str]) -> None:
    assert family_matches(wanted, RUNPOD) == want


def test_near_names_catch_a_typo_inside_a_long_name() -> None:
    assert "NVIDIA H100 80GB HBM3" in near_names(["H1OO"], RUNPOD)
    assert near_names(["zzzz"], RUNPOD) == []


@pytest.mark.parametrize(("versions", "want"), [
    (("12.8.1", None), "12.8"), (("12.4", "12.8"), "12.8"), (("12.10", "12.8"), "12.10"),
    ((None, ""), None), (("13",), "13"),
])
def test_the_cuda_floor_is_the_highest_version_compared_as_numbers(versions: tuple,
                                                                   want: str | None) -> None:
    assert cuda_floor(*versions) == want


def test_runpods_create_refuses_a_family_of_several_types_listing_them(tmp_path: Path) -> None:
    provider = RunPodProvider(load_settings(env={"TAILPOD_HOME": str(tmp_path),
                                                 "RUNPOD_API_KEY": "rp_test_key_000001"},
                                            dotenv_path=tmp_path / "none.env"))
    catalog = {gpu_id: {"id": gpu_id, "name": other[0]} for gpu_id, other in RUNPOD.items()}
    with pytest.raises(ConfigError) as caught:
        provider._resolve_all(["H100"], catalog)
    assert "NVIDIA H100 80GB HBM3" in caught.value.message
    assert "NVIDIA H100 PCIe" in caught.value.message
    # a family of one type is that type
    assert provider._resolve_all(["4090", "A100"], catalog) == ["NVIDIA GeForce RTX 4090",
                                                                "NVIDIA A100 80GB PCIe"]


def test_the_refusals_say_which_values_clash_and_how_to_give_the_count() -> None:
    with pytest.raises(ConfigError) as caught:
        split_count("A40:0")
    assert caught.value.message == "--gpu 'A40:0': the count after ':' must be at least 1"
    with pytest.raises(ConfigError) as caught:
        gpu_flags(["L40S", "A40:2"], 1)
    assert caught.value.message == "--gpu 'A40:2' asks for 2 GPU(s) but --gpu-count is 1"
    assert caught.value.hint == "give the count once: --gpu NAME:N or --gpu-count N"
    with pytest.raises(ConfigError) as caught:
        gpu_flags(["A40:2", "L40S:4", "H100:2"], None)
    assert caught.value.message == ("the --gpu values ask for different counts ('A40:2', "
                                    "'L40S:4'); a pod has one")
    assert caught.value.hint == "use one count for every --gpu (NAME:N), or --gpu-count N"


def test_an_exact_name_is_that_one_type_even_where_a_family_would_take_more() -> None:
    names = {"H100 SXM": (), "H100 SXM NVL": ()}
    assert family_matches("h100 SXM", names) == ["H100 SXM"]
    assert family_matches("SXM", names) == ["H100 SXM", "H100 SXM NVL"]
    # two ids sharing a name: the first, never both
    assert family_matches("a40", {"X1": ("A40",), "X2": ("A40",)}) == ["X1"]


def test_near_names_are_at_most_three_a_name_and_every_word_match_counts() -> None:
    assert len(near_names(["A40"], {"A41": (), "A42": (), "A43": (), "A44": ()})) == 3
    assert near_names(["H1OO"], {"NVIDIA H100": (), "NVIDIA H10": ()}) == ["NVIDIA H10",
                                                                          "NVIDIA H100"]


def test_a_blank_cuda_version_is_no_floor() -> None:
    assert cuda_floor("  ", None) is None


@pytest.mark.parametrize("value", ["A40:-1", "A40:nan", "A40:1.5", "A40:"])
def test_a_count_that_is_not_a_whole_number_is_refused_not_taken_as_a_name(value: str) -> None:
    """`A40:-1` was read as a GPU named 'A40:-1' and refused only later, as an unknown card."""
    with pytest.raises(ConfigError, match="must be a whole number of GPUs, at least 1"):
        split_count(value)
