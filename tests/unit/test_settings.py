from __future__ import annotations

from pathlib import Path

import pytest

from tailpod.config import Settings, load_settings
from tailpod.errors import ConfigError
from tailpod.secrets import Secret, redact
from tests import paths


def test_precedence_flags_over_env_over_dotenv_over_defaults(tmp_path: Path) -> None:
    dotenv = tmp_path / ".env"
    dotenv.write_text("TAILPOD_PORT=7001\nTAILPOD_ENGINE=sglang\nTAILPOD_MODEL=from-dotenv\n")
    env = {"TAILPOD_PORT": "7002", "TAILPOD_ENGINE": "vllm"}
    s = load_settings(overrides={"port": 7003, "engine": None}, env=env, dotenv_path=dotenv)
    assert s.port == 7003  # flag wins
    assert s.engine == "vllm"  # env beats .env; a None flag means "not given"
    assert s.model == "from-dotenv"  # .env beats the default
    assert s.provider == Settings().provider == "local"  # default


def test_lists_and_numbers_parse(tmp_path: Path) -> None:
    s = load_settings(
        env={
            "TAILPOD_GPUS": "NVIDIA H100 80GB HBM3, NVIDIA A100 80GB PCIe",
            "TAILPOD_MAX_PRICE": "2.5",
        },
        dotenv_path=tmp_path / "none",
    )
    assert s.gpus == ("NVIDIA H100 80GB HBM3", "NVIDIA A100 80GB PCIe")
    assert s.max_price == 2.5


def test_bad_number_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="TAILPOD_PORT"):
        load_settings(env={"TAILPOD_PORT": "eighty"}, dotenv_path=tmp_path / "none")


def test_malformed_dotenv_names_the_line(tmp_path: Path) -> None:
    dotenv = tmp_path / ".env"
    dotenv.write_text("TAILPOD_PORT=7001\nthis line is not an assignment\n")
    with pytest.raises(ConfigError, match="line 2"):
        load_settings(env={}, dotenv_path=dotenv)


def test_secrets_are_masked_everywhere(tmp_path: Path) -> None:
    key = "rpa_SUPERSECRETVALUE123456"
    s = load_settings(env={"RUNPOD_API_KEY": key}, dotenv_path=tmp_path / "none")
    assert isinstance(s.runpod_api_key, Secret)
    assert s.runpod_api_key.reveal() == key
    for text in (str(s), repr(s), f"{s.runpod_api_key}", str(s.public_view())):
        assert key not in text
    assert s.public_view()["runpod_api_key"] == "set"
    assert redact(f"Authorization: Bearer {key}") == "Authorization: Bearer ***"


def test_secret_cannot_be_pickled() -> None:
    import pickle

    with pytest.raises(TypeError):
        pickle.dumps(Secret("abcdefgh"))


def test_empty_secret_is_unset(tmp_path: Path) -> None:
    s = load_settings(env={"HF_TOKEN": "  "}, dotenv_path=tmp_path / "none")
    assert s.hf_token is None


def test_env_example_parses_and_documents_every_setting() -> None:
    import dataclasses

    example = paths.REPO / ".env.example"
    s = load_settings(env={}, dotenv_path=example)
    assert s.provider == "local" and s.runpod_api_key is None
    text = example.read_text()
    for f in dataclasses.fields(Settings):
        assert f.metadata["env"] in text, f"{f.metadata['env']} is not documented in .env.example"
