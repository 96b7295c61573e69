"""SGLang parses tool calls, and constrains a forced `tool_choice`, only when it was started with
`--tool-call-parser NAME` (sgl-project/sglang python/sglang/srt/entrypoints/openai/serving_chat.py
@ 0c078e6: tool calls are handled when `request.tools and self.tool_call_parser`). Without it the
tools class reads no tool call on either arm, and the structure gate cannot see a speculative arm
that breaks them. So a run that measures the tools class starts every SGLang arm with the parser
SGLang names for the checkpoint's family (its FunctionCallParser.ToolCallParserEnum @ 00828e5),
or the one the user gave; SGLang has no `--enable-auto-tool-choice`."""

from __future__ import annotations

import pytest

from tailpod.cli import benchmark as benchmark_cli
from tailpod.engines.base import EngineConfig, SpecArm
from tailpod.engines.sglang import SglangAdapter
from tailpod.errors import ConfigError


def _argv(parser: str | None, extra: tuple[str, ...] = (), k: int = 2) -> list[str]:
    cfg = EngineConfig(engine="sglang", model="Qwen/Qwen2.5-7B-Instruct", extra_args=extra,
                       spec=SpecArm(k=k, method="mtp" if k else None), tool_call_parser=parser,
                       max_running_requests=8)
    return SglangAdapter().launch_plan(cfg).argv


def test_an_sglang_arm_gets_the_parser_only_when_asked() -> None:
    assert "--tool-call-parser" not in _argv(None)
    for k in (0, 2):
        argv = _argv("qwen25", k=k)
        assert argv[argv.index("--tool-call-parser") + 1] == "qwen25"
        assert "--enable-auto-tool-choice" not in argv  # a vLLM flag SGLang does not take


def test_the_users_own_parser_in_the_extra_arguments_wins() -> None:
    argv = _argv("qwen25", extra=("--tool-call-parser", "hermes"))
    assert argv.count("--tool-call-parser") == 1
    assert argv[argv.index("--tool-call-parser") + 1] == "hermes"
    argv = _argv("qwen25", extra=("--tool-call-parser=pythonic",))
    assert "--tool-call-parser" not in argv and "qwen25" not in argv


@pytest.mark.parametrize(("model", "parser"), [
    ("Qwen/Qwen2.5-7B-Instruct", "qwen25"), ("Qwen/Qwen3-8B", "qwen25"),
    ("Qwen/Qwen3-Coder-30B-A3B-Instruct", "qwen3_coder"),
    ("meta-llama/Llama-3.1-8B-Instruct", "llama3"),
    ("mistralai/Mistral-7B-Instruct-v0.3", "mistral"),
    ("deepseek-ai/DeepSeek-V3-0324", "deepseekv3"), ("deepseek-ai/DeepSeek-V3.1", "deepseekv31"),
    ("zai-org/GLM-4.6", "glm45"), ("moonshotai/Kimi-K2-Instruct", "kimi_k2"),
    ("openai/gpt-oss-20b", "gpt-oss"), ("XiaomiMiMo/MiMo-7B-RL", "mimo"),
    ("/models/tiny", "hermes"),
])
def test_sweeps_on_sglang_carry_sglangs_parser_for_the_family(model: str, parser: str) -> None:
    base = EngineConfig(engine="sglang", model=model)
    assert benchmark_cli._with_tool_parser(base, ["prose"], None) == base
    assert benchmark_cli._with_tool_parser(base, ["tools"], None).tool_call_parser == parser
    assert benchmark_cli._with_tool_parser(base, ["tools"], "hermes").tool_call_parser == "hermes"


def test_a_parser_for_an_engine_that_takes_none_is_refused() -> None:
    llama = EngineConfig(engine="llamacpp", model="/models/m.gguf")
    assert benchmark_cli._with_tool_parser(llama, ["tools"], None) == llama
    with pytest.raises(ConfigError, match="--tool-call-parser names a vLLM or SGLang parser; "
                                          "this pod serves llamacpp") as err:
        benchmark_cli._with_tool_parser(llama, ["tools"], "hermes")
    assert err.value.exit_code == 2
