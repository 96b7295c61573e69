"""Perturbed copies of a tiny checkpoint: its bf16 weights rounded to a coarse grid and back.

Reads the safetensors file the tiny-checkpoint builder writes (8-byte little-endian header length,
JSON header, raw little-endian data) and rewrites it with the builder's own bf16 writer, so the
copy differs from the original only by the rounding.
"""

from __future__ import annotations

import json
import shutil
import struct
from pathlib import Path

import numpy as np

from tailpod.engines.tiny_checkpoint import write_safetensors_bf16


def read_safetensors_bf16(path: Path) -> dict[str, np.ndarray]:
    raw = Path(path).read_bytes()
    (length,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8 : 8 + length])
    data = raw[8 + length :]
    out = {}
    for name, meta in header.items():
        if name == "__metadata__":
            continue
        if meta["dtype"] != "BF16":
            raise ValueError(f"{name}: {meta['dtype']} is not BF16")
        start, end = meta["data_offsets"]
        bits = np.frombuffer(data[start:end], dtype="<u2").astype(np.uint32) << 16
        out[name] = bits.view(np.float32).reshape(meta["shape"])
    return out


def round_to_grid(weights: np.ndarray, bits: int) -> np.ndarray:
    """Symmetric per-tensor rounding to 2**(bits-1)-1 levels each side of zero (int-N-like)."""
    levels = 2 ** (bits - 1) - 1
    scale = float(np.abs(weights).max()) / levels
    if scale == 0.0:
        return weights.copy()
    return (np.round(weights / scale) * scale).astype(np.float32)


def perturbed_copy(src: Path, dst: Path, bits: int | None) -> Path:
    """A copy of checkpoint `src` at `dst`; with `bits`, every tensor rounded to that grid."""
    shutil.copytree(src, dst)
    if bits is not None:
        tensors = read_safetensors_bf16(src / "model.safetensors")
        write_safetensors_bf16(
            dst / "model.safetensors", {k: round_to_grid(v, bits) for k, v in tensors.items()}
        )
    return dst
