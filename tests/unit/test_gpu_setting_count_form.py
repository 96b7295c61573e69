"""TAILPOD_GPUS takes the `NAME:N` form `--gpu` takes (SkyPilot's `A40:2`): the count becomes the
GPU count per pod, in the environment and the env file as on the command line. Before, the env
value reached the offer query whole, as a card named 'NVIDIA A40:2' that no provider sells."""

from __future__ import annotations

from pathlib import Path

import pytest

from tailpod.config import load_settings
from tailpod.errors import ConfigError


def _load(tmp_path: Path, env: dict[str, str], **flags: object):
    return load_settings(overrides=flags, env=env, dotenv_path=tmp_path / "absent.env")


def test_the_environment_count_form_gives_names_and_count(tmp_path: Path) -> None:
    s = _load(tmp_path, {"TAILPOD_GPUS": "NVIDIA A40:2,NVIDIA L40S:2"})
    assert s.gpus == ("NVIDIA A40", "NVIDIA L40S")
    assert s.gpu_count == 2


def test_the_env_file_count_form_too(tmp_path: Path) -> None:
    envfile = tmp_path / "tp.env"
    envfile.write_text("TAILPOD_GPUS=A40:4\n")
    s = load_settings(env={}, dotenv_path=envfile)
    assert (s.gpus, s.gpu_count) == (("A40",), 4)


def test_names_without_a_count_keep_the_count_setting(tmp_path: Path) -> None:
    s = _load(tmp_path, {"TAILPOD_GPUS": "A40", "TAILPOD_GPU_COUNT": "3"})
    assert (s.gpus, s.gpu_count) == (("A40",), 3)


@pytest.mark.parametrize("env, flags, said", [
    ({"TAILPOD_GPUS": "A40:2", "TAILPOD_GPU_COUNT": "3"}, {}, "TAILPOD_GPUS"),
    ({"TAILPOD_GPUS": "A40:2"}, {"gpu_count": 3}, "TAILPOD_GPUS"),
    ({"TAILPOD_GPUS": "A40:2,L40S:1"}, {}, "different counts"),
    ({"TAILPOD_GPUS": "A40:0"}, {}, "TAILPOD_GPUS"),
    ({"TAILPOD_GPUS": "A40:nan"}, {}, "TAILPOD_GPUS"),
])
def test_counts_that_disagree_or_are_not_counts_are_refused_naming_the_setting(
        tmp_path: Path, env: dict[str, str], flags: dict[str, object], said: str) -> None:
    with pytest.raises(ConfigError) as err:
        _load(tmp_path, env, **flags)
    assert said in err.value.message
