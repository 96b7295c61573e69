"""`tailpod logs parse` and `tailpod inspect` through the CLI layer."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from tailpod.cli import engine_tools
from tailpod.sandbox import hub
from tests.unit.engines.mtp_ckpt_builder import build

TOKEN = "hf_cli_secret_token_987"


@pytest.fixture()
def app() -> typer.Typer:
    # Only this area's commands: the test does not depend on other modules being importable.
    root = typer.Typer(pretty_exceptions_enable=False)

    @root.callback()
    def _root() -> None:
        """test root"""

    engine_tools.register(root)
    return root


@pytest.fixture()
def runner() -> CliRunner:
    return CliRunner()


def _one_line_error(result: object) -> str:
    """The error text with rich's terminal wrapping undone; exactly one error, no traceback."""
    output = str(getattr(result, "output", ""))
    assert output.count("error:") == 1, output
    assert "Traceback" not in output
    return " ".join(output.split())


def test_logs_parse_prints_facts_json(
    app: typer.Typer, runner: CliRunner, engine_logs_dir: Path, tailpod_home: Path
) -> None:
    log = engine_logs_dir / "sglang_eagle_llama2_docsci_2025-04.txt"
    result = runner.invoke(app, ["logs", "parse", "--engine", "sglang", str(log)])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["engine"] == "sglang"
    assert data["facts"]["kv_tokens_draft"] == 20480
    assert data["facts"]["spec_algorithm"] == "EAGLE"
    assert data["lines"]


def test_logs_parse_reads_stdin(app: typer.Typer, runner: CliRunner, tailpod_home: Path) -> None:
    text = "INFO x [kv_cache_utils.py:1] CPU KV cache size: 524,288 tokens\n"
    result = runner.invoke(app, ["logs", "parse", "-e", "vllm", "-"], input=text)
    assert result.exit_code == 0
    assert json.loads(result.stdout)["facts"]["kv_tokens"] == 524288


def test_logs_parse_errors_are_one_clear_line(
    app: typer.Typer, runner: CliRunner, tmp_path: Path, tailpod_home: Path
) -> None:
    missing = runner.invoke(app, ["logs", "parse", "--engine", "vllm", str(tmp_path / "x.log")])
    assert missing.exit_code == 2
    assert "no such log file" in _one_line_error(missing)
    (tmp_path / "x.log").write_text("hello")
    unknown = runner.invoke(app, ["logs", "parse", "--engine", "tgi", str(tmp_path / "x.log")])
    assert unknown.exit_code == 2
    out = _one_line_error(unknown)
    assert "unknown engine" in out and "sglang" in out and "vllm" in out
    assert "Traceback" not in out


def test_inspect_table_json_and_fix(
    app: typer.Typer, runner: CliRunner, tmp_path: Path, tailpod_home: Path
) -> None:
    ckpt = build(
        tmp_path / "ckpt",
        architecture="Qwen3NextForCausalLM",
        naming="qwen",
        trunk_quant="nvfp4",
        quantization_config={"quant_method": "modelopt", "quant_algo": "NVFP4", "ignore": []},
    )
    table = runner.invoke(app, ["inspect", str(ckpt)])
    assert table.exit_code == 0, table.output
    assert "Qwen3NextForCausalLM" in table.stdout and "MTP ignore trap" in table.stdout
    assert "YES" in table.stdout
    as_json = runner.invoke(app, ["inspect", str(ckpt), "--json"])
    data = json.loads(as_json.stdout)
    assert data["mtp"]["naming"] == "qwen" and data["quant_method"] == "modelopt"
    assert "mtp.fc" in data["unquantized_mtp_not_ignored"]
    fixed = runner.invoke(
        app, ["inspect", str(ckpt), "--json", "--fix-into", str(tmp_path / "fix")]
    )
    assert fixed.exit_code == 0, fixed.output
    assert "mtp*" in json.loads(fixed.stdout)["fix"]["added"]
    again = json.loads(runner.invoke(app, ["inspect", str(tmp_path / "fix"), "--json"]).stdout)
    assert again["unquantized_mtp_not_ignored"] == []


def test_inspect_missing_or_non_checkpoint_path(
    app: typer.Typer, runner: CliRunner, tmp_path: Path, tailpod_home: Path
) -> None:
    missing = runner.invoke(app, ["inspect", str(tmp_path / "absent")])
    assert missing.exit_code == 2
    _one_line_error(missing)
    (tmp_path / "notckpt").mkdir()
    not_ckpt = runner.invoke(app, ["inspect", str(tmp_path / "notckpt")])
    assert not_ckpt.exit_code == 2
    assert "not a checkpoint" in _one_line_error(not_ckpt)


def test_inspect_hub_never_prints_the_token(
    app: typer.Typer,
    runner: CliRunner,
    tmp_path: Path,
    tailpod_home: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import huggingface_hub.constants as hf_constants

    monkeypatch.setattr(hf_constants, "HF_HUB_OFFLINE", False)
    build(tmp_path / "hub" / "org" / "gated", architecture="MiMoForCausalLM", naming="mimo")
    server, url = hub.serve(root=tmp_path / "hub", token=TOKEN, gated={"org/gated"})
    try:
        monkeypatch.setenv("HF_TOKEN", "hf_not_the_right_one_42")
        refused = runner.invoke(app, ["inspect", "org/gated", "--hf-url", url])
        assert refused.exit_code == 1
        assert "gated" in refused.output
        assert "hf_not_the_right_one_42" not in refused.output
        monkeypatch.setenv("HF_TOKEN", TOKEN)
        ok = runner.invoke(app, ["inspect", "org/gated", "--hf-url", url, "--json"])
        assert ok.exit_code == 0, ok.output
        assert json.loads(ok.stdout)["mtp"]["naming"] == "mimo"
        assert TOKEN not in ok.output
    finally:
        hub.shutdown(server)
