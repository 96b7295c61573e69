"""The local provider serves a patched config when the MTP ignore-list trap is present."""

from __future__ import annotations

import json
from pathlib import Path

from tailpod.config import load_settings
from tailpod.engines.base import EngineConfig, SpecArm
from tailpod.engines.checkpoint import inspect_checkpoint
from tailpod.pods.local import work_around_mtp_trap
from tests.unit.engines.mtp_ckpt_builder import build


def settings_for(tmp_path: Path):  # type: ignore[no-untyped-def]
    return load_settings(overrides={"home": tmp_path / "home"}, env={}, dotenv_path=tmp_path / "none")


def test_trapped_checkpoint_is_served_from_a_patched_copy(tmp_path: Path) -> None:
    ckpt = build(
        tmp_path / "c",
        architecture="Qwen3NextForCausalLM",
        naming="qwen",
        trunk_quant="nvfp4",
        quantization_config={"quant_method": "modelopt", "quant_algo": "NVFP4", "ignore": ["lm_head"]},
    )
    assert inspect_checkpoint(str(ckpt)).has_trap
    cfg = EngineConfig(engine="vllm", model=str(ckpt), spec=SpecArm(k=2, method="mtp"))
    patched_cfg, added = work_around_mtp_trap(settings_for(tmp_path), cfg, "tp-x")
    assert added and patched_cfg.model != cfg.model
    assert not inspect_checkpoint(patched_cfg.model).has_trap
    assert json.loads((Path(patched_cfg.model) / "tailpod-mtp-ignore-patch.json").read_text())["added"] == added
    # A relaunch of the same arm patches afresh instead of tripping over the earlier copy.
    again, added_again = work_around_mtp_trap(settings_for(tmp_path), cfg, "tp-x")
    assert again.model == patched_cfg.model and added_again == added


def test_clean_checkpoint_is_served_as_is(tmp_path: Path) -> None:
    ckpt = build(tmp_path / "c", architecture="MiMoForCausalLM", naming="mimo")
    cfg = EngineConfig(engine="vllm", model=str(ckpt))
    assert work_around_mtp_trap(settings_for(tmp_path), cfg, "tp-y") == (cfg, [])
