"""Generate tiny checkpoints (config + valid safetensors with 1-element-ish tensors) in every MTP
naming and quantization layout the inspector must recognise."""

from __future__ import annotations

import json
import struct
from pathlib import Path
from typing import Any

_DTYPE_BYTES = {"BF16": 2, "F16": 2, "F32": 4, "F8_E4M3": 1, "U8": 1, "I32": 4}


def write_safetensors(path: Path, tensors: dict[str, tuple[str, tuple[int, ...]]]) -> int:
    """A real safetensors file (zero-filled data). Returns the data byte count."""
    header: dict[str, Any] = {"__metadata__": {"format": "pt"}}
    offset = 0
    for name, (dtype, shape) in tensors.items():
        count = 1
        for dim in shape:
            count *= dim
        size = count * _DTYPE_BYTES[dtype]
        header[name] = {
            "dtype": dtype,
            "shape": list(shape),
            "data_offsets": [offset, offset + size],
        }
        offset += size
    raw = json.dumps(header).encode()
    raw += b" " * (-len(raw) % 8)
    path.write_bytes(struct.pack("<Q", len(raw)) + raw + b"\0" * offset)
    return offset


def linear(
    prefix: str, dtype: str = "BF16", quant: str | None = None
) -> dict[str, tuple[str, tuple[int, ...]]]:
    """One linear module's tensors, unquantized or with the companions of a quant format."""
    if quant is None:
        return {f"{prefix}.weight": (dtype, (2, 2))}
    if quant == "fp8":
        return {
            f"{prefix}.weight": ("F8_E4M3", (2, 2)),
            f"{prefix}.weight_scale_inv": ("F32", (1, 1)),
        }
    if quant == "nvfp4":
        return {
            f"{prefix}.weight": ("U8", (2, 1)),
            f"{prefix}.weight_scale": ("F8_E4M3", (2, 1)),
            f"{prefix}.weight_scale_2": ("F32", ()),
            f"{prefix}.input_scale": ("F32", ()),
        }
    if quant == "compressed":
        return {
            f"{prefix}.weight_packed": ("I32", (2, 1)),
            f"{prefix}.weight_scale": ("BF16", (2, 1)),
            f"{prefix}.weight_shape": ("I32", (2,)),
        }
    raise ValueError(quant)


def norm(prefix: str) -> dict[str, tuple[str, tuple[int, ...]]]:
    return {f"{prefix}.weight": ("BF16", (2,))}


def decoder_layer(prefix: str, quant: str | None) -> dict[str, tuple[str, tuple[int, ...]]]:
    out: dict[str, tuple[str, tuple[int, ...]]] = {}
    for proj in ("q_proj", "k_proj", "v_proj", "o_proj"):
        out.update(linear(f"{prefix}.self_attn.{proj}", quant=quant))
    for proj in ("gate_proj", "up_proj", "down_proj"):
        out.update(linear(f"{prefix}.mlp.{proj}", quant=quant))
    out.update(norm(f"{prefix}.input_layernorm"))
    out.update(norm(f"{prefix}.post_attention_layernorm"))
    return out


def trunk(
    layers: int, quant: str | None, base: str = "model"
) -> dict[str, tuple[str, tuple[int, ...]]]:
    out: dict[str, tuple[str, tuple[int, ...]]] = {f"{base}.embed_tokens.weight": ("BF16", (4, 2))}
    for i in range(layers):
        out.update(decoder_layer(f"{base}.layers.{i}", quant))
    out.update(norm(f"{base}.norm"))
    out["lm_head.weight"] = ("BF16", (4, 2))
    return out


def mtp_tensors(
    naming: str, layers: int, quant: str | None
) -> dict[str, tuple[str, tuple[int, ...]]]:
    """The MTP head in the naming a family uses; `quant` None keeps it BF16 (the trap's shape)."""
    out: dict[str, tuple[str, tuple[int, ...]]] = {}
    if naming in ("deepseek", "glm"):
        root = f"model.layers.{layers}"
        out.update(decoder_layer(root, quant))
        out.update(norm(f"{root}.enorm"))
        out.update(norm(f"{root}.hnorm"))
        out.update(linear(f"{root}.eh_proj", quant=quant))
        out.update(norm(f"{root}.shared_head.norm"))
        out.update(linear(f"{root}.shared_head.head", quant=quant))
    elif naming == "qwen":
        out.update(linear("mtp.fc", quant=quant))
        out.update(norm("mtp.pre_fc_norm_embedding"))
        out.update(norm("mtp.pre_fc_norm_hidden"))
        out.update(norm("mtp.norm"))
        out.update(decoder_layer("mtp.layers.0", quant))
    elif naming == "mimo":
        root = "model.mtp_layers.0"
        out.update(norm(f"{root}.token_layernorm"))
        out.update(norm(f"{root}.hidden_layernorm"))
        out.update(linear(f"{root}.input_proj", quant=quant))
        out.update(norm(f"{root}.final_layernorm"))
        out.update(decoder_layer(root, quant))
    else:
        raise ValueError(naming)
    return out


def build(
    root: Path,
    *,
    architecture: str,
    naming: str | None,
    layers: int = 2,
    trunk_quant: str | None = None,
    mtp_quant: str | None = None,
    quantization_config: dict[str, Any] | None = None,
    hf_quant_config: dict[str, Any] | None = None,
    sharded: bool = True,
    separate_mtp_file: bool = False,
    config_extra: dict[str, Any] | None = None,
    nested_text_config: bool = False,
) -> Path:
    """Write a checkpoint directory and return it."""
    root.mkdir(parents=True, exist_ok=True)
    config: dict[str, Any] = {"architectures": [architecture], "model_type": architecture.lower()}
    if nested_text_config:
        config["text_config"] = {"num_hidden_layers": layers, **(config_extra or {})}
    else:
        config["num_hidden_layers"] = layers
        config.update(config_extra or {})
    if quantization_config is not None:
        config["quantization_config"] = quantization_config
    (root / "config.json").write_text(json.dumps(config))
    if hf_quant_config is not None:
        (root / "hf_quant_config.json").write_text(json.dumps(hf_quant_config))
    base = "model.language_model" if nested_text_config else "model"
    main = trunk(layers, trunk_quant, base=base)
    head = mtp_tensors(naming, layers, mtp_quant) if naming else {}
    files: dict[str, dict[str, tuple[str, tuple[int, ...]]]] = {}
    if separate_mtp_file:
        files["model.safetensors"] = main
        files["mtp.safetensors"] = head
    elif sharded:
        names = list(main)
        half = len(names) // 2
        files["model-00001-of-00002.safetensors"] = {n: main[n] for n in names[:half]}
        files["model-00002-of-00002.safetensors"] = {**{n: main[n] for n in names[half:]}, **head}
    else:
        files["model.safetensors"] = {**main, **head}
    total = 0
    weight_map: dict[str, str] = {}
    for name, tensors in files.items():
        total += write_safetensors(root / name, tensors)
        weight_map.update({t: name for t in tensors})
    if len(files) > 1:
        index = {"metadata": {"total_size": total}, "weight_map": weight_map}
        (root / "model.safetensors.index.json").write_text(json.dumps(index))
    return root
