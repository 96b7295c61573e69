"""The one validator `up`, `matrix` and `check-requirements` share (config.run_settings_problems),
pinned at every bound and by its exact words: the survivors of mutmut over tailpod/config.py's
validators (docs/testing.md). Expected lines are written out by hand."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from tailpod.config import Settings, check_run_settings, load_settings, run_settings_problems
from tailpod.errors import ConfigError


def base(tmp_path: Path) -> Settings:
    return load_settings(env={"TAILPOD_HOME": str(tmp_path)}, dotenv_path=tmp_path / "no.env")


@pytest.mark.parametrize("fields", [
    {"max_price": 0.5},  # under a dollar is a price, not "not positive"
    {"max_price": 0.01},
    {"ttl_hours": 0.5},
    {"ttl_hours": 168.0},  # the upper bound itself is allowed
    {"heartbeat_timeout_s": 0.5},
    {"startup_timeout_s": 0.5},
    {"gpu_count": 1},
    {"gpu_count": 16},
    {"disk_gb": 1},
    {"port": 1},
    {"port": 65535},
])
def test_values_at_and_inside_the_bounds_are_accepted(tmp_path: Path,
                                                      fields: dict[str, object]) -> None:
    assert run_settings_problems(replace(base(tmp_path), **fields)) == []  # type: ignore[arg-type]


def test_every_bad_value_is_named_with_its_flag_and_variable(tmp_path: Path) -> None:
    bad = replace(base(tmp_path), port=0, max_price=-1.0, ttl_hours=168.5,
                  heartbeat_timeout_s=0.0, startup_timeout_s=-3.0, gpu_count=17, disk_gb=0)
    expected = [
        "--port must be 1-65535, got 0 (TAILPOD_PORT)",
        "--max-price must be a positive number (finite), got -1.0 (TAILPOD_MAX_PRICE)",
        "--ttl-hours must be a positive number (at most 168), got 168.5 (TAILPOD_TTL_HOURS)",
        "the heartbeat timeout must be a positive number (finite), got 0.0 "
        "(TAILPOD_HEARTBEAT_TIMEOUT)",
        "the startup timeout must be a positive number (finite), got -3.0 "
        "(TAILPOD_STARTUP_TIMEOUT)",
        "--gpu-count must be 1-16, got 17 (TAILPOD_GPU_COUNT)",
        "the disk size must be positive, got 0 (TAILPOD_DISK_GB)",
    ]
    assert run_settings_problems(bad) == expected
    with pytest.raises(ConfigError) as err:
        check_run_settings(bad)
    assert err.value.message == "; ".join(expected) + "; nothing was rented"
    assert err.value.hint == "fix the flag or the environment variable named"
    assert err.value.exit_code == 2


def test_a_good_settings_passes_the_check(tmp_path: Path) -> None:
    check_run_settings(base(tmp_path))  # raises nothing
