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


# (field, environment variable, a bad value as the environment spells it, the problem's text
# before its origin), written out from the checks' documented bounds (docs/cli.md, "Settings").
BAD = [
    ("first_contact", "TAILPOD_FIRST_CONTACT", "sometimes",
     "first contact must be one of auto, off, got 'sometimes'"),
    ("port", "TAILPOD_PORT", "65536", "--port must be 1-65535, got 65536"),
    ("max_price", "TAILPOD_MAX_PRICE", "-1", "--max-price must be a positive number (finite), "
     "got -1.0"),
    ("ttl_hours", "TAILPOD_TTL_HOURS", "169", "--ttl-hours must be a positive number (at most "
     "168), got 169.0"),
    ("heartbeat_timeout_s", "TAILPOD_HEARTBEAT_TIMEOUT", "0", "the heartbeat timeout must be a "
     "positive number (finite), got 0.0"),
    ("startup_timeout_s", "TAILPOD_STARTUP_TIMEOUT", "inf", "the startup timeout must be a "
     "positive number (finite), got inf"),
    ("gpu_count", "TAILPOD_GPU_COUNT", "17", "--gpu-count must be 1-16, got 17"),
    ("disk_gb", "TAILPOD_DISK_GB", "0", "the disk size must be positive, got 0"),
]


@pytest.mark.parametrize(("field", "env", "raw", "text"), BAD, ids=[b[0] for b in BAD])
def test_each_bad_run_setting_names_where_it_came_from(field: str, env: str, raw: str, text: str,
                                                       tmp_path: Path) -> None:
    from tailpod.config import run_settings_problems

    from_env = load_settings(env={env: raw}, dotenv_path=tmp_path / "x")
    assert run_settings_problems(from_env) == [f"{text} (from environment variable {env})"]
    built = Settings(**{field: getattr(from_env, field)})  # made in code: no source recorded
    assert run_settings_problems(built) == [f"{text} ({env})"]


def test_no_ttl_is_accepted_and_a_one_hour_ttl_too() -> None:
    from tailpod.config import run_settings_problems

    assert run_settings_problems(Settings(ttl_hours=0)) == []
    assert run_settings_problems(Settings(ttl_hours=1)) == []
    assert run_settings_problems(Settings(ttl_hours=-1)) == [
        "--ttl-hours must be a positive number (at most 168), got -1 (TAILPOD_TTL_HOURS)"]


@pytest.mark.parametrize(("line", "problem"), [
    ("TAILPOD_MODEL\n", "is not KEY=VALUE (no '=')"),
    ("1MODEL=x\n", "is not KEY=VALUE (the name before '=' is not a valid variable name)"),
    ('HF_TOKEN="abc\n', "opens a quote (\") in HF_TOKEN's value that is never closed; close it "
     "or drop the quotes"),
    ("K=''junk\n", "sets K in a form python-dotenv does not read (stray characters after a "
     "quote?)"),
    ("K=a'b\n", "sets K in a form python-dotenv does not read (stray characters after a quote?)"),
])
def test_a_refused_env_line_is_explained_in_words(line: str, problem: str) -> None:
    from tailpod.config import dotenv_line_problem

    assert dotenv_line_problem(line) == problem


def test_a_secret_given_as_a_secret_is_kept_and_an_empty_one_is_unset(tmp_path: Path) -> None:
    token = Secret("hf_" + "k" * 20)
    assert load_settings({"hf_token": token}, env={}, dotenv_path=tmp_path / "x").hf_token is token
    assert load_settings({"hf_token": Secret("")}, env={},
                         dotenv_path=tmp_path / "x").hf_token is None


def test_an_env_file_named_but_missing_is_refused_with_the_fix(tmp_path: Path) -> None:
    missing = tmp_path / "nope.env"
    with pytest.raises(ConfigError) as err:
        load_settings(env={"TAILPOD_ENV_FILE": str(missing)})
    assert err.value.message == f"TAILPOD_ENV_FILE names {missing}, which does not exist"
    assert err.value.hint == ("create it (see .env.example), point TAILPOD_ENV_FILE at your .env, "
                              "or unset it to read ./.env")


def test_env_name_is_the_variable_declared_on_the_field() -> None:
    from tailpod.config import env_name

    assert [env_name(f) for f in ("port", "hf_token", "heartbeat_timeout_s")] == [
        "TAILPOD_PORT", "HF_TOKEN", "TAILPOD_HEARTBEAT_TIMEOUT"]


def test_the_ttl_deadline_is_now_plus_the_hours_or_none() -> None:
    from tailpod.config import no_ttl, ttl_deadline

    assert ttl_deadline(2.5, 1_000.0) == 1_000.0 + 9_000.0
    assert ttl_deadline(0.5, 1_000.0) == 1_000.0 + 1_800.0  # under an hour is still a TTL
    assert ttl_deadline(0, 1_000.0) is None
    assert no_ttl(Settings(ttl_hours=0)) is True and no_ttl(Settings(ttl_hours=0.5)) is False
    for bad in (-1.0, float("nan"), float("inf")):
        with pytest.raises(ConfigError) as err:
            ttl_deadline(bad, 0.0)
        assert err.value.message == (
            f"the TTL must be 0 (none) or a positive number of hours, got {bad}")
        assert err.value.hint == "set TAILPOD_TTL_HOURS, e.g. 4"


def test_no_ttl_is_said_before_renting_with_the_heartbeat_that_still_ends_the_pod() -> None:
    from tailpod.config import ttl_warnings

    assert ttl_warnings(Settings(ttl_hours=1)) == []
    assert ttl_warnings(Settings(ttl_hours=0, heartbeat_timeout_s=900.0)) == [
        "--ttl-hours 0: the pod has NO TTL (accepted explicitly); only the dead-man's heartbeat "
        "timeout (900 s without word from this laptop) or `tailpod down` ends it"]


def test_where_a_setting_came_from_is_forgotten_with_the_settings(tmp_path: Path) -> None:
    """The record of each value's source lives only as long as its Settings (a finalizer drops
    it), so a long run that loads settings many times keeps no stale sources, and a new Settings
    that reuses a dead one's id() never reads the dead one's sources."""
    import gc

    from tailpod import config

    s = load_settings(env={"TAILPOD_PORT": "9000"}, dotenv_path=tmp_path / "x")
    key = id(s)
    assert config.source_of(s, "port") == "environment variable TAILPOD_PORT"
    assert key in config._SOURCES
    del s
    gc.collect()
    assert key not in config._SOURCES
