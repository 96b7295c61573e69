#!/usr/bin/env python3
"""Write random-weight llama-architecture GGUF models for the GPU benchmark, with no hub.

The GPU benchmark (benchmarks/gpu_llamacpp.sh) needs a target big enough that the GPU, not the
client, is the bottleneck, and a draft model llama-server accepts for draft-model speculation
(same vocabulary). Neither is downloaded: both are written here with the `gguf` package that ships
inside the llama.cpp source tree (`<src>/gguf-py`), and the tokenizer is copied from the vocab-only
`<src>/models/ggml-vocab-llama-bpe.gguf` of the same tree.

What the models compute. Fully random weights make a near-flat next-token distribution: a random
draft is never accepted, and greedy decoding sits on near-ties, so speculative decoding's batched
verification (other CUDA kernels, another summation order) flips some argmax and the token-identity
gate fails for reasons of numerics, not of the engine (both seen on the H200). So the models are
built to decide each next token by a wide margin:

  - every block's output projections (attn_output, ffn_down) are scaled by `--block-scale`, so the
    residual stream stays close to the current token's embedding E[i] (the blocks still run: the
    compute per token is that of a real model of this shape);
  - the output matrix's row for token perm(i) is E[i] / sqrt(hidden), for one random permutation
    `perm` of the vocabulary, so greedy decoding walks i -> perm(i) with a logit margin of about
    sqrt(hidden) (64 for hidden 4096) over the next best;
  - a draft (`*-draft` presets) shares the embedding and uses the same walk except on a random
    `--draft-disagree` fraction of the tokens, where its output rows are shuffled among
    themselves: it proposes the target's next token about (1 - fraction) of the time.

The text means nothing; the models measure the serving path, speculative decoding's mechanics and
the gate, never a model's quality.

    PYTHONPATH=<src>/gguf-py python3 gguf_models.py --src <src> --preset 8b --out target.gguf
    PYTHONPATH=<src>/gguf-py python3 gguf_models.py --src <src> --preset 8b-draft --out draft.gguf

Random numbers come from torch on the GPU when it is there (seconds for 8B), else numpy.
"""

from __future__ import annotations

import argparse
import hashlib
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

# Llama 3's chat template, embedded in the GGUF: llama-server renders it with its Jinja engine
# (passing `--chat-template llama3` would be taken as the literal template text "llama3").
LLAMA3_TEMPLATE = (
    "{{- bos_token }}{%- for message in messages %}"
    "{{- '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n'"
    " + message['content'] | trim + '<|eot_id|>' }}{%- endfor %}"
    "{%- if add_generation_prompt %}"
    "{{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}{%- endif %}"
)


@dataclass(frozen=True)
class Shape:
    hidden: int
    layers: int
    ffn: int
    heads: int
    kv_heads: int


# Targets and their drafts share `hidden` (and so the embedding); drafts have fewer layers.
PRESETS: dict[str, Shape] = {
    "tiny": Shape(hidden=256, layers=4, ffn=1024, heads=4, kv_heads=4),
    "tiny-draft": Shape(hidden=256, layers=1, ffn=1024, heads=4, kv_heads=4),
    "1b": Shape(hidden=2048, layers=16, ffn=8192, heads=32, kv_heads=8),
    "1b-draft": Shape(hidden=2048, layers=1, ffn=8192, heads=32, kv_heads=8),
    # Llama-3-8B's shape: 8.0 B parameters, 16 GB in f16; its draft is one layer (1.3 B).
    "8b": Shape(hidden=4096, layers=32, ffn=14336, heads=32, kv_heads=8),
    "8b-draft": Shape(hidden=4096, layers=1, ffn=14336, heads=32, kv_heads=8),
}


class Random:
    """Normal f16 tensors, reproducible per (seed, tensor name)."""

    def __init__(self, seed: int) -> None:
        self.seed = seed
        try:
            import torch

            self.torch: Any = torch if torch.cuda.is_available() else None
        except ImportError:
            self.torch = None

    def _seed_for(self, name: str) -> int:
        digest = hashlib.sha256(f"{self.seed}:{name}".encode()).digest()
        return int.from_bytes(digest[:8], "little") & 0x7FFF_FFFF_FFFF_FFFF

    def normal(self, name: str, shape: tuple[int, ...], std: float) -> np.ndarray:
        seed = self._seed_for(name)
        if self.torch is not None:
            gen = self.torch.Generator(device="cuda").manual_seed(seed)
            t = self.torch.randn(shape, generator=gen, device="cuda", dtype=self.torch.float32)
            return (t * std).to(self.torch.float16).cpu().numpy()
        rng = np.random.default_rng(seed)
        return (rng.standard_normal(shape, dtype=np.float32) * std).astype(np.float16)

    def permutation(self, name: str, n: int) -> np.ndarray:
        return np.random.default_rng(self._seed_for(name)).permutation(n)


def next_token_map(rand: Random, vocab: int, disagree: float) -> np.ndarray:
    """next[i]: the token greedy decoding emits after token i. The target's (disagree 0) is one
    permutation of the vocabulary; a draft's permutes the values of a random `disagree` fraction
    of the tokens among themselves and keeps the rest."""
    walk = rand.permutation("walk", vocab)
    if disagree > 0:
        chosen = rand.permutation("disagree", vocab)[: int(round(disagree * vocab))]
        walk = walk.copy()
        walk[chosen] = walk[chosen][rand.permutation("shuffle", len(chosen))]
    return walk


def output_matrix(embd: np.ndarray, walk: np.ndarray) -> np.ndarray:
    """Row walk[i] is E[i] / sqrt(hidden): after token i the logit of walk[i] is about
    |E[i]|^2 / sqrt(hidden) = sqrt(hidden), every other logit about N(0, 1)."""
    out = np.empty_like(embd)
    out[walk] = (embd.astype(np.float32) * embd.shape[1] ** -0.5).astype(embd.dtype)
    return out


def copy_tokenizer(writer: Any, vocab_path: Path) -> int:
    """Every `tokenizer.*` key of the vocab-only GGUF; returns the vocabulary size."""
    import gguf

    reader = gguf.GGUFReader(str(vocab_path))
    vocab_size = 0
    for key, fld in reader.fields.items():
        if not key.startswith("tokenizer.") or key == "tokenizer.chat_template":
            continue
        main = fld.types[0]
        value = fld.contents()
        if main == gguf.GGUFValueType.ARRAY:
            writer.add_key_value(key, value, main, sub_type=fld.types[-1])
            if key == "tokenizer.ggml.tokens":
                vocab_size = len(value)
        else:
            writer.add_key_value(key, value, main)
    if not vocab_size:
        raise SystemExit(f"{vocab_path} has no tokenizer.ggml.tokens")
    return vocab_size


def write_model(
    src: Path, out: Path, shape: Shape, seed: int, block_scale: float, name: str, disagree: float
) -> None:
    import gguf

    t0 = time.time()
    vocab_path = src / "models" / "ggml-vocab-llama-bpe.gguf"
    writer = gguf.GGUFWriter(str(out), "llama")
    writer.add_name(name)
    vocab = copy_tokenizer(writer, vocab_path)
    head_dim = shape.hidden // shape.heads
    writer.add_vocab_size(vocab)
    writer.add_context_length(8192)
    writer.add_embedding_length(shape.hidden)
    writer.add_block_count(shape.layers)
    writer.add_feed_forward_length(shape.ffn)
    writer.add_head_count(shape.heads)
    writer.add_head_count_kv(shape.kv_heads)
    writer.add_rope_dimension_count(head_dim)
    writer.add_rope_freq_base(500000.0)
    writer.add_layer_norm_rms_eps(1e-5)
    writer.add_file_type(gguf.LlamaFileType.MOSTLY_F16)
    writer.add_chat_template(LLAMA3_TEMPLATE)

    rand = Random(seed)
    h, kv = shape.hidden, shape.kv_heads * head_dim
    ones = np.ones(h, dtype=np.float32)
    # Shared with every model of the same seed and hidden size: the draft's agreement rests on it.
    embd = rand.normal("token_embd", (vocab, h), 1.0)
    writer.add_tensor("token_embd.weight", embd)
    for i in range(shape.layers):
        blk = f"blk.{i}"
        writer.add_tensor(f"{blk}.attn_norm.weight", ones)
        writer.add_tensor(f"{blk}.attn_q.weight", rand.normal(f"{name}.{blk}.q", (h, h), h**-0.5))
        writer.add_tensor(f"{blk}.attn_k.weight", rand.normal(f"{name}.{blk}.k", (kv, h), h**-0.5))
        writer.add_tensor(f"{blk}.attn_v.weight", rand.normal(f"{name}.{blk}.v", (kv, h), h**-0.5))
        writer.add_tensor(
            f"{blk}.attn_output.weight",
            rand.normal(f"{name}.{blk}.o", (h, h), block_scale * h**-0.5),
        )
        writer.add_tensor(f"{blk}.ffn_norm.weight", ones)
        writer.add_tensor(
            f"{blk}.ffn_gate.weight", rand.normal(f"{name}.{blk}.gate", (shape.ffn, h), h**-0.5)
        )
        writer.add_tensor(
            f"{blk}.ffn_up.weight", rand.normal(f"{name}.{blk}.up", (shape.ffn, h), h**-0.5)
        )
        writer.add_tensor(
            f"{blk}.ffn_down.weight",
            rand.normal(f"{name}.{blk}.down", (h, shape.ffn), block_scale * shape.ffn**-0.5),
        )
    writer.add_tensor("output_norm.weight", ones)
    writer.add_tensor("output.weight", output_matrix(embd, next_token_map(rand, vocab, disagree)))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    size_gb = out.stat().st_size / 1e9
    print(f"{out}: {name}, {size_gb:.2f} GB, {time.time() - t0:.0f} s", file=sys.stderr)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--src", type=Path, required=True, help="llama.cpp source tree")
    parser.add_argument("--preset", choices=sorted(PRESETS), required=True)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--draft-disagree",
        type=float,
        default=None,
        help="fraction of tokens whose next token the model gets wrong on purpose "
        "(default: 0.3 for *-draft presets, 0 for targets)",
    )
    parser.add_argument(
        "--block-scale",
        type=float,
        default=0.02,
        help="scale of each block's output projections (small: a draft of the same seed agrees)",
    )
    args = parser.parse_args(argv)
    disagree = args.draft_disagree
    if disagree is None:
        disagree = 0.3 if args.preset.endswith("-draft") else 0.0
    if not 0.0 <= disagree <= 1.0:
        parser.error("--draft-disagree must be within [0, 1]")
    write_model(args.src, args.out, PRESETS[args.preset], args.seed, args.block_scale,
                args.preset, disagree)  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
