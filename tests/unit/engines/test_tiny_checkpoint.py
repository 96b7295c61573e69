from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np
import pytest

from tailpod.engines.tiny_checkpoint import build_checkpoint, is_checkpoint, to_bf16_bits
from tests.unit.measure.perturb import (
    read_safetensors_bf16,  # our bf16 safetensors, read back by hand
)


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


def test_gpu_size_walks_by_a_wide_margin_and_the_draft_mostly_agrees(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The gpu construction at a small shape (the real one is ~0.4 B parameters): the same code path.
    from tailpod.engines import tiny_checkpoint as tc

    small = tc.Shape(hidden=256, intermediate=512, layers=2, heads=4, kv_heads=2, head_dim=64)
    one_layer = tc.Shape(hidden=256, intermediate=512, layers=1, heads=4, kv_heads=2, head_dim=64)
    monkeypatch.setitem(tc.SIZES, "gpu", {"target": small, "draft": one_layer, "mimo": small})
    target = read_safetensors_bf16(build_checkpoint(tmp_path / "t", "target", size="gpu") / "model.safetensors")
    draft = read_safetensors_bf16(build_checkpoint(tmp_path / "d", "draft", size="gpu", draft_disagree=0.3)
                       / "model.safetensors")
    config = json.loads((tmp_path / "t" / "config.json").read_text())
    assert config["tie_word_embeddings"] is False and config["hidden_size"] == 256
    emb = target["model.embed_tokens.weight"]
    assert np.array_equal(emb, draft["model.embed_tokens.weight"])  # same seed, same hidden
    vocab = emb.shape[0]
    # The head is the embedding with its rows permuted: every row of E appears exactly once.
    head = target["lm_head.weight"]
    rows = {r.tobytes() for r in emb}
    assert len(rows) == vocab and {r.tobytes() for r in head} == rows
    # Greedy from a residual equal to E[i]: the next token is a bijection of the vocabulary, and the
    # best logit beats the second by far more than bf16 or batching could move it.
    logits = emb @ head.T
    nxt = logits.argmax(axis=1)
    assert len(set(nxt.tolist())) == vocab
    top2 = np.sort(logits, axis=1)[:, -2:]
    assert float(np.min(top2[:, 1] - top2[:, 0])) > 5 * float(np.std(logits))
    # Block outputs are 1% of a random projection's, so the residual stays near E[i].
    o = target["model.layers.0.self_attn.o_proj.weight"]
    q = target["model.layers.0.self_attn.q_proj.weight"]
    assert 0.005 < float(np.std(o)) / float(np.std(q)) < 0.02
    # The draft proposes the target's next token for about 70% of the tokens: 30% are reshuffled
    # among themselves, and a reshuffled token that lands on its own destination still agrees.
    agree = float(np.mean((emb @ draft["lm_head.weight"].T).argmax(axis=1) == nxt))
    assert 0.70 <= agree <= 0.72


def test_unknown_size_and_a_bad_disagree_fraction_are_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="unknown checkpoint size"):
        build_checkpoint(tmp_path / "a", "target", size="huge")
    with pytest.raises(ValueError, match="within"):
        build_checkpoint(tmp_path / "b", "draft", size="gpu", draft_disagree=1.5)
