"""The pod agent's `probe logprobs` against the documented vLLM and SGLang shapes (a fake engine whose full
distributions are known), end to end through the KL math."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from tailpod.agent.probes import logprobs as probe
from tailpod.agent.probes.basics import ProbeError
from tailpod.agent.probes.prompt_classes import load_prompt_classes
from tailpod.agent_client.driver import AgentError, PodAgent, SubprocessTransport
from tailpod.measure.kl_eval import PROMPTS_FILE, load_prompts, slim_reference
from tailpod.results import kl
from tailpod.sandbox.kl_engine import FakeEngine, FakeModel, serve, tokenize

PROMPTS = [
    {"id": "a", "class": "prose", "messages": [{"role": "user", "content": "Tell a story."}]},
    {"id": "b", "class": "code", "messages": [{"role": "user", "content": "def merge(x):"}]},
]


def collect(url: str, reference: dict | None = None, k: int = 5, n: int = 8,
            engine: str = "auto") -> dict:
    return probe.collect_logprobs(url, PROMPTS, k, n, engine=engine, reference=reference,
                                  timeout=10)


def direct_kl(ref: FakeModel, cand: FakeModel, doc: dict, k: int) -> list[float]:
    """The estimator computed straight from the two models' full distributions."""
    out = []
    for p in doc["prompts"]:
        ids = p["prompt_ids"] + p["scored_ids"]
        for i in range(len(p["prompt_ids"]), len(ids)):
            lp, lq = np.array(ref.logprobs(ids[:i])), np.array(cand.logprobs(ids[:i]))
            top_p = set(np.argsort(-lp, kind="stable")[:k].tolist()) | {ids[i]}
            top_q = set(np.argsort(-lq, kind="stable")[:k].tolist()) | {ids[i]}
            shared = sorted(top_p & top_q)
            p_, q_ = np.exp(lp), np.exp(lq)
            mask = np.zeros(len(lp), bool)
            mask[shared] = True
            pp, qq = np.append(p_[mask], p_[~mask].sum()), np.append(q_[mask], q_[~mask].sum())
            out.append(float(np.sum(pp * np.log(pp / qq))))
    return out


@pytest.mark.parametrize("engine", ["vllm", "sglang"])
def test_reference_scores_its_own_greedy_continuation(engine: str) -> None:
    model = FakeModel()
    with serve(FakeEngine(model, engine)) as url:
        doc = collect(url)
    assert doc["kind"] == "logprobs" and doc["engine"] == engine and doc["top_k"] == 5
    assert doc["measured_from"] == "pod" and doc["scored_on"] == "own greedy"
    assert doc["method"] == ("vllm:prompt_logprobs" if engine == "vllm" else "sglang:input_top_logprobs")
    for p, prompt in zip(doc["prompts"], PROMPTS, strict=True):
        ids = tokenize(prompt["messages"][0]["content"])
        assert p["prompt_ids"] == ids
        assert p["greedy_ids"] == p["scored_ids"] == model.greedy(ids, 8)
        assert len(p["positions"]) == 8
        for j, pos in enumerate(p["positions"]):
            full = model.logprobs(ids + p["scored_ids"][:j])
            assert pos["token"] == p["scored_ids"][j]
            assert pos["logprob"] == pytest.approx(full[pos["token"]], abs=1e-12)
            best = sorted(range(len(full)), key=lambda v: -full[v])[:5]
            assert [t for t, _ in pos["top"]] == best  # top-k, best first
            assert pos["top"][0][0] == pos["token"]  # greedy = argmax
    assert kl.reference_self_agreement(doc)["top1_is_greedy_token"] == 1.0


@pytest.mark.parametrize("engine", ["vllm", "sglang"])
def test_candidate_is_scored_on_the_reference_tokens_and_matches_the_direct_kl(engine: str) -> None:
    ref_model, cand_model = FakeModel(), FakeModel(noise=1.2)
    with serve(FakeEngine(ref_model, engine)) as url:
        ref = collect(url)
    with serve(FakeEngine(cand_model, engine)) as url:
        cand = collect(url, reference=slim_reference(ref))
    assert cand["scored_on"] == "reference"
    for r, c in zip(ref["prompts"], cand["prompts"], strict=True):
        assert c["scored_ids"] == r["scored_ids"] and c["tokenizer_match"] is True
        assert c["greedy_ids"] == cand_model.greedy(r["prompt_ids"], 8)
    result = kl.compare(ref, cand)
    expected = direct_kl(ref_model, cand_model, ref, 5)
    assert result["positions"] == len(expected) == 16
    assert result["kl"]["mean"] == pytest.approx(float(np.mean(expected)), abs=1e-9)
    assert result["kl"]["p99"] == pytest.approx(float(np.percentile(expected, 99)), abs=1e-9)
    assert result["kl"]["mean"] > 0.01
    assert 0 <= result["top1_agreement"] < 1


def test_identical_candidate_gives_zero_kl_and_full_agreement() -> None:
    with serve(FakeEngine(FakeModel())) as url:
        ref = collect(url)
        cand = collect(url, reference=slim_reference(ref))
    result = kl.compare(ref, cand)
    assert result["kl"]["max"] == 0.0 and result["top1_agreement"] == 1.0
    assert result["diverged_prompts"] == 0


def test_sglang_flat_top_logprobs_read_like_the_nested_ones() -> None:
    with serve(FakeEngine(FakeModel(), "sglang")) as url:
        nested = collect(url)
    with serve(FakeEngine(FakeModel(), "sglang", flat=True)) as url:
        flat = collect(url)
    assert [p["positions"] for p in flat["prompts"]] == [p["positions"] for p in nested["prompts"]]


def test_vllm_without_return_token_ids_falls_back_to_logprob_tokens() -> None:
    model = FakeModel()
    engine = FakeEngine(model, legacy=True)
    with serve(engine) as url:
        doc = collect(url)
    ids = doc["prompts"][0]["prompt_ids"]
    assert doc["prompts"][0]["greedy_ids"] == model.greedy(ids, 8)
    assert any(b.get("return_tokens_as_token_ids") for _, b in engine.requests)


def test_requests_are_greedy_and_teacher_forced() -> None:
    engine = FakeEngine(FakeModel())
    with serve(engine) as url:
        doc = collect(url, k=7)
    scoring = [b for path, b in engine.requests if path == "/v1/completions" and "prompt_logprobs" in b]
    greedy = [b for path, b in engine.requests if path == "/v1/completions" and "prompt_logprobs" not in b]
    assert len(scoring) == len(greedy) == 2
    for b, p in zip(scoring, doc["prompts"], strict=True):
        assert b["prompt"] == p["prompt_ids"] + p["scored_ids"]
        assert b["max_tokens"] == 1 and b["prompt_logprobs"] == 7 and b["logprobs"] == 7
    assert all(b["temperature"] == 0 and b["max_tokens"] == 8 for b in greedy)


def test_a_token_the_candidate_rules_out_makes_kl_infinite() -> None:
    with serve(FakeEngine(FakeModel())) as url:
        ref = collect(url)
    banned = ref["prompts"][0]["scored_ids"][0]
    with serve(FakeEngine(FakeModel(minus_inf={banned}))) as url:
        cand = collect(url, reference=slim_reference(ref))
    result = kl.compare(ref, cand)
    assert result["kl"]["infinite"] >= 1 and result["worst"][0]["infinite"] is True
    assert result["top1_agreement"] < 1
    assert math.isfinite(result["kl"]["mean"])


def test_sglang_misaligned_logprobs_are_refused() -> None:
    meta = {"input_token_logprobs": [[None, 1, None], [-0.5, 9, None]],
            "input_top_logprobs": [None, [[-0.5, 9, None]]]}
    with pytest.raises(ProbeError, match="line up"):
        probe.sglang_positions(meta, [1, 2], 0, 1, 5)


def test_vllm_prompt_logprobs_without_the_forced_token_are_refused() -> None:
    entries = [None, {"4": {"logprob": -0.1, "rank": 1}}]
    with pytest.raises(ProbeError, match="own token"):
        probe.vllm_positions(entries, [1, 2], 1, 5)


def test_the_verb_answers_through_the_driver_and_errors_never_leak_the_key(
    tmp_path: Path,
) -> None:
    secret = "sk-kl-secret-value-1234"
    env = {"TAILPOD_PROBE_API_KEY": secret, "PATH": "/usr/bin:/bin"}
    agent = PodAgent(SubprocessTransport(tmp_path / "pod", env=env))
    engine = FakeEngine(FakeModel())
    with serve(engine) as url:
        ok = agent.logprobs({"base_url": url, "prompts": PROMPTS, "top_k": 3, "max_tokens": 4})
        assert ok["summary"]["positions"] == 8 and ok["summary"]["errors"] == []
        assert ok["logprobs"]["prompts"][1]["id"] == "b"
        out = tmp_path / "out.json"
        written = agent.logprobs({"base_url": url, "prompts": PROMPTS, "top_k": 3,
                                  "max_tokens": 4, "out": str(out)})  # fmt: skip
        assert "logprobs" not in written and json.loads(out.read_text())["prompts"][1]["id"] == "b"
        engine.fail_with = (500, "boom, saw")  # the fake echoes the Authorization header back
        with pytest.raises(AgentError) as bad:
            agent.logprobs({"base_url": url, "prompts": PROMPTS, "model": "fake"})
    assert bad.value.kind == "logprobs" and bad.value.exit_status == 1
    assert "/tokenize answered HTTP 500: " in bad.value.message
    assert secret not in bad.value.message + " ".join(bad.value.tail)
    assert "***" in bad.value.message
    with pytest.raises(AgentError) as missing:
        agent.logprobs({"prompts_file": "nope.json"})
    assert missing.value.kind == "usage" and missing.value.exit_status == 2


def test_the_shipped_prompt_set_has_three_classes_and_loads_in_the_probe() -> None:
    prompts = load_prompts()
    assert {p["class"] for p in prompts} == {"prose", "code", "structured"}
    assert len({p["id"] for p in prompts}) == len(prompts) >= 9
    assert probe.load_logprob_prompts(str(PROMPTS_FILE)) == prompts
    assert [p["class"] for p in load_prompts(classes=["code"])] == ["code"] * 4
    # It lives in a subfolder, so the benchmark's prompt classes stay its own four.
    assert set(load_prompt_classes(None, None)) == {
        "prose", "code", "structured", "tools"
    }
