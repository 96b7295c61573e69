"""The perturbation helper the engine test relies on."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from tailpod.engines.tiny_checkpoint import (
    build_checkpoint,
    to_bf16_bits,
    write_safetensors_bf16,
)
from tests.unit.measure.perturb import perturbed_copy, read_safetensors_bf16, round_to_grid


def test_rounding_uses_the_grid_and_keeps_exact_values() -> None:
    w = np.random.default_rng(0).normal(0, 0.02, (64, 64)).astype(np.float32)
    for bits in (3, 6):
        r = round_to_grid(w, bits)
        assert len(np.unique(r)) <= 2 ** bits - 1
        assert np.abs(r - w).max() <= np.abs(w).max() / (2 ** (bits - 1) - 1) / 2 + 1e-9
    assert np.array_equal(round_to_grid(np.ones(8, np.float32), 3), np.ones(8, np.float32))
    err3 = np.abs(round_to_grid(w, 3) - w).mean()
    assert err3 > 4 * np.abs(round_to_grid(w, 6) - w).mean() > 0


def test_copies_read_back_through_the_builder_format(tmp_path: Path) -> None:
    ref = build_checkpoint(tmp_path / "ref", "draft")
    same = perturbed_copy(ref, tmp_path / "same", None)
    q3 = perturbed_copy(ref, tmp_path / "q3", 3)
    assert (same / "model.safetensors").read_bytes() == (ref / "model.safetensors").read_bytes()
    original = read_safetensors_bf16(ref / "model.safetensors")
    rounded = read_safetensors_bf16(q3 / "model.safetensors")
    assert set(original) == set(rounded) and (q3 / "tokenizer.json").is_file()
    emb = "model.embed_tokens.weight"
    assert not np.array_equal(original[emb], rounded[emb])
    assert np.array_equal(original["model.norm.weight"], rounded["model.norm.weight"])


def test_the_reader_returns_exactly_what_the_writer_wrote(tmp_path: Path) -> None:
    x = np.random.default_rng(1).normal(0, 1, (5, 7)).astype(np.float32)
    write_safetensors_bf16(tmp_path / "t.safetensors", {"a": x, "b": -x[:2]})
    back = read_safetensors_bf16(tmp_path / "t.safetensors")
    as_bf16 = (to_bf16_bits(x).astype(np.uint32) << 16).view(np.float32)
    assert np.array_equal(back["a"], as_bf16) and back["a"].shape == (5, 7)
    assert np.array_equal(back["b"], -as_bf16[:2])
