"""A float32 numpy forward of the checkpoints tiny_checkpoint writes (Qwen3, or MiMo's Qwen2
backbone with its MTP layer), written from the Hugging Face modelling code's semantics, not from
the builder: RMSNorm, q/k norm (Qwen3) or q/k/v bias (Qwen2), neox RoPE, causal GQA attention,
SwiGLU. The MTP step follows vLLM's vllm/model_executor/models/mimo_mtp.py: input_proj over
[hidden_layernorm(hidden), token_layernorm(embedding of the next token)], one decoder layer,
final_layernorm, the shared lm_head.

Weights are read lazily from the safetensors file (memory-mapped), so a 14 GB checkpoint can be
checked on a machine with less memory: python -m tests.helpers.np_decoder DIR [TOKENS].
"""

from __future__ import annotations

import json
import struct
import sys
from pathlib import Path

import numpy as np


class Weights:
    def __init__(self, path: Path) -> None:
        raw = np.memmap(path, dtype=np.uint8, mode="r")
        (length,) = struct.unpack("<Q", bytes(raw[:8]))
        self.header = json.loads(bytes(raw[8 : 8 + length]))
        self.data = raw[8 + length :]

    def __contains__(self, name: str) -> bool:
        return name in self.header

    def __getitem__(self, name: str) -> np.ndarray:
        meta = self.header[name]
        start, end = meta["data_offsets"]
        bits = self.data[start:end].view("<u2").astype(np.uint32) << 16
        return bits.view(np.float32).reshape(meta["shape"])


def rms_norm(x: np.ndarray, w: np.ndarray, eps: float) -> np.ndarray:
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * w


def rope(x: np.ndarray, positions: np.ndarray, theta: float) -> np.ndarray:
    """x: (heads, T, head_dim); the rotate-half form of HF's apply_rotary_pos_emb."""
    d = x.shape[-1]
    inv = 1.0 / theta ** (np.arange(0, d, 2, dtype=np.float64) / d)
    ang = np.outer(positions, inv)
    cos = np.concatenate([np.cos(ang), np.cos(ang)], axis=-1).astype(np.float32)
    sin = np.concatenate([np.sin(ang), np.sin(ang)], axis=-1).astype(np.float32)
    half = np.concatenate([-x[..., d // 2 :], x[..., : d // 2]], axis=-1)
    return x * cos + half * sin


def layer(w: Weights, p: str, h: np.ndarray, cfg: dict, positions: np.ndarray) -> np.ndarray:
    eps, hd = cfg["rms_norm_eps"], cfg["head_dim"]
    nh, nkv = cfg["num_attention_heads"], cfg["num_key_value_heads"]
    x = rms_norm(h, w[f"{p}.input_layernorm.weight"], eps)
    proj = {}
    for n in ("q", "k", "v"):
        y = x @ w[f"{p}.self_attn.{n}_proj.weight"].T
        if f"{p}.self_attn.{n}_proj.bias" in w:
            y = y + w[f"{p}.self_attn.{n}_proj.bias"]
        proj[n] = y.reshape(len(h), -1, hd).transpose(1, 0, 2)  # (heads, T, hd)
    q, k, v = proj["q"], proj["k"], proj["v"]
    if f"{p}.self_attn.q_norm.weight" in w:
        q = rms_norm(q, w[f"{p}.self_attn.q_norm.weight"], eps)
        k = rms_norm(k, w[f"{p}.self_attn.k_norm.weight"], eps)
    q, k = rope(q, positions, cfg["rope_theta"]), rope(k, positions, cfg["rope_theta"])
    k, v = np.repeat(k, nh // nkv, axis=0), np.repeat(v, nh // nkv, axis=0)
    scores = q @ k.transpose(0, 2, 1) / np.sqrt(hd)
    scores = scores + np.triu(np.full((len(h), len(h)), -np.inf, np.float32), 1)
    scores = np.exp(scores - scores.max(axis=-1, keepdims=True))
    attn = (scores / scores.sum(axis=-1, keepdims=True)) @ v
    h = h + attn.transpose(1, 0, 2).reshape(len(h), -1) @ w[f"{p}.self_attn.o_proj.weight"].T
    x = rms_norm(h, w[f"{p}.post_attention_layernorm.weight"], eps)
    g, u = x @ w[f"{p}.mlp.gate_proj.weight"].T, x @ w[f"{p}.mlp.up_proj.weight"].T
    return h + (g / (1.0 + np.exp(-g)) * u) @ w[f"{p}.mlp.down_proj.weight"].T


def forward(ckpt: Path, tokens: list[int]) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """(logits, final hidden, MTP logits or None) for each position of `tokens`. MTP row t
    drafts the token after tokens[t + 1] (its input is position t's hidden and tokens[t + 1])."""
    cfg = json.loads((Path(ckpt) / "config.json").read_text())
    w = Weights(Path(ckpt) / "model.safetensors")
    emb = w["model.embed_tokens.weight"]
    head = w["model.embed_tokens.weight" if cfg["tie_word_embeddings"] else "lm_head.weight"]
    pos = np.arange(len(tokens))
    h = emb[tokens]
    for i in range(cfg["num_hidden_layers"]):
        h = layer(w, f"model.layers.{i}", h, cfg, pos)
    hidden = rms_norm(h, w["model.norm.weight"], cfg["rms_norm_eps"])
    mtp_logits = None
    if "model.mtp_layers.0.input_proj.weight" in w and len(tokens) > 1:
        m, eps = "model.mtp_layers.0", cfg["rms_norm_eps"]
        nxt = emb[tokens[1:]]
        x = np.concatenate([rms_norm(hidden[:-1], w[f"{m}.hidden_layernorm.weight"], eps),
                            rms_norm(nxt, w[f"{m}.token_layernorm.weight"], eps)], axis=-1)
        x = x @ w[f"{m}.input_proj.weight"].T
        x = layer(w, m, x, cfg, pos[1:])
        mtp_logits = rms_norm(x, w[f"{m}.final_layernorm.weight"], eps) @ head.T
    return hidden @ head.T, hidden, mtp_logits


def main() -> None:  # the full-size check, by hand: greedy steps, margins, MTP agreement
    ckpt = Path(sys.argv[1])
    tokens = [int(t) for t in (sys.argv[2] if len(sys.argv) > 2 else "17,200,301").split(",")]
    for _ in range(int(sys.argv[3]) if len(sys.argv) > 3 else 6):
        logits, _, mtp = forward(ckpt, tokens)
        top2 = np.sort(logits[-1])[-2:]
        print(f"next {int(logits[-1].argmax())} margin {top2[1] - top2[0]:.2f} "
              f"top {top2[1]:.2f}", flush=True)
        tokens.append(int(logits[-1].argmax()))
    logits, _, mtp = forward(ckpt, tokens)
    greedy = logits.argmax(axis=1)
    print("tokens", tokens)
    if mtp is not None:
        # MTP row t drafts the token at t + 2, which greedy row t + 1 decides
        agree = mtp.argmax(axis=1)[:-1] == greedy[1:-1]
        print(f"MTP drafts agree on {int(agree.sum())} of {len(agree)}")


if __name__ == "__main__":
    main()
