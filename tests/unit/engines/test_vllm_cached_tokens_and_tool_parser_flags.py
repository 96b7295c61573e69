"""vLLM is started so that the figures issue 39 reports can exist: `--enable-prompt-tokens-details`
on every arm whose version certainly fills `usage.prompt_tokens_details.cached_tokens` (V1 from
vllm#18149, released in 0.9.0; the CPU build 0.32.0 has the flag), so session replay can say how
much of each turn's prompt the prefix cache served; and `--enable-auto-tool-choice
--tool-call-parser NAME` when the run measures the tools class (vLLM refuses a forced
tool_choice without a parser). The user's own spelling in the extra arguments always wins."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tailpod.cli import benchmark as benchmark_cli
from tailpod.cli.main import app
from tailpod.engines.base import EngineConfig, SpecArm
from tailpod.engines.vllm import VllmAdapter, tool_parser_for

DETAILS = "--enable-prompt-tokens-details"


def _argv(k: int = 0, version: str | None = "0.32.0", extra: tuple[str, ...] = (),
          parser: str | None = None) -> list[str]:
    cfg = EngineConfig(engine="vllm", model="/models/m", version=version, extra_args=extra,
                       spec=SpecArm(k=k, method="ngram" if k else None),
                       tool_call_parser=parser)
    return VllmAdapter().launch_plan(cfg).argv


@pytest.mark.parametrize(("version", "expected"), [
    ("0.32.0", True), ("0.9.0", True), (None, True), ("2025-06-01", True),
    ("0.8.5", False), ("2025-05-01", False),
])
@pytest.mark.parametrize("k", [0, 2])
def test_every_arm_asks_for_cached_tokens_where_the_version_fills_them(
    version: str | None, expected: bool, k: int
) -> None:
    assert (DETAILS in _argv(k, version)) == expected


@pytest.mark.parametrize("extra", [(DETAILS,), ("--no-enable-prompt-tokens-details",)])
def test_the_users_own_setting_wins(extra: tuple[str, ...]) -> None:
    argv = _argv(0, "0.32.0", extra)
    assert argv.count(extra[0]) == 1 and (extra[0] == DETAILS or DETAILS not in argv)


def test_the_tool_parser_comes_with_auto_tool_choice_only_when_asked() -> None:
    assert "--tool-call-parser" not in _argv(2)
    argv = _argv(2, parser="hermes")
    i = argv.index("--tool-call-parser")
    assert argv[i + 1] == "hermes" and "--enable-auto-tool-choice" in argv
    own = _argv(0, extra=("--tool-call-parser", "mistral"), parser="hermes")
    assert own.count("--tool-call-parser") == 1 and "hermes" not in own


@pytest.mark.parametrize(("model", "parser"), [
    ("Qwen/Qwen3-8B", "hermes"), ("/models/qwen2.5-7b-instruct", "hermes"),
    ("Qwen/Qwen3-Coder-30B-A3B-Instruct", "qwen3_coder"),
    ("meta-llama/Llama-3.1-8B-Instruct", "llama3_json"),
    ("mistralai/Mistral-7B-Instruct-v0.3", "mistral"), ("/models/tiny", "hermes"),
])
def test_the_parser_follows_the_checkpoint_family(model: str, parser: str) -> None:
    assert tool_parser_for(model)[0] == parser
    assert ("no family known" in tool_parser_for(model)[1]) == (model == "/models/tiny")


def test_a_parser_without_the_tools_class_is_refused_before_the_ledger(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TAILPOD_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("TAILPOD_ENV_FILE", os.devnull)
    seen: list[str] = []
    monkeypatch.setattr(benchmark_cli, "ledger_for", lambda settings: seen.append("ledger"))
    for args, words in (
        (["--tool-call-parser", "hermes", "--prompt-classes", "prose"],
         "--tool-call-parser is for the tools class; --prompt-classes has none"),
        (["--tool-call-parser", "her mes;rm", "--prompt-classes", "tools"],
         "--tool-call-parser 'her mes;rm' is not a parser name"),
    ):
        result = CliRunner().invoke(app, ["benchmark", "tp-x", *args])
        assert result.exit_code == 2, result.output
        assert words in " ".join(result.output.split())
        assert "╭" not in result.output
    assert seen == []


def test_the_sweeps_arms_carry_the_parser_only_with_the_tools_class() -> None:
    base = EngineConfig(engine="vllm", model="Qwen/Qwen3-0.6B")
    assert benchmark_cli._with_tool_parser(base, ["prose"], None) == base
    assert benchmark_cli._with_tool_parser(base, ["tools"], None).tool_call_parser == "hermes"
    assert benchmark_cli._with_tool_parser(base, ["tools"], "mistral").tool_call_parser \
        == "mistral"
    # SGLang's and llama.cpp's: tests/unit/engines/test_sglang_tool_parser_flag.py
