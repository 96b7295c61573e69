"""A TAILPOD_HOME other users can write, while the ledger in it holds a pod that may bill (issue
38 item 8; adversary F11, #44): `status`, `down` and `down --all` exited 2 ("nothing was
attempted") and named no pod. The ledger is still not trusted (nothing is stopped or asked on
its word), but what it says may bill is named, and the exit is 3: something may bill and could
not be checked (docs/exit-codes.md)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tailpod.cli.main import app
from tailpod.errors import BillingNotProven, ConfigError
from tailpod.ledger import Ledger, PodRecord, VolumeRecord


@pytest.fixture()
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    home = tmp_path / "home"
    home.mkdir(mode=0o700)
    ledger = Ledger(home)
    ledger.put(PodRecord(run_tag="tp-bills-1", provider="runpod", status="running",
                         pod_id="pod-abc123"))
    ledger.put(PodRecord(run_tag="tp-done-1", provider="runpod", status="terminated",
                         pod_id="pod-old999"))
    with ledger.volume_transaction() as volumes:
        volumes["tp-vol-keep"] = VolumeRecord(name="tp-vol-keep", provider="runpod", size_gb=10,
                                              data_center="EU-RO-1", status="kept",
                                              volume_id="vol777")
    for name, value in {"TAILPOD_HOME": str(home), "TAILPOD_ENV_FILE": os.devnull,
                        "TAILPOD_RESULTS_DIR": str(tmp_path / "results")}.items():
        monkeypatch.setenv(name, value)
    os.chmod(home, 0o777)
    yield home
    os.chmod(home, 0o700)


def test_the_ledger_refuses_and_names_what_it_says_may_bill(home: Path) -> None:
    with pytest.raises(BillingNotProven) as err:
        Ledger(home).all()
    text = str(err.value)
    assert err.value.exit_code == 3
    assert "pod-abc123" in text and "tp-bills-1" in text and "vol777" in text
    assert "tp-done-1" not in text  # a terminated pod does not bill
    assert f"chmod 700 {home}" in (err.value.hint or "")


@pytest.mark.parametrize("argv", [["status", "--no-beat"], ["down"], ["down", "--all"]])
def test_status_and_down_exit_3_naming_the_pods(home: Path, argv: list[str]) -> None:
    result = CliRunner().invoke(app, argv)
    assert result.exit_code == 3, result.output
    flat = " ".join(result.output.split())
    assert "tp-bills-1" in flat and "pod-abc123" in flat, flat
    assert "nothing was attempted" not in flat
    assert "can be written by other users" in flat


def test_an_untrusted_home_whose_ledger_holds_nothing_active_is_still_bad_input(
        tmp_path: Path) -> None:
    home = tmp_path / "empty-home"
    home.mkdir()
    Ledger(home).put(PodRecord(run_tag="tp-gone", provider="runpod", status="terminated"))
    os.chmod(home, 0o777)
    try:
        with pytest.raises(ConfigError) as err:
            Ledger(home).all()
        assert err.value.exit_code == 2
    finally:
        os.chmod(home, 0o700)
