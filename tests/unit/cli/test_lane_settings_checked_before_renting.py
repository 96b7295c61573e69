"""`up --lanes` numbers checked before anything rents (issue 38 item 1, adversary F1, scenario 14):
a lane memory budget out of range, lanes' ports past 65535, `--spec-k` beside a different
`spec:K`, and a K past the bound are refused with exit 2 and one line, before the rental."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tailpod.cli.main import app
from tailpod.engines.base import MAX_SPEC_K
from tailpod.errors import ConfigError

BASE = ["up", "--provider", "runpod", "--gpu", "NVIDIA A40", "--max-price", "1",
        "--model", "org/m", "--image", "vllm/vllm-openai:v0.11.0", "--no-first-contact",
        "--spec-method", "ngram",  # no MTP head to read from the Hub (engines/checkpoint.py)
        "--lanes", "spec:2,plain", "--admission-limit", "2"]


@pytest.fixture()
def rentals(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> list[object]:
    """Every call that would rent the lanes' pod, recorded and stopped there."""
    import tailpod.pods.cloud as cloud_pods

    monkeypatch.setenv("TAILPOD_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("TAILPOD_ENV_FILE", os.devnull)
    calls: list[object] = []

    def rent(*a: object, **k: object) -> None:
        calls.append(k)
        raise ConfigError("rental reached")

    monkeypatch.setattr(cloud_pods, "up_cloud", rent)
    return calls


@pytest.mark.parametrize(("flags", "says"), [
    (["--lane-mem-fraction", "0"], "--lane-mem-fraction must be a number between 0 and 1"),
    (["--lane-mem-fraction", "1"], "--lane-mem-fraction must be a number between 0 and 1"),
    (["--lane-mem-fraction", "1.5"], "--lane-mem-fraction must be a number between 0 and 1"),
    (["--lane-mem-fraction", "nan"], "--lane-mem-fraction must be a number between 0 and 1"),
    (["--lane-kv-gib", "-1"], "--lane-kv-gib must be a positive number of GiB"),
    (["--lane-kv-gib", "0"], "--lane-kv-gib must be a positive number of GiB"),
    (["--lane-kv-gib", "nan"], "--lane-kv-gib must be a positive number of GiB"),
    (["--lane-kv-gib", "inf"], "--lane-kv-gib must be a positive number of GiB"),
    (["--port", "65535"], "--port 65535 leaves no room for the lanes"),
    (["--port", "65534"], "--port 65534 leaves no room for the lanes"),
    (["--spec-k", "3"], "--spec-k 3 disagrees with --lanes spec:2"),
    (["--lanes", "spec:99,plain"], f"K from 1 to {MAX_SPEC_K}"),
    (["--lanes", f"spec:{MAX_SPEC_K + 1},plain"], f"K from 1 to {MAX_SPEC_K}"),
    (["--spec-k", "99"], f"--spec-k must be 0 (plain decode) to {MAX_SPEC_K}, got 99"),
])
def test_up_lanes_refuses_a_bad_lane_setting_before_renting(
        rentals: list[object], flags: list[str], says: str) -> None:
    result = CliRunner().invoke(app, [*BASE, *flags])
    assert result.exit_code == 2, result.output
    assert says in " ".join(result.output.split())
    assert "Traceback" not in result.output
    assert rentals == []


@pytest.mark.parametrize("flag", [["--lane-kv-gib", "2"], ["--lane-mem-fraction", "0.4"],
                                  ["--admission-limit", "2"]])
def test_a_lane_setting_without_lanes_is_refused_not_ignored(rentals: list[object],
                                                             flag: list[str]) -> None:
    argv = [*BASE[:BASE.index("--lanes")], *flag]
    result = CliRunner().invoke(app, argv)
    assert result.exit_code == 2, result.output
    assert "they need --lanes spec:K,plain" in " ".join(result.output.split())
    assert rentals == []


@pytest.mark.parametrize("flags", [
    [], ["--lane-mem-fraction", "0.4"], ["--lane-kv-gib", "2"], ["--port", "65533"],
    ["--spec-k", "2"], ["--lanes", f"spec:{MAX_SPEC_K},plain"],
])
def test_good_lane_settings_do_reach_the_rental(rentals: list[object],
                                                flags: list[str]) -> None:
    """The stop above is reached only for bad values: the same command with good ones rents."""
    result = CliRunner().invoke(app, [*BASE, *flags])
    assert "rental reached" in result.output, result.output
    assert len(rentals) == 1
