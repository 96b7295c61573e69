from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np
import pytest

from tailpod.engines.tiny_checkpoint import build_checkpoint, is_checkpoint, to_bf16_bits


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_build_is_deterministic_and_loadable(tmp_path: Path,
                                            tiny_models: dict[str, Path]) -> None:
    # The session's target checkpoint (seed 0) against a fresh build: one build, not two.
    a = tiny_models["target"]
    b = build_checkpoint(tmp_path / "b", "target", seed=0)
    assert is_checkpoint(a)
    for name in ("model.safetensors", "tokenizer.json", "config.json"):
        assert digest(a / name) == digest(b / name)
    from safetensors.numpy import load_file  # reads the header our writer produced

    with pytest.raises(TypeError):
        load_file(
            str(a / "model.safetensors")
        )  # numpy has no bf16: the loader must refuse, not misread
    header_len = int.from_bytes((a / "model.safetensors").read_bytes()[:8], "little")
    header = json.loads((a / "model.safetensors").read_bytes()[8 : 8 + header_len])
    assert header["model.embed_tokens.weight"]["dtype"] == "BF16"
    config = json.loads((a / "config.json").read_text())
    assert header["model.embed_tokens.weight"]["shape"] == [
        config["vocab_size"],
        config["hidden_size"],
    ]
    assert "chat_template" in json.loads((a / "tokenizer_config.json").read_text())


def test_mimo_has_an_mtp_layer(tiny_models: dict[str, Path]) -> None:
    d = tiny_models["mimo"]
    raw = (d / "model.safetensors").read_bytes()
    header = json.loads(raw[8 : 8 + int.from_bytes(raw[:8], "little")])
    config = json.loads((d / "config.json").read_text())
    assert (
        config["architectures"] == ["MiMoForCausalLM"] and config["num_nextn_predict_layers"] == 1
    )
    assert "model.mtp_layers.0.input_proj.weight" in header
    assert header["model.mtp_layers.0.input_proj.weight"]["shape"] == [256, 512]


def test_unknown_kind(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="unknown checkpoint kind"):
        build_checkpoint(tmp_path, "huge")


def test_bf16_rounding_is_round_to_nearest_even() -> None:
    values = np.array([1.0, -2.0, 1.00390625, 1.01171875, 3.14159265], dtype=np.float32)
    bits = to_bf16_bits(values)
    back = (bits.astype(np.uint32) << 16).view(np.float32)
    assert back[0] == 1.0 and back[1] == -2.0
    assert back[2] == 1.0  # exactly half-way rounds to even (down)
    assert back[3] == 1.015625  # half-way rounds to even (up)
    assert abs(back[4] - 3.140625) < 1e-6
    assert not (np.isnan(values) | np.isinf(values)).any()


def test_is_checkpoint_rejects_plain_dirs(tmp_path: Path) -> None:
    assert not is_checkpoint(tmp_path)
    (tmp_path / "config.json").write_text("{}")
    assert not is_checkpoint(tmp_path)
