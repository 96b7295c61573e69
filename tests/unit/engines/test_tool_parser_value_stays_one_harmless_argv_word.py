"""`benchmark --tool-call-parser NAME` becomes `--tool-call-parser NAME` on the engine's command
line on the pod (engines/vllm.py tool_parser_args): a value the engine's argparse would read as
a flag of its own, or one shaped like a credential (it would sit in the pod's process list and
the run's argv), is refused with exit 2 before the ledger, and the refusal does not echo a
credential-shaped value."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tailpod.cli import benchmark as benchmark_cli
from tailpod.cli.main import app
from tailpod.engines.base import check_tool_parser
from tailpod.errors import ConfigError

HF_SHAPED = "hf_" + "Zq7" * 10  # the Hub's token shape: hf_ and 20+ letters or digits


@pytest.mark.parametrize("value", ["-h", "--trust-remote-code", "--served-model-name=x", "-"])
def test_a_value_the_engine_would_read_as_a_flag_is_refused(value: str) -> None:
    with pytest.raises(ConfigError, match="not a parser name"):
        check_tool_parser(value)


def test_a_credential_shaped_value_is_refused_without_echoing_it() -> None:
    with pytest.raises(ConfigError) as caught:
        check_tool_parser(HF_SHAPED)
    text = f"{caught.value} {caught.value.hint or ''}"
    assert "credential" in text
    assert HF_SHAPED not in text


@pytest.mark.parametrize("value", ["hermes", "llama3_json", "mistral", "pythonic", "qwen3_coder"])
def test_real_parser_names_pass(value: str) -> None:
    check_tool_parser(value)


@pytest.mark.parametrize("value", ["--trust-remote-code", HF_SHAPED])
def test_cli_refuses_before_the_ledger(value: str, tmp_path: Path,
                                       monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TAILPOD_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("TAILPOD_ENV_FILE", os.devnull)
    seen: list[str] = []
    monkeypatch.setattr(benchmark_cli, "ledger_for", lambda settings: seen.append("ledger"))
    result = CliRunner().invoke(app, ["benchmark", "tp-x", f"--tool-call-parser={value}",
                                      "--prompt-classes", "tools"])
    assert result.exit_code == 2, result.output
    assert HF_SHAPED not in result.output
    assert "Traceback" not in result.output
    assert seen == []


def test_a_value_equal_to_a_loaded_secret_is_refused_once_the_settings_are_read() -> None:
    """A secret of no known shape is masked by value only once the settings have registered it,
    which is after the flags are checked: the parser is checked again where the pod's engine
    config is built (cli/benchmark.py _with_tool_parser), before anything starts."""
    from tailpod.cli.benchmark import _with_tool_parser
    from tailpod.engines.base import EngineConfig
    from tailpod.secrets import Secret

    value = "plainParserSecret42"  # no credential shape, a valid parser word
    check_tool_parser(value)  # not known yet: nothing to tell it from a parser name
    Secret(value)  # what load_settings does with HF_TOKEN and the provider keys
    with pytest.raises(ConfigError) as caught:
        _with_tool_parser(EngineConfig(engine="vllm", model="org/tiny"), ["tools"], value)
    assert value not in f"{caught.value} {caught.value.hint or ''}"
