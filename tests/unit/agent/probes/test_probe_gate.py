"""The token-identity gate between two live endpoints: the agent's `probe gate`. A gate that ran
and found a mismatch is a result (ok, status "fail", exit 0); a gate that could not run is an error."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from tailpod.agent.probes import gate, prompt_classes
from tailpod.sandbox.synthetic_server import SyntheticServer

from .conftest import call_agent

GATE_PROMPTS = prompt_classes.gate_prompts()


def gate_pair(ref: SyntheticServer, cand: SyntheticServer, **extra: object) -> dict:
    """`probe gate` of two live servers, which must run; its result."""
    code, envelope = call_agent("probe gate", {"reference_url": ref.base_url,
                                               "candidate": cand.base_url, "max_tokens": 24,
                                               **extra})
    assert code == 0 and envelope["ok"], envelope
    return dict(envelope["result"])


def test_identical_endpoints_pass_on_token_ids(
    synthetic: Callable[..., SyntheticServer], tmp_path: Path
) -> None:
    ref, cand = synthetic(), synthetic()
    result = gate_pair(ref, cand)
    assert result["status"] == "pass" and result["method"] == "token_ids"
    assert result["token_source"] == "return_token_ids"
    assert result["prompts"] == len(GATE_PROMPTS) and result["first_mismatch"] is None
    body = cand.stats.bodies[0]
    assert body["temperature"] == 0 and body["ignore_eos"] is True and body["seed"] == 0
    assert body["max_tokens"] == 24 and body["return_token_ids"] is True


def test_planted_divergence_fails_at_its_first_position(
    synthetic: Callable[..., SyntheticServer], tmp_path: Path
) -> None:
    marker = "water cycle"  # only the third gate prompt diverges
    ref = synthetic()
    cand = synthetic(diverge_position=7, diverge_marker=marker)
    result = gate_pair(ref, cand)
    assert result["status"] == "fail"
    prompt_index = next(i for i, p in enumerate(GATE_PROMPTS)
                        if marker in p["messages"][0]["content"])
    mismatch = result["first_mismatch"]
    assert mismatch["prompt"] == prompt_index and mismatch["position"] == 7
    text = prompt_classes.prompt_text(GATE_PROMPTS[prompt_index]["messages"])
    assert mismatch["reference_token"] == ref.token_sequence(text, 24)[7]
    assert mismatch["candidate_token"] == cand.token_sequence(text, 24)[7]
    assert mismatch["reference_token"] != mismatch["candidate_token"]


def test_falls_back_to_logprob_ids_then_text(
    synthetic: Callable[..., SyntheticServer], tmp_path: Path
) -> None:
    ref, cand = synthetic(token_ids=False), synthetic(token_ids=False)
    result = gate_pair(ref, cand)
    assert result["status"] == "pass" and result["token_source"] == "logprobs" and result["method"] == "token_ids"
    plain = {"token_ids": False, "logprobs_token_ids": False, "generate_endpoint": False}
    ref2 = synthetic(**plain)
    cand2 = synthetic(**plain, diverge_position=3)
    result = gate_pair(ref2, cand2)
    assert result["status"] == "fail" and result["method"] == "text"  # said plainly: not a token comparison
    assert result["first_mismatch"]["prompt"] == 0


def test_sglang_output_ids_method(
    synthetic: Callable[..., SyntheticServer], tmp_path: Path
) -> None:
    ref, cand = synthetic(), synthetic(diverge_position=5)
    result = gate_pair(ref, cand, method="output_ids")
    assert result["status"] == "fail" and result["token_source"] == "output_ids"
    assert result["first_mismatch"]["position"] == 5
    assert "text" in cand.stats.bodies[0] and "sampling_params" in cand.stats.bodies[0]


def test_length_difference_is_a_mismatch() -> None:
    assert gate._first_difference([1, 2, 3], [1, 2]) == 2
    assert gate._first_difference([1, 2], [1, 2]) is None
    assert gate._first_difference("abc", "abd") == 2


def test_unreachable_candidate_is_an_error_exit(
    synthetic: Callable[..., SyntheticServer], tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    ref = synthetic()
    code, envelope = call_agent("probe gate", {"reference_url": ref.base_url, "model": "synthetic",
                                               "candidate": "http://127.0.0.1:9"})
    assert code == 1 and not envelope["ok"] and envelope["error"]["kind"] == "gate"


def test_prompts_file_overrides(
    synthetic: Callable[..., SyntheticServer], tmp_path: Path
) -> None:
    prompts = [{"messages": [{"role": "user", "content": "one"}]},
               {"messages": [{"role": "user", "content": "two"}]}]
    result = gate_pair(synthetic(), synthetic(), prompts=prompts)
    assert result["status"] == "pass" and result["prompts"] == 2


def test_saved_reference_then_compare(
    synthetic: Callable[..., SyntheticServer], tmp_path: Path
) -> None:
    """Arms that cannot serve at the same time: record the plain arm, compare each spec arm. The
    reference comes back in the envelope and goes back in on stdin (nothing read over SFTP); a
    file on the pod works too."""
    ref_file = tmp_path / "reference.json"
    plain = synthetic()
    code, envelope = call_agent("probe gate", {"candidate": plain.base_url, "save": True,
                                               "save_path": str(ref_file), "max_tokens": 20})
    assert code == 0 and envelope["result"]["status"] == "saved"
    saved = envelope["result"]["reference"]
    assert saved == json.loads(ref_file.read_text())
    assert saved["kind"] == "gate_reference" and saved["token_source"] == "return_token_ids"
    assert len(saved["outputs"]) == len(GATE_PROMPTS) == len(saved["prompts"])

    def compare(candidate: SyntheticServer, **source: object) -> dict:
        code, envelope = call_agent("probe gate", {"candidate": candidate.base_url, **source})
        assert code == 0, envelope
        return dict(envelope["result"])

    same = synthetic()
    assert compare(same, reference=saved)["status"] == "pass"
    assert same.stats.bodies[0]["max_tokens"] == 20  # the reference's length, always

    drifted = synthetic(diverge_position=11)
    result = compare(drifted, reference_file=str(ref_file))
    assert result["status"] == "fail"
    assert result["first_mismatch"]["prompt"] == 0 and result["first_mismatch"]["position"] == 11

    no_ids = synthetic(token_ids=False, logprobs_token_ids=False, generate_endpoint=False)
    assert compare(no_ids, reference=saved)["method"] == "text"  # said plainly


def test_bad_reference_is_an_error(synthetic: Callable[..., SyntheticServer]) -> None:
    code, envelope = call_agent("probe gate", {"reference": {"something": "else"},
                                               "candidate": synthetic().base_url})
    assert code == 1 and envelope["error"]["kind"] == "gate"
    # one reference source is required, and only one
    code, envelope = call_agent("probe gate", {"candidate": "http://127.0.0.1:1"})
    assert code == 2 and envelope["error"]["kind"] == "usage"
    code, envelope = call_agent("probe gate", {"candidate": "http://127.0.0.1:1", "save": True,
                                               "reference_url": "http://127.0.0.1:2"})
    assert code == 2 and envelope["error"]["kind"] == "usage"


def test_the_served_name_is_asked_of_an_endpoint_only_where_a_method_needs_one(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """SGLang /generate's output_ids request names no model: a gate, a saved reference or a
    comparison with one that uses only that method asks no endpoint for its model's name."""
    asked: list[object] = []
    monkeypatch.setattr(gate, "discover_model", lambda ep: asked.append(ep) or "served")
    ep = gate.Endpoint.parse("http://127.0.0.1:9")
    assert gate._served_name(ep, "given", ("return_token_ids", "text")) == "given"
    assert gate._served_name(ep, None, ("output_ids",)) == ""
    assert asked == []
    assert gate._served_name(ep, None, ("output_ids", "text")) == "served"
    assert asked == [ep]
