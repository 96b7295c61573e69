"""Guarantees pinned against the one-line bugs of issue 26 that the suite let through: each test
here fails on its mutant (named in the docstring). Expected values are written out by hand."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from tailpod.config import load_settings, run_settings_problems
from tailpod.engines.vllm import parse_vllm_log
from tailpod.provision.apiclient import ApiError, summarize_body
from tailpod.secrets import Secret, redact

KEY = "rp_MUTANTpinKEY_0123456789abcdef"


def test_redact_masks_every_occurrence_not_only_the_first() -> None:
    """Mutant: `text.replace(value, MASK, 1)`."""
    Secret(KEY)
    text = f"a={KEY} b={KEY}\nc={KEY}"
    assert redact(text) == "a=*** b=***\nc=***"


def test_summarize_body_redacts_the_key_an_error_body_echoes() -> None:
    """Mutant: summarize_body without its `redact` (apiclient.py), which put the key into
    CapacityError text."""
    Secret(KEY)
    for body in ({"message": f"invalid key {KEY} for pod create"},
                 {"errors": [{"message": f"token {KEY} has no access"}]},
                 f"<html>key {KEY} refused</html>"):
        assert KEY not in summarize_body(body)
    # and through the error every adapter raises
    err = ApiError("RunPod", "creating a pod", 400, {"error": f"bad key {KEY}"})
    assert KEY not in str(err)


def _settings(tmp_path: Path, port: int) -> object:
    base = load_settings(env={"TAILPOD_HOME": str(tmp_path)}, dotenv_path=tmp_path / "no.env")
    return replace(base, port=port)


@pytest.mark.parametrize(("port", "ok"), [(0, False), (1, True), (65535, True), (65536, False)])
def test_the_port_bound_is_1_to_65535(tmp_path: Path, port: int, ok: bool) -> None:
    """Mutant: `<= 65536` (a TCP port is 16 bits: 65535 is the largest, RFC 793)."""
    problems = [p for p in run_settings_problems(_settings(tmp_path, port))  # type: ignore[arg-type]
                if "--port" in p]
    assert (problems == []) is ok, problems


@pytest.mark.parametrize("device", ["GPU", "CPU", "XPU", "NPU", "HPU"])
def test_every_kv_cache_size_spelling_is_read(device: str) -> None:
    """Mutant: the XPU/NPU/HPU alternatives dropped from vLLM's KV cache regex (vLLM logs
    `{device} KV cache size: N tokens` on each platform)."""
    line = f"INFO 05-01 12:00:00 [kv_cache_utils.py:716] {device} KV cache size: 123,456 tokens"
    assert parse_vllm_log(line + "\n").facts["kv_tokens"] == 123456
