"""The gpu and gpu8b checkpoints, run forward by an independent numpy decoder
(tests/helpers/np_decoder.py) at a small shape through the same code path: greedy decoding walks
one token to the next whatever came before, by a wide margin; the mimo MTP layer drafts the
target's own next-but-one token (it drafted the next one, already known, before: vLLM
concatenates [hidden, embedding]); the 1-layer draft agrees most of the time; the streamed
(parallel) writer's bytes are the serial writer's and their sha256 is recorded."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np
import pytest

from tailpod.engines import tiny_checkpoint as tc
from tests.helpers.np_decoder import forward

SMALL = tc.Shape(hidden=256, intermediate=768, layers=3, heads=4, kv_heads=2, head_dim=64)
ONE = tc.Shape(hidden=256, intermediate=768, layers=1, heads=4, kv_heads=2, head_dim=64)
PROMPTS = ([17, 200, 301, 9], [1000, 5, 9], [9])  # all end in token 9


@pytest.fixture(scope="module", params=["gpu", "gpu8b"])
def built(request: pytest.FixtureRequest,
          tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    out = tmp_path_factory.mktemp(request.param)
    with pytest.MonkeyPatch.context() as mp:
        mp.setitem(tc.SIZES, request.param, {"target": SMALL, "draft": ONE, "mimo": SMALL})
        return {kind: tc.build_checkpoint(out / kind, kind, seed=3, size=request.param)
                for kind in ("target", "mimo", "draft")}


def _greedy(ckpt: Path, prompt: list[int], steps: int) -> tuple[list[int], float]:
    tokens, margin = list(prompt), np.inf
    for _ in range(steps):
        logits = forward(ckpt, tokens)[0][-1]
        top2 = np.sort(logits)[-2:]
        # in spreads of the other logits (the margin in logits grows with the hidden size)
        margin = min(margin, float(top2[1] - top2[0]) / float(np.std(logits)))
        tokens.append(int(logits.argmax()))
    return tokens[len(prompt):], margin


def test_the_next_token_depends_on_the_last_one_alone_by_a_wide_margin(
    built: dict[str, Path],
) -> None:
    for kind in ("target", "mimo"):
        runs = [_greedy(built[kind], p, 4) for p in PROMPTS]
        assert runs[0][0] == runs[1][0] == runs[2][0], kind  # same last token, same walk
        assert len(set(runs[0][0])) == 4  # a walk, not a repeated token
        assert min(m for _, m in runs) > 5.0, kind


def test_the_mtp_layer_drafts_the_targets_next_but_one_token(built: dict[str, Path]) -> None:
    tokens, _ = _greedy(built["mimo"], [17, 200, 301], 8)
    seq = [17, 200, 301, *tokens]
    logits, _, mtp = forward(built["mimo"], seq)
    assert mtp is not None
    # row t of the MTP logits drafts position t + 2, which the target's row t + 1 decides
    assert np.array_equal(mtp.argmax(axis=1)[2:-1], logits.argmax(axis=1)[3:-1])


def test_the_draft_agrees_with_the_target_most_of_the_time(built: dict[str, Path]) -> None:
    probe = list(range(40, 4000, 160))  # 25 tokens, each its own one-token prompt
    agree = [int(forward(built["draft"], [t])[0][-1].argmax())
             == int(forward(built["target"], [t])[0][-1].argmax()) for t in probe]
    assert 0.5 <= sum(agree) / len(agree) <= 0.9  # 70% by construction (DRAFT_DISAGREE 0.3)


def test_the_recorded_digest_is_the_weights_sha256(built: dict[str, Path]) -> None:
    for ckpt in built.values():
        note = json.loads((ckpt / "tailpod-checkpoint.json").read_text())
        weights = (ckpt / "model.safetensors").read_bytes()
        assert note["model_sha256"] == hashlib.sha256(weights).hexdigest()


def test_the_streamed_writer_writes_the_serial_writers_bytes(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    tensors = {f"t{i}": rng.standard_normal((i + 1, 3)).astype(np.float32) for i in range(9)}
    serial = tc.write_safetensors_bf16(tmp_path / "a", tensors)
    makers = {n: (a.shape, lambda a=a: a) for n, a in tensors.items()}
    parallel = tc.write_safetensors_bf16_streamed(tmp_path / "b", makers, workers=4)
    assert (tmp_path / "a").read_bytes() == (tmp_path / "b").read_bytes()
    assert serial == parallel == hashlib.sha256((tmp_path / "b").read_bytes()).hexdigest()


def test_gpu8b_is_qwen3_8b_shaped() -> None:
    s = tc.SIZES["gpu8b"]["target"]
    # Qwen3-8B's config.json: hidden 4096, intermediate 12288, 36 layers, 32/8 heads, head_dim 128
    assert (s.hidden, s.intermediate, s.layers, s.heads, s.kv_heads, s.head_dim) == (
        4096, 12288, 36, 32, 8, 128)
    per_layer = 4096 * (32 * 128) * 2 + 4096 * (8 * 128) * 2 + 3 * 4096 * 12288
    assert per_layer * 36 * 2 > 13.5e9  # bf16 bytes a decode step reads: bandwidth-bound
