"""The settings loader's edges, each written for a mutant of tailpod/config.py that survived the
tests of the validators (docs/testing.md, "`make mutate`", `### config.py`): the default home, the
public view, the .env reader's errors, blank values, and where a bad value came from."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tailpod.config import Settings, default_home, load_settings, read_dotenv
from tailpod.errors import ConfigError
from tailpod.secrets import Secret

SECRET_FIELDS = ("ssh_key_passphrase", "runpod_api_key", "vast_api_key", "hf_token",
                 "tailscale_api_key", "tailscale_auth_key")


def test_the_default_home_follows_xdg_state_home(monkeypatch: pytest.MonkeyPatch,
                                                 tmp_path: Path) -> None:
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    assert default_home() == tmp_path / "state" / "tailpod"


def test_the_default_home_without_xdg_is_under_local_state(monkeypatch: pytest.MonkeyPatch,
                                                           tmp_path: Path) -> None:
    monkeypatch.delenv("XDG_STATE_HOME", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    assert default_home() == tmp_path / ".local" / "state" / "tailpod"
    monkeypatch.setenv("XDG_STATE_HOME", "")  # set but empty: the XDG spec says use the default
    assert default_home() == tmp_path / ".local" / "state" / "tailpod"


def test_the_public_view_of_empty_settings_says_every_secret_is_unset(tmp_path: Path) -> None:
    view = Settings(home=tmp_path / "h").public_view()
    assert {name: view[name] for name in SECRET_FIELDS} == dict.fromkeys(SECRET_FIELDS, "unset")
    assert view["home"] == str(tmp_path / "h") and isinstance(view["home"], str)
    assert view["port"] == 8000 and view["provider"] == "local" and view["gpus"] == ()
    assert set(view) == {f for f in Settings.__dataclass_fields__}


def test_the_public_view_of_full_settings_says_set_and_never_the_value(tmp_path: Path) -> None:
    secrets = {name: Secret(f"value-of-{name}-0123456789") for name in SECRET_FIELDS}
    settings = Settings(home=tmp_path, model="m", port=9001, gpus=("H200",), **secrets)
    view = settings.public_view()
    assert {name: view[name] for name in SECRET_FIELDS} == dict.fromkeys(SECRET_FIELDS, "set")
    assert (view["model"], view["port"], view["gpus"]) == ("m", 9001, ("H200",))
    assert "value-of-" not in repr(view)


def test_an_unreadable_env_file_is_named_with_its_cause(tmp_path: Path) -> None:
    folder = tmp_path / "a-folder.env"
    folder.mkdir()
    with pytest.raises(ConfigError) as err:
        read_dotenv(folder)
    assert err.value.message == f"cannot read {folder}: IsADirectoryError"
    latin = tmp_path / "latin.env"
    latin.write_bytes(b"TAILPOD_MODEL=caf\xe9\n")
    with pytest.raises(ConfigError) as err:
        read_dotenv(latin)
    assert err.value.message == f"cannot read {latin}: UnicodeDecodeError"


def test_a_malformed_env_line_is_named_by_number_with_the_fix(tmp_path: Path) -> None:
    env = tmp_path / ".env"
    env.write_text("TAILPOD_MODEL=m\nTAILPOD_PORT='9000\n")
    with pytest.raises(ConfigError) as err:
        read_dotenv(env)
    assert err.value.message == (f"{env}: line 2 opens a quote (') in TAILPOD_PORT's value that "
                                 "is never closed; close it or drop the quotes")
    assert err.value.hint == "fix or remove that line; see .env.example"


def test_a_bare_key_line_sets_nothing(tmp_path: Path) -> None:
    env = tmp_path / ".env"
    env.write_text("TAILPOD_MODEL\nTAILPOD_PORT=9000\n")
    assert read_dotenv(env) == {"TAILPOD_PORT": "9000"}


def test_blank_values_leave_settings_at_their_defaults(tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("XDG_STATE_HOME", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    env = {"TAILPOD_MODEL": "", "TAILPOD_IMAGE": "   ", "TAILSCALE_API_KEY": "",
           "HF_TOKEN": "  ", "TAILPOD_HOME": "", "TAILPOD_GPUS": ""}
    s = load_settings(env=env, dotenv_path=tmp_path / "none.env")
    assert (s.model, s.image, s.tailscale_api_key, s.hf_token, s.gpus) == ("", "", None, None, ())
    assert s.home == tmp_path / ".local" / "state" / "tailpod"


def test_a_list_keeps_its_items_and_drops_only_blank_ones(tmp_path: Path) -> None:
    s = load_settings(env={"TAILPOD_GPUS": " H200 , ,A100-80GB,"}, dotenv_path=tmp_path / "x")
    assert s.gpus == ("H200", "A100-80GB")
    s = load_settings({"gpus": [" H100 ", "", "L40S"]}, env={}, dotenv_path=tmp_path / "x")
    assert s.gpus == ("H100", "L40S")


def test_a_path_setting_expands_the_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    s = load_settings(env={"TAILPOD_HOME": "~/tp"}, dotenv_path=tmp_path / "x")
    assert s.home == tmp_path / "tp"


def test_the_env_file_is_dot_env_of_the_working_directory_by_default(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / ".env").write_text("TAILPOD_MODEL=from-dot-env\n")
    monkeypatch.chdir(tmp_path)
    assert load_settings(env={}).model == "from-dot-env"
    named = tmp_path / "other.env"
    named.write_text("TAILPOD_MODEL=from-named\n")
    assert load_settings(env={"TAILPOD_ENV_FILE": str(named)}).model == "from-named"


@pytest.mark.parametrize("where", ["flag", "env", "dotenv"])
def test_a_bad_number_names_its_setting_and_its_source(where: str, tmp_path: Path) -> None:
    dotenv = tmp_path / "t.env"
    dotenv.write_text("TAILPOD_PORT=eighty\n" if where == "dotenv" else "")
    overrides = {"port": "eighty"} if where == "flag" else None
    env = {"TAILPOD_PORT": "eighty"} if where == "env" else {}
    source = {"flag": "the command line", "env": "environment variable TAILPOD_PORT",
              "dotenv": f"{dotenv} (TAILPOD_PORT)"}[where]
    with pytest.raises(ConfigError) as err:
        load_settings(overrides, env=env, dotenv_path=dotenv)
    assert err.value.message == f"port from {source} must be a number, got 'eighty'"


def test_os_environ_is_read_when_no_env_is_given(monkeypatch: pytest.MonkeyPatch,
                                                 tmp_path: Path) -> None:
    monkeypatch.setenv("TAILPOD_MODEL", "from-os-environ")
    assert load_settings(dotenv_path=tmp_path / "x").model == "from-os-environ"
    assert os.environ["TAILPOD_MODEL"] == "from-os-environ"
