"""Build a tiny, real checkpoint offline: a byte-level BPE tokenizer and a small model vLLM serves.

Nothing can be downloaded on the machines tailpod is tested on, so the demo and the tests make their
own model. Everything is deterministic for a given Python version: the tokenizer is trained on the
standard library's own source files, and weights come from a seeded generator.

Three kinds:
- ``target``: a Qwen3-style decoder (the model being served);
- ``draft``: a smaller Qwen3 sharing the tokenizer (a draft model for speculative decoding);
- ``mimo``: a Qwen2 backbone saved as ``MiMoForCausalLM`` with one MTP layer under
  ``model.mtp_layers.0.*``, the layout vLLM's ``mtp`` method loads.

Two sizes. ``tiny`` (the default, a few MB) is what the CPU engine serves in the demo and the
tests. ``gpu`` gives every kind a real hidden size (2048, 8 layers for target and mimo, 1 for the
draft; about 0.5 B parameters), so a GPU, not the host, bounds the step time, and builds them to
decide each next token by a wide margin, as benchmarks/gguf_models.py does for llama.cpp: fully
random weights at this size put greedy decoding on near-ties, where speculative decoding's batched
verification flips an argmax and the token-identity gate rightly voids the arm. At ``gpu`` size:

- each block's output projections (``o_proj``, ``down_proj``) are scaled by ``BLOCK_SCALE``, so
  the residual stream stays close to the current token's embedding E[i] while every block still
  runs at full shape;
- the head is untied: its row for token walk[i] is E[i], for one permutation ``walk`` of the
  vocabulary shared by every kind of the same seed, so greedy decoding walks i -> walk[i];
- the mimo MTP layer passes the next token's embedding through, so it drafts walk[walk[i]], the
  target's own next-but-one token;
- the draft shares the target's embedding (same seed, same hidden size) and its walk, except on a
  ``draft_disagree`` fraction of the tokens, whose destinations are shuffled among themselves: it
  proposes the target's next token about (1 - fraction) of the time.

Weights are written as bfloat16 safetensors by a small writer here, because numpy has no bfloat16
and torch is not a dependency of tailpod itself (it lives in the engine's environment).
"""

from __future__ import annotations

import json
import struct
import sysconfig
from dataclasses import dataclass
from pathlib import Path

import numpy as np

SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)
MAX_POSITIONS = 2048


@dataclass(frozen=True)
class Shape:
    hidden: int
    intermediate: int
    layers: int
    heads: int
    kv_heads: int
    head_dim: int


SHAPES = {
    "target": Shape(hidden=256, intermediate=512, layers=4, heads=4, kv_heads=2, head_dim=64),
    "draft": Shape(hidden=128, intermediate=256, layers=2, heads=2, kv_heads=1, head_dim=64),
    "mimo": Shape(hidden=256, intermediate=512, layers=4, heads=4, kv_heads=2, head_dim=64),
}
KINDS = tuple(SHAPES)
# The draft shares the target's hidden size, so that it shares its embedding and its walk.
GPU_SHAPES = {
    "target": Shape(hidden=2048, intermediate=5632, layers=8, heads=16, kv_heads=8, head_dim=128),
    "draft": Shape(hidden=2048, intermediate=5632, layers=1, heads=16, kv_heads=8, head_dim=128),
    "mimo": Shape(hidden=2048, intermediate=5632, layers=8, heads=16, kv_heads=8, head_dim=128),
}
SIZES = {"tiny": SHAPES, "gpu": GPU_SHAPES}
# Block outputs at 1% of a random projection's: with hidden 2048 the residual stays within a few
# percent of E[i], far inside the head's margin (about 40 logits against about 3 for the next best).
BLOCK_SCALE = 0.01
DRAFT_DISAGREE = 0.3


def training_corpus(max_files: int = 160, max_bytes: int = 40_000) -> list[str]:
    """Source text that ships with every CPython: the standard library's top-level modules."""
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    texts = []
    for path in sorted(stdlib.glob("*.py"))[:max_files]:
        try:
            texts.append(path.read_text(encoding="utf-8", errors="replace")[:max_bytes])
        except OSError:
            continue
    if not texts:
        raise RuntimeError(f"no training text found under {stdlib}")
    return texts


def build_tokenizer(out_dir: Path, vocab_size: int = 4096) -> int:
    """Train and save a byte-level BPE tokenizer with a ChatML template; returns the vocab size."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(training_corpus(), trainer=trainer)
    out_dir.mkdir(parents=True, exist_ok=True)
    tokenizer.save(str(out_dir / "tokenizer.json"))
    (out_dir / "tokenizer_config.json").write_text(
        json.dumps(
            {
                "tokenizer_class": "PreTrainedTokenizerFast",
                "bos_token": None,
                "eos_token": "<|im_end|>",
                "pad_token": "<|endoftext|>",
                "unk_token": None,
                "model_max_length": MAX_POSITIONS,
                "chat_template": CHAT_TEMPLATE,
                "clean_up_tokenization_spaces": False,
            },
            indent=2,
        )
    )
    (out_dir / "special_tokens_map.json").write_text(
        json.dumps({"eos_token": "<|im_end|>", "pad_token": "<|endoftext|>"}, indent=2)
    )
    return int(tokenizer.get_vocab_size())


def to_bf16_bits(array: np.ndarray) -> np.ndarray:
    """Round float32 to bfloat16 (round-to-nearest-even) and return the raw 16-bit patterns."""
    bits = np.ascontiguousarray(array, dtype=np.float32).view(np.uint32)
    rounding = ((bits >> 16) & 1) + 0x7FFF
    return ((bits + rounding) >> 16).astype(np.uint16)


def write_safetensors_bf16(path: Path, tensors: dict[str, np.ndarray]) -> None:
    header: dict[str, object] = {"__metadata__": {"format": "pt"}}
    blobs = []
    offset = 0
    for name in sorted(tensors):
        data = to_bf16_bits(tensors[name]).tobytes()
        header[name] = {
            "dtype": "BF16",
            "shape": list(tensors[name].shape),
            "data_offsets": [offset, offset + len(data)],
        }
        blobs.append(data)
        offset += len(data)
    raw = json.dumps(header, separators=(",", ":")).encode()
    raw += b" " * (-len(raw) % 8)  # the format wants the data section 8-byte aligned
    with open(path, "wb") as fh:
        fh.write(struct.pack("<Q", len(raw)))
        fh.write(raw)
        for blob in blobs:
            fh.write(blob)


def _decoder_layer(
    rng: np.random.Generator, prefix: str, s: Shape, std: float, qwen2_bias: bool,
    out_scale: float = 1.0,
) -> dict[str, np.ndarray]:
    def w(*shape: int, scale: float = 1.0) -> np.ndarray:
        return rng.normal(0.0, std * scale, size=shape).astype(np.float32)

    t = {
        f"{prefix}.input_layernorm.weight": np.ones(s.hidden, np.float32),
        f"{prefix}.post_attention_layernorm.weight": np.ones(s.hidden, np.float32),
        f"{prefix}.self_attn.q_proj.weight": w(s.heads * s.head_dim, s.hidden),
        f"{prefix}.self_attn.k_proj.weight": w(s.kv_heads * s.head_dim, s.hidden),
        f"{prefix}.self_attn.v_proj.weight": w(s.kv_heads * s.head_dim, s.hidden),
        f"{prefix}.self_attn.o_proj.weight": w(s.hidden, s.heads * s.head_dim, scale=out_scale),
        f"{prefix}.mlp.gate_proj.weight": w(s.intermediate, s.hidden),
        f"{prefix}.mlp.up_proj.weight": w(s.intermediate, s.hidden),
        f"{prefix}.mlp.down_proj.weight": w(s.hidden, s.intermediate, scale=out_scale),
    }
    if qwen2_bias:
        t[f"{prefix}.self_attn.q_proj.bias"] = np.zeros(s.heads * s.head_dim, np.float32)
        t[f"{prefix}.self_attn.k_proj.bias"] = np.zeros(s.kv_heads * s.head_dim, np.float32)
        t[f"{prefix}.self_attn.v_proj.bias"] = np.zeros(s.kv_heads * s.head_dim, np.float32)
    else:
        t[f"{prefix}.self_attn.q_norm.weight"] = np.ones(s.head_dim, np.float32)
        t[f"{prefix}.self_attn.k_norm.weight"] = np.ones(s.head_dim, np.float32)
    return t


def next_token_walk(vocab: int, seed: int, disagree: float = 0.0) -> np.ndarray:
    """walk[i]: the token a ``gpu``-size model emits after token i. The target's (disagree 0) is one
    permutation of the vocabulary; a draft's shuffles the destinations of a ``disagree`` fraction of
    the tokens among themselves. Its own generators, so it does not depend on the weights drawn."""
    walk = np.random.default_rng([seed, 1]).permutation(vocab)
    if disagree > 0:
        chosen = np.random.default_rng([seed, 2]).permutation(vocab)[: int(round(disagree * vocab))]
        walk[chosen] = walk[chosen][np.random.default_rng([seed, 3]).permutation(len(chosen))]
    return walk


def _config(kind: str, s: Shape, vocab: int, eos_id: int, pad_id: int) -> dict[str, object]:
    common: dict[str, object] = {
        "vocab_size": vocab,
        "hidden_size": s.hidden,
        "intermediate_size": s.intermediate,
        "num_hidden_layers": s.layers,
        "num_attention_heads": s.heads,
        "num_key_value_heads": s.kv_heads,
        "head_dim": s.head_dim,
        "hidden_act": "silu",
        "max_position_embeddings": MAX_POSITIONS,
        "rms_norm_eps": 1e-6,
        "rope_theta": 10000.0,
        "tie_word_embeddings": True,
        "torch_dtype": "bfloat16",
        "bos_token_id": eos_id,
        "eos_token_id": eos_id,
        "pad_token_id": pad_id,
        "use_cache": True,
        "attention_bias": kind == "mimo",
    }
    if kind == "mimo":
        return {
            **common,
            "architectures": ["MiMoForCausalLM"],
            "model_type": "qwen2",
            "num_nextn_predict_layers": 1,
            "use_sliding_window": False,
        }
    return {**common, "architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3"}


def build_checkpoint(
    out_dir: Path, kind: str = "target", seed: int = 0, std: float = 0.02, size: str = "tiny",
    draft_disagree: float = DRAFT_DISAGREE,
) -> Path:
    """Write tokenizer, config, generation config and bf16 weights for `kind` into `out_dir`."""
    if kind not in SHAPES:
        raise ValueError(f"unknown checkpoint kind {kind!r}; choose one of {', '.join(KINDS)}")
    if size not in SIZES:
        raise ValueError(f"unknown checkpoint size {size!r}; choose one of {', '.join(SIZES)}")
    if not 0.0 <= draft_disagree <= 1.0:
        raise ValueError(f"draft_disagree must be within [0, 1], not {draft_disagree}")
    walked = size == "gpu"
    out_dir = Path(out_dir)
    vocab = build_tokenizer(out_dir)
    tokenizer_vocab = json.loads((out_dir / "tokenizer.json").read_text())["added_tokens"]
    ids = {t["content"]: t["id"] for t in tokenizer_vocab}
    eos_id, pad_id = ids["<|im_end|>"], ids["<|endoftext|>"]
    s = SIZES[size][kind]
    out_scale = BLOCK_SCALE if walked else 1.0
    rng = np.random.default_rng(seed)
    tensors: dict[str, np.ndarray] = {
        "model.embed_tokens.weight": rng.normal(0.0, std, size=(vocab, s.hidden)).astype(
            np.float32
        ),
        "model.norm.weight": np.ones(s.hidden, np.float32),
    }
    for i in range(s.layers):
        tensors.update(
            _decoder_layer(rng, f"model.layers.{i}", s, std, kind == "mimo", out_scale)
        )
    if kind == "mimo":
        # One MTP layer. input_proj = [I, 0] with zeroed o_proj/down_proj makes the head a
        # pass-through of the next token's embedding: it drafts plausibly often, so both the
        # accept and the reject path of speculative decoding get exercised.
        mtp = "model.mtp_layers.0"
        tensors.update(_decoder_layer(rng, mtp, s, std, qwen2_bias=True))
        tensors[f"{mtp}.self_attn.o_proj.weight"][:] = 0.0
        tensors[f"{mtp}.mlp.down_proj.weight"][:] = 0.0
        tensors[f"{mtp}.token_layernorm.weight"] = np.ones(s.hidden, np.float32)
        tensors[f"{mtp}.hidden_layernorm.weight"] = np.ones(s.hidden, np.float32)
        tensors[f"{mtp}.final_layernorm.weight"] = np.ones(s.hidden, np.float32)
        proj = np.zeros((s.hidden, 2 * s.hidden), np.float32)
        proj[:, : s.hidden] = np.eye(s.hidden, dtype=np.float32)
        tensors[f"{mtp}.input_proj.weight"] = proj
    config = _config(kind, s, vocab, eos_id, pad_id)
    if walked:
        walk = next_token_walk(vocab, seed, draft_disagree if kind == "draft" else 0.0)
        head = np.empty_like(tensors["model.embed_tokens.weight"])
        head[walk] = tensors["model.embed_tokens.weight"]  # row walk[i] is E[i]
        tensors["lm_head.weight"] = head
        config["tie_word_embeddings"] = False
    write_safetensors_bf16(out_dir / "model.safetensors", tensors)
    (out_dir / "config.json").write_text(json.dumps(config, indent=2))
    (out_dir / "generation_config.json").write_text(
        json.dumps({"eos_token_id": eos_id, "pad_token_id": pad_id, "do_sample": False}, indent=2)
    )
    (out_dir / "tailpod-checkpoint.json").write_text(
        json.dumps(
            {"builder": "tailpod.engines.tiny_checkpoint", "kind": kind, "seed": seed}
            | ({"size": size} if walked else {})
            | ({"draft_disagree": draft_disagree} if walked and kind == "draft" else {})
        )
    )
    return out_dir


def is_checkpoint(path: Path) -> bool:
    """A directory with a config and at least one safetensors file."""
    path = Path(path)
    return (path / "config.json").is_file() and any(path.glob("*.safetensors"))
