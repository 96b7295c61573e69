"""Build a tiny, real checkpoint offline: a byte-level BPE tokenizer and a small model vLLM serves.

Nothing can be downloaded on the machines tailpod is tested on, so the demo and the tests make their
own model. Everything is deterministic for a given Python version: the tokenizer is trained on the
standard library's own source files, and weights come from a seeded generator.

Three kinds:
- ``target``: a Qwen3-style decoder (the model being served);
- ``draft``: a smaller Qwen3 sharing the tokenizer (a draft model for speculative decoding);
- ``mimo``: a Qwen2 backbone saved as ``MiMoForCausalLM`` with one MTP layer under
  ``model.mtp_layers.0.*``, the layout vLLM's ``mtp`` method loads.

Three sizes. ``tiny`` (the default, a few MB) is what the CPU engine serves in the demo and the
tests. ``gpu8b`` is Qwen3-8B's shape (hidden 4096, 36 layers, GQA 32/8; about 7 B parameters, 14 GB
in bf16) with the ``gpu`` construction below: a decode step reads every weight, so the card's memory
bandwidth sets the pace; it is never carried but built where it runs, from the seed, in parallel
(one generator per tensor), and the weights' sha256 lands in ``tailpod-checkpoint.json``.
``gpu`` gives every kind a real hidden size (2048, 8 layers for target and mimo, 1 for the
draft; about 0.5 B parameters), so a GPU, not the host, bounds the step time, and builds them to
decide each next token by a wide margin, as benchmarks/gguf_models.py does for llama.cpp: fully
random weights at this size put greedy decoding on near-ties, where speculative decoding's batched
verification flips an argmax and the token-identity gate rightly voids the arm. At ``gpu`` and ``gpu8b`` size:

- each block's output projections (``o_proj``, ``down_proj``) are scaled by ``BLOCK_SCALES[size]``, so
  the residual stream stays close to the current token's embedding E[i] while every block still
  runs at full shape;
- the head is untied: its row for token walk[i] is E[i], for one permutation ``walk`` of the
  vocabulary shared by every kind of the same seed, so greedy decoding walks i -> walk[i];
- the mimo MTP layer passes the next token's embedding through (its ``input_proj`` is [0, I]: vLLM's
  vllm/model_executor/models/mimo_mtp.py concatenates [hidden, embedding]), so it drafts
  walk[walk[i]], the target's own next-but-one token;
- the draft shares the target's embedding (same seed, same hidden size) and its walk, except on a
  ``draft_disagree`` fraction of the tokens, whose destinations are shuffled among themselves: it
  proposes the target's next token about (1 - fraction) of the time.

Weights are written as bfloat16 safetensors by a small writer here, because numpy has no bfloat16
and torch is not a dependency of tailpod itself (it lives in the engine's environment).
"""

from __future__ import annotations

import hashlib
import json
import os
import struct
import sysconfig
import zlib
from collections import deque
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from itertools import islice
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
# Qwen3-8B's shape (its config.json: hidden 4096, intermediate 12288, 36 layers, 32 heads, 8 KV
# heads, head_dim 128) with this tokenizer's 4096-token vocabulary.
GPU8B_SHAPES = {
    "target": Shape(hidden=4096, intermediate=12288, layers=36, heads=32, kv_heads=8, head_dim=128),
    "draft": Shape(hidden=4096, intermediate=12288, layers=1, heads=32, kv_heads=8, head_dim=128),
    "mimo": Shape(hidden=4096, intermediate=12288, layers=36, heads=32, kv_heads=8, head_dim=128),
}
SIZES = {"tiny": SHAPES, "gpu": GPU_SHAPES, "gpu8b": GPU8B_SHAPES}
# Block outputs scaled down so that the residual stays near E[i], far inside the head's margin
# (about 40 logits for the walk's token against about 3 for the next best). What each block adds
# grows with hidden * depth: at 1% the gpu size's 8 blocks leave E[i] about half the residual; the
# 8B shape's 36 wider blocks need 0.1% for the same.
BLOCK_SCALE = 0.01
BLOCK_SCALES = {"gpu": BLOCK_SCALE, "gpu8b": 0.001}
# Sizes built one tensor at a time, each from its own generator (seed, crc32 of its name), in
# parallel, streamed to disk: numpy draws about 7 B normals too slowly on one core.
STREAMED = {"gpu8b"}
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
    # tokenizers stays lazy: a native library only `checkpoint build` needs, not `tailpod --help`.
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


# A tensor to write: its shape and what makes its float32 values (called once, maybe in a thread).
TensorMaker = tuple[tuple[int, ...], Callable[[], np.ndarray]]


def write_safetensors_bf16(path: Path, tensors: dict[str, np.ndarray]) -> str:
    """Write `tensors` as bf16 safetensors; returns the file's sha256."""
    def maker(array: np.ndarray) -> TensorMaker:
        return array.shape, lambda: array

    return write_safetensors_bf16_streamed(
        path, {name: maker(a) for name, a in tensors.items()}, workers=1
    )


def write_safetensors_bf16_streamed(
    path: Path, makers: dict[str, TensorMaker], workers: int | None = None
) -> str:
    """Write bf16 safetensors one tensor at a time, each made by its maker (on `workers` threads,
    at most 2 * workers in memory), in name order; returns the file's sha256."""
    header: dict[str, object] = {"__metadata__": {"format": "pt"}}
    offset = 0
    names = sorted(makers)
    for name in names:
        shape = makers[name][0]
        size = 2 * int(np.prod(shape, dtype=np.int64))
        header[name] = {
            "dtype": "BF16",
            "shape": list(shape),
            "data_offsets": [offset, offset + size],
        }
        offset += size
    raw = json.dumps(header, separators=(",", ":")).encode()
    raw += b" " * (-len(raw) % 8)  # the format wants the data section 8-byte aligned
    digest = hashlib.sha256()

    def bits(name: str) -> np.ndarray:
        shape, make = makers[name]
        values = make()
        if values.shape != tuple(shape):
            raise ValueError(f"{name}: made {values.shape}, declared {tuple(shape)}")
        return to_bf16_bits(values)

    workers = workers or min(32, os.cpu_count() or 1)
    with open(path, "wb") as fh, ThreadPoolExecutor(max_workers=workers) as pool:
        for chunk in (struct.pack("<Q", len(raw)), raw):
            fh.write(chunk)
            digest.update(chunk)
        todo = iter(names)
        pending = deque(pool.submit(bits, n) for n in islice(todo, 2 * workers))
        while pending:
            data = pending.popleft().result()
            fh.write(data.data)
            digest.update(data.data)
            for n in todo:
                pending.append(pool.submit(bits, n))
                break
    return digest.hexdigest()


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


def _normal(seed: int, name: str, shape: tuple[int, ...], std: float) -> np.ndarray:
    """The values of one tensor of a streamed size: its own generator, so a tensor's bytes do not
    depend on the order or the threads the others were made in (and the draft's embedding, made
    under the same name and seed, is the target's)."""
    rng = np.random.default_rng([seed, zlib.crc32(name.encode())])
    out = rng.standard_normal(shape, dtype=np.float32)
    out *= np.float32(std)
    return out


def _streamed_makers(
    kind: str, s: Shape, vocab: int, seed: int, std: float, out_scale: float, walk: np.ndarray
) -> dict[str, TensorMaker]:
    """The tensors of a streamed (walked) size, as makers; the same layout as the eager path."""
    makers: dict[str, TensorMaker] = {}

    def normal(name: str, shape: tuple[int, ...], scale: float = 1.0) -> None:
        makers[name] = (shape, lambda: _normal(seed, name, shape, std * scale))

    def const(name: str, shape: tuple[int, ...], value: float) -> None:
        makers[name] = (shape, lambda: np.full(shape, value, np.float32))

    def layer(prefix: str, scale: float, qwen2_bias: bool) -> None:
        q, kv = s.heads * s.head_dim, s.kv_heads * s.head_dim
        const(f"{prefix}.input_layernorm.weight", (s.hidden,), 1.0)
        const(f"{prefix}.post_attention_layernorm.weight", (s.hidden,), 1.0)
        normal(f"{prefix}.self_attn.q_proj.weight", (q, s.hidden))
        normal(f"{prefix}.self_attn.k_proj.weight", (kv, s.hidden))
        normal(f"{prefix}.self_attn.v_proj.weight", (kv, s.hidden))
        normal(f"{prefix}.mlp.gate_proj.weight", (s.intermediate, s.hidden))
        normal(f"{prefix}.mlp.up_proj.weight", (s.intermediate, s.hidden))
        if scale:
            normal(f"{prefix}.self_attn.o_proj.weight", (s.hidden, q), scale)
            normal(f"{prefix}.mlp.down_proj.weight", (s.hidden, s.intermediate), scale)
        else:
            const(f"{prefix}.self_attn.o_proj.weight", (s.hidden, q), 0.0)
            const(f"{prefix}.mlp.down_proj.weight", (s.hidden, s.intermediate), 0.0)
        if qwen2_bias:
            for name, n in (("q", q), ("k", kv), ("v", kv)):
                const(f"{prefix}.self_attn.{name}_proj.bias", (n,), 0.0)
        else:
            const(f"{prefix}.self_attn.q_norm.weight", (s.head_dim,), 1.0)
            const(f"{prefix}.self_attn.k_norm.weight", (s.head_dim,), 1.0)

    embed = "model.embed_tokens.weight"
    normal(embed, (vocab, s.hidden))
    const("model.norm.weight", (s.hidden,), 1.0)
    for i in range(s.layers):
        layer(f"model.layers.{i}", out_scale, kind == "mimo")

    def head() -> np.ndarray:
        rows = np.empty((vocab, s.hidden), np.float32)
        rows[walk] = _normal(seed, embed, (vocab, s.hidden), std)  # row walk[i] is E[i]
        return rows

    makers["lm_head.weight"] = ((vocab, s.hidden), head)
    if kind == "mimo":
        mtp = "model.mtp_layers.0"
        layer(mtp, 0.0, qwen2_bias=True)
        for norm in ("token_layernorm", "hidden_layernorm", "final_layernorm"):
            const(f"{mtp}.{norm}.weight", (s.hidden,), 1.0)

        def input_proj() -> np.ndarray:
            proj = np.zeros((s.hidden, 2 * s.hidden), np.float32)
            proj[:, s.hidden:] = np.eye(s.hidden, dtype=np.float32)  # [hidden, embedding]
            return proj

        makers[f"{mtp}.input_proj.weight"] = ((s.hidden, 2 * s.hidden), input_proj)
    return makers


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
    walked = size != "tiny"
    out_dir = Path(out_dir)
    vocab = build_tokenizer(out_dir)
    tokenizer_vocab = json.loads((out_dir / "tokenizer.json").read_text())["added_tokens"]
    ids = {t["content"]: t["id"] for t in tokenizer_vocab}
    eos_id, pad_id = ids["<|im_end|>"], ids["<|endoftext|>"]
    s = SIZES[size][kind]
    out_scale = BLOCK_SCALES.get(size, 1.0)
    config = _config(kind, s, vocab, eos_id, pad_id)
    note: dict[str, object] = {"builder": "tailpod.engines.tiny_checkpoint", "kind": kind,
                               "seed": seed}
    if walked:
        note["size"] = size
        if kind == "draft":
            note["draft_disagree"] = draft_disagree
        config["tie_word_embeddings"] = False
    if size in STREAMED:
        walk = next_token_walk(vocab, seed, draft_disagree if kind == "draft" else 0.0)
        makers = _streamed_makers(kind, s, vocab, seed, std, out_scale, walk)
        note["model_sha256"] = write_safetensors_bf16_streamed(
            out_dir / "model.safetensors", makers
        )
        note["parameters"] = int(sum(np.prod(shape, dtype=np.int64)
                                     for shape, _ in makers.values()))
        return _write_configs(out_dir, config, note, eos_id, pad_id)
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
        # tiny: the hidden half ([I, 0]); a walked size: the embedding half (module docstring)
        proj = np.zeros((s.hidden, 2 * s.hidden), np.float32)
        half = slice(s.hidden, None) if walked else slice(None, s.hidden)
        proj[:, half] = np.eye(s.hidden, dtype=np.float32)
        tensors[f"{mtp}.input_proj.weight"] = proj
    if walked:
        walk = next_token_walk(vocab, seed, draft_disagree if kind == "draft" else 0.0)
        head = np.empty_like(tensors["model.embed_tokens.weight"])
        head[walk] = tensors["model.embed_tokens.weight"]  # row walk[i] is E[i]
        tensors["lm_head.weight"] = head
    digest = write_safetensors_bf16(out_dir / "model.safetensors", tensors)
    if walked:
        note["model_sha256"] = digest
    return _write_configs(out_dir, config, note, eos_id, pad_id)


def _write_configs(out_dir: Path, config: dict[str, object], note: dict[str, object],
                   eos_id: int, pad_id: int) -> Path:
    (out_dir / "config.json").write_text(json.dumps(config, indent=2))
    (out_dir / "generation_config.json").write_text(
        json.dumps({"eos_token_id": eos_id, "pad_token_id": pad_id, "do_sample": False}, indent=2)
    )
    (out_dir / "tailpod-checkpoint.json").write_text(json.dumps(note))
    return out_dir


def is_checkpoint(path: Path) -> bool:
    """A directory with a config and at least one safetensors file."""
    path = Path(path)
    return (path / "config.json").is_file() and any(path.glob("*.safetensors"))
