"""`.env` diagnostics: an empty file holds no keys, a key beside a broken line is named as
there-but-unread, an unclosed quote is called one, a bad value names where it came from."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tailpod.cli.main import app
from tailpod.config import check_run_settings, load_settings
from tailpod.errors import ConfigError

DEAD = "http://127.0.0.1:9"


@pytest.fixture()
def env_file(tailpod_home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "test.env"
    monkeypatch.setenv("TAILPOD_ENV_FILE", str(path))
    for name in ("TAILPOD_RUNPOD_URL", "TAILPOD_TAILSCALE_URL", "TAILPOD_REGISTRY_URL",
                 "TAILPOD_REGISTRY_AUTH_URL", "TAILPOD_HF_URL"):
        monkeypatch.setenv(name, DEAD)
    for name in ("RUNPOD_API_KEY", "VAST_API_KEY", "TAILSCALE_API_KEY", "TAILSCALE_AUTH_KEY",
                 "HF_TOKEN"):
        monkeypatch.delenv(name, raising=False)
    return path


def _env_row(*args: str) -> dict:
    result = CliRunner().invoke(app, ["check-requirements", "--json", "--provider", "runpod",
                                      *args])
    return next(c for c in json.loads(result.stdout)["checks"] if c["name"] == "env")


def test_an_empty_env_file_is_said_to_be_empty_not_to_hold_keys(env_file: Path) -> None:
    env_file.write_text("")
    env_file.chmod(0o644)
    row = _env_row()
    assert "holds keys" not in row["detail"]
    assert f"{env_file} is empty" in row["detail"]


def test_a_world_readable_file_with_keys_names_them(env_file: Path) -> None:
    env_file.write_text("RUNPOD_API_KEY=rp_env_test_key_0001\nTAILPOD_ENGINE=vllm\n")
    env_file.chmod(0o644)
    row = _env_row()
    assert "readable by other users" in row["detail"] and "(RUNPOD_API_KEY)" in row["detail"]


def test_a_key_beside_a_broken_line_is_there_but_unread(env_file: Path) -> None:
    env_file.write_text("# keys\nRUNPOD_API_KEY=rp_env_test_key_0001\nnot an assignment\n")
    env_file.chmod(0o600)
    row = _env_row()
    assert "line 3 is not KEY=VALUE" in row["detail"]
    assert "RUNPOD_API_KEY is in test.env line 2, but the file was not read" in row["detail"]
    assert "RUNPOD_API_KEY is not set" not in row["detail"]
    assert "rp_env_test_key_0001" not in json.dumps(row)


def test_an_unclosed_quote_is_called_one(env_file: Path) -> None:
    env_file.write_text('TAILPOD_ENGINE=vllm\nRUNPOD_API_KEY="rp_env_test_key_0001\n')
    env_file.chmod(0o600)
    row = _env_row()
    assert "line 2 opens a quote (\") in RUNPOD_API_KEY's value that is never closed" \
        in row["detail"]
    # the same words where `up` and every other command read the file
    result = CliRunner().invoke(app, ["up", "--provider", "runpod"])
    assert result.exit_code == 2
    assert "never closed" in " ".join(result.output.split())
    assert "rp_env_test_key_0001" not in result.output


def test_a_bad_value_names_its_source(env_file: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    env_file.write_text("TAILPOD_TTL_HOURS=500\n")
    monkeypatch.setenv("TAILPOD_GPU_COUNT", "99")
    settings = load_settings(overrides={"max_price": -2.0})
    with pytest.raises(ConfigError) as caught:
        check_run_settings(settings)
    message = caught.value.message
    assert "--max-price must be a positive number (finite), got -2.0 (from the command line)" \
        in message
    assert f"got 500.0 (from {env_file} (TAILPOD_TTL_HOURS))" in message
    assert "got 99 (from environment variable TAILPOD_GPU_COUNT)" in message


@pytest.mark.parametrize("argv", [["up", "--provider", "local", "--model", "x"], ["status"],
                                  ["down", "--all"]])
def test_a_missing_tailpod_env_file_is_refused_before_anything(
    env_file: Path, tailpod_home: Path, argv: list[str]
) -> None:
    assert not env_file.exists()
    result = CliRunner().invoke(app, argv)
    assert result.exit_code == 2, result.output
    folded = "".join(result.stderr.split())  # rich folds long paths anywhere
    assert "".join(f"TAILPOD_ENV_FILE names {env_file}, which does not exist".split()) in folded
    assert not (tailpod_home / "ledger.json").exists()  # nothing written, nothing rented


def test_check_requirements_fails_a_missing_tailpod_env_file(env_file: Path) -> None:
    result = CliRunner().invoke(app, ["check-requirements", "--json", "--provider", "runpod"])
    failed = [c for c in json.loads(result.stdout)["checks"] if c["status"] == "fail"]
    assert any(f"TAILPOD_ENV_FILE names {env_file}" in c["detail"] for c in failed), failed
    assert result.exit_code != 0


def test_a_missing_default_env_file_is_not_an_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("TAILPOD_ENV_FILE", raising=False)
    monkeypatch.chdir(tmp_path)  # no ./.env here
    assert load_settings(env={}).provider  # reads on without one
