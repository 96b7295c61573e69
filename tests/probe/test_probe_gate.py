"""The token-identity gate between two live endpoints."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from tailpod.probes import probe
from tailpod.sandbox.synthetic_server import SyntheticServer


def gate(ref: SyntheticServer, cand: SyntheticServer, tmp_path: Path, *extra: str
         ) -> tuple[int, dict]:
    out = tmp_path / "gate.json"
    rc = probe.main(["gate", "--reference", ref.base_url, "--candidate", cand.base_url,
                     "--max-tokens", "24", "--out", str(out), *extra])
    return rc, json.loads(out.read_text())


def test_identical_endpoints_pass_on_token_ids(
    synthetic: Callable[..., SyntheticServer], tmp_path: Path
) -> None:
    ref, cand = synthetic(), synthetic()
    rc, result = gate(ref, cand, tmp_path)
    assert rc == 0
    assert result["status"] == "pass" and result["method"] == "token_ids"
    assert result["token_source"] == "return_token_ids"
    assert result["prompts"] == len(probe.GATE_PROMPTS) and result["first_mismatch"] is None
    body = cand.stats.bodies[0]
    assert body["temperature"] == 0 and body["ignore_eos"] is True and body["seed"] == 0
    assert body["max_tokens"] == 24 and body["return_token_ids"] is True


def test_planted_divergence_fails_at_its_first_position(
    synthetic: Callable[..., SyntheticServer], tmp_path: Path
) -> None:
    marker = "water cycle"  # only the third gate prompt diverges
    ref = synthetic()
    cand = synthetic(diverge_position=7, diverge_marker=marker)
    rc, result = gate(ref, cand, tmp_path)
    assert rc == 1 and result["status"] == "fail"
    prompt_index = next(i for i, p in enumerate(probe.GATE_PROMPTS)
                        if marker in p["messages"][0]["content"])
    mismatch = result["first_mismatch"]
    assert mismatch["prompt"] == prompt_index and mismatch["position"] == 7
    text = probe.prompt_text(probe.GATE_PROMPTS[prompt_index]["messages"])
    assert mismatch["reference_token"] == ref.token_sequence(text, 24)[7]
    assert mismatch["candidate_token"] == cand.token_sequence(text, 24)[7]
    assert mismatch["reference_token"] != mismatch["candidate_token"]


def test_falls_back_to_logprob_ids_then_text(
    synthetic: Callable[..., SyntheticServer], tmp_path: Path
) -> None:
    ref, cand = synthetic(token_ids=False), synthetic(token_ids=False)
    rc, result = gate(ref, cand, tmp_path)
    assert rc == 0 and result["token_source"] == "logprobs" and result["method"] == "token_ids"
    plain = {"token_ids": False, "logprobs_token_ids": False, "generate_endpoint": False}
    ref2 = synthetic(**plain)
    cand2 = synthetic(**plain, diverge_position=3)
    rc, result = gate(ref2, cand2, tmp_path)
    assert rc == 1 and result["method"] == "text"  # said plainly: not a token comparison
    assert result["first_mismatch"]["prompt"] == 0


def test_sglang_output_ids_method(
    synthetic: Callable[..., SyntheticServer], tmp_path: Path
) -> None:
    ref, cand = synthetic(), synthetic(diverge_position=5)
    rc, result = gate(ref, cand, tmp_path, "--method", "output_ids")
    assert rc == 1 and result["token_source"] == "output_ids"
    assert result["first_mismatch"]["position"] == 5
    assert "text" in cand.stats.bodies[0] and "sampling_params" in cand.stats.bodies[0]


def test_length_difference_is_a_mismatch() -> None:
    assert probe._first_difference([1, 2, 3], [1, 2]) == 2
    assert probe._first_difference([1, 2], [1, 2]) is None
    assert probe._first_difference("abc", "abd") == 2


def test_unreachable_candidate_is_an_error_exit(
    synthetic: Callable[..., SyntheticServer], tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    ref = synthetic()
    rc = probe.main(["gate", "--reference", ref.base_url, "--candidate", "http://127.0.0.1:9",
                     "--model", "synthetic"])
    assert rc == 2
    assert json.loads(capsys.readouterr().out)["status"] == "error"


def test_prompts_file_overrides(
    synthetic: Callable[..., SyntheticServer], tmp_path: Path
) -> None:
    prompts = tmp_path / "gate-prompts.json"
    prompts.write_text(json.dumps([{"messages": [{"role": "user", "content": "one"}]},
                                   {"messages": [{"role": "user", "content": "two"}]}]))
    rc, result = gate(synthetic(), synthetic(), tmp_path, "--prompts-file", str(prompts))
    assert rc == 0 and result["prompts"] == 2


def test_saved_reference_then_compare(
    synthetic: Callable[..., SyntheticServer], tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    """Arms that cannot serve at the same time: record the plain arm, compare each spec arm."""
    ref_file = tmp_path / "reference.json"
    plain = synthetic()
    assert probe.main(["gate", "--candidate", plain.base_url, "--save-reference", str(ref_file),
                       "--max-tokens", "20"]) == 0
    saved = json.loads(ref_file.read_text())
    assert saved["kind"] == "gate_reference" and saved["token_source"] == "return_token_ids"
    assert len(saved["outputs"]) == len(probe.GATE_PROMPTS) == len(saved["prompts"])
    assert json.loads(capsys.readouterr().out)["status"] == "saved"

    same = synthetic()
    out = tmp_path / "gate.json"
    assert probe.main(["gate", "--reference-file", str(ref_file), "--candidate", same.base_url,
                       "--out", str(out)]) == 0
    assert json.loads(out.read_text())["status"] == "pass"
    assert same.stats.bodies[0]["max_tokens"] == 20  # the reference's length, always

    drifted = synthetic(diverge_position=11)
    assert probe.main(["gate", "--reference-file", str(ref_file), "--candidate",
                       drifted.base_url, "--out", str(out)]) == 1
    result = json.loads(out.read_text())
    assert result["first_mismatch"]["prompt"] == 0 and result["first_mismatch"]["position"] == 11

    no_ids = synthetic(token_ids=False, logprobs_token_ids=False, generate_endpoint=False)
    assert probe.main(["gate", "--reference-file", str(ref_file), "--candidate",
                       no_ids.base_url, "--out", str(out)]) == 0
    assert json.loads(out.read_text())["method"] == "text"  # said plainly


def test_bad_reference_file_is_an_error(
    synthetic: Callable[..., SyntheticServer], tmp_path: Path
) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"something": "else"}))
    assert probe.main(["gate", "--reference-file", str(bad), "--candidate",
                       synthetic().base_url]) == 2
    with pytest.raises(SystemExit):  # one reference source is required
        probe.main(["gate", "--candidate", "http://127.0.0.1:1"])
