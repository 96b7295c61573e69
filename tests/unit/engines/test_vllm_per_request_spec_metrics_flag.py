"""vLLM is started with `--per-request-spec-decode-metrics summary` on a speculative arm where
its version certainly has the flag (vllm#48915: from 0.29.0; the CPU build 0.32.0 has it), so
each response carries its own acceptance; never on plain (vLLM refuses it without speculation),
never on a version that predates it or cannot be told (an unknown flag stops the engine)."""

from __future__ import annotations

import pytest

from tailpod.engines.base import EngineConfig, SpecArm
from tailpod.engines.versions import version_from_image
from tailpod.engines.vllm import VllmAdapter, spelled_for_image

FLAG = "--per-request-spec-decode-metrics"


def _argv(k: int, version: str | None, extra: list[str] | None = None) -> list[str]:
    cfg = EngineConfig(engine="vllm", model="/models/m",
                       spec=SpecArm(k=k, method="ngram" if k else None), version=version,
                       extra_args=extra or [])
    return VllmAdapter().launch_plan(cfg).argv


@pytest.mark.parametrize(("version", "expected"), [
    ("0.32.0", True), ("0.29.0", True), (None, True), ("2026-09-01", True),
    ("0.28.0", False), ("2026-08-01", False), ("0.26.0", False),
])
def test_a_speculative_arm_asks_for_per_request_figures_where_the_version_has_them(
    version: str | None, expected: bool
) -> None:
    argv = _argv(2, version)
    assert (FLAG in argv) == expected
    if expected:
        assert argv[argv.index(FLAG) + 1] == "summary"


def test_plain_never_gets_the_flag() -> None:
    assert FLAG not in _argv(0, "0.32.0")


def test_the_users_own_level_wins_and_is_not_doubled() -> None:
    argv = _argv(2, "0.32.0", [FLAG, "detailed"])
    assert argv.count(FLAG) == 1 and argv[argv.index(FLAG) + 1] == "detailed"
    argv = _argv(2, "0.32.0", [f"{FLAG}=detailed"])
    assert FLAG not in argv and f"{FLAG}=detailed" in argv


@pytest.mark.parametrize(("image", "flag"), [
    ("vllm/vllm-openai:v0.26.0", False), ("vllm/vllm-openai:v0.11.0@sha256:abc", False),
    ("vllm/vllm-openai:v0.32.0", True), ("vllm/vllm-openai:latest", True),
    ("vllm/vllm-openai", True), ("registry.local:5000/vllm", True),
])
def test_a_pinned_image_release_decides_the_flag_when_no_version_is_given(
    image: str, flag: bool
) -> None:
    cfg = EngineConfig(engine="vllm", model="/models/m", spec=SpecArm(k=2, method="ngram"))
    argv = VllmAdapter().launch_plan(spelled_for_image(cfg, image)).argv
    assert (FLAG in argv) == flag


def test_the_image_tag_is_read_as_a_release_only_when_it_is_one() -> None:
    assert version_from_image("vllm/vllm-openai:v0.26.0") == "v0.26.0"
    assert version_from_image("lmsysorg/sglang:v0.5.15-cu129") == "v0.5.15-cu129"
    assert version_from_image("vllm/vllm-openai:nightly") is None
    assert version_from_image("registry.local:5000/vllm") is None
    assert version_from_image(None) is None
