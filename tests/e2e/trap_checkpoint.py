"""A tiny checkpoint that carries the MTP ignore-list trap and that the CPU vLLM engine can serve.

The `mimo` tiny checkpoint (tailpod/engines/tiny_checkpoint.py) with its trunk's linear layers
quantized to int8 per output channel (compressed-tensors W8A8, dynamic per-token activations,
which the CPU build of vLLM runs) while the MTP layer stays bfloat16 and the quantization ignore
list names only `lm_head`: the layout of real checkpoints whose quantizer left the MTP head out.
"""

from __future__ import annotations

import json
import re
import struct
from pathlib import Path

import numpy as np

from tailpod.engines.tiny_checkpoint import build_checkpoint, to_bf16_bits

_TRUNK_LINEAR = re.compile(r"^model\.layers\.\d+\.(self_attn|mlp)\.\w+_proj\.weight$")

QUANTIZATION_CONFIG = {
    "quant_method": "compressed-tensors",
    "format": "int-quantized",
    "quantization_status": "compressed",
    "config_groups": {
        "group_0": {
            "targets": ["Linear"],
            "weights": {"num_bits": 8, "type": "int", "symmetric": True, "strategy": "channel",
                        "dynamic": False},
            "input_activations": {"num_bits": 8, "type": "int", "symmetric": True,
                                  "strategy": "token", "dynamic": True},
        }
    },
    "ignore": ["lm_head"],
}  # fmt: skip


def _read_bf16(path: Path) -> dict[str, np.ndarray]:
    raw = path.read_bytes()
    (size,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8 : 8 + size])
    data = raw[8 + size :]
    out = {}
    for name, meta in header.items():
        if name == "__metadata__":
            continue
        start, end = meta["data_offsets"]
        bits = np.frombuffer(data[start:end], dtype=np.uint16).astype(np.uint32) << 16
        out[name] = bits.view(np.float32).reshape(meta["shape"])
    return out


def _write(path: Path, tensors: dict[str, tuple[str, bytes, list[int]]]) -> None:
    header: dict[str, object] = {"__metadata__": {"format": "pt"}}
    offset, blobs = 0, []
    for name in sorted(tensors):
        dtype, blob, shape = tensors[name]
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + len(blob)]}
        blobs.append(blob)
        offset += len(blob)
    raw = json.dumps(header, separators=(",", ":")).encode()
    raw += b" " * (-len(raw) % 8)
    path.write_bytes(struct.pack("<Q", len(raw)) + raw + b"".join(blobs))


def build_trap_checkpoint(out_dir: Path) -> Path:
    """Write the trapped checkpoint into `out_dir` and return it."""
    out_dir = build_checkpoint(Path(out_dir), "mimo")
    weights = out_dir / "model.safetensors"
    tensors: dict[str, tuple[str, bytes, list[int]]] = {}
    for name, value in _read_bf16(weights).items():
        if _TRUNK_LINEAR.match(name):
            scale = np.maximum(np.abs(value).max(axis=1, keepdims=True), 1e-8) / 127.0
            quantized = np.clip(np.round(value / scale), -127, 127).astype(np.int8)
            tensors[name] = ("I8", quantized.tobytes(), list(quantized.shape))
            scale32 = scale.astype(np.float32)
            tensors[name[: -len("weight")] + "weight_scale"] = (
                "F32", scale32.tobytes(), list(scale32.shape),
            )  # fmt: skip
        else:
            tensors[name] = ("BF16", to_bf16_bits(value).tobytes(), list(value.shape))
    _write(weights, tensors)
    config = json.loads((out_dir / "config.json").read_text())
    config["quantization_config"] = QUANTIZATION_CONFIG
    (out_dir / "config.json").write_text(json.dumps(config, indent=2))
    return out_dir
