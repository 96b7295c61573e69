"""`up --spot` refused before anything rents, waits or writes (issue 40): a provider that
documents no spot route (RunPod: runpod/docs @ a900806e has no interruptible pod in REST v2, and
its spot pages were removed in 8e5aebdb), a bid without --spot, a bid above the price cap (the cap
applies to the bid) and a TAILPOD_SPOT that is not a yes or a no are each one line and exit 2,
with the ledger untouched."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from tailpod.cli.main import app

BASE = ["up", "--model", "m", "--gpu", "RTX 4090"]


@pytest.mark.parametrize(("flags", "env", "named"), [
    (["--provider", "runpod", "--spot"], {}, "RunPod documents no spot route"),
    (["--provider", "local", "--spot"], {}, "--spot rents an interruptible cloud pod"),
    (["--provider", "vastai", "--bid", "0.3"], {}, "--bid is the spot bid: it needs --spot"),
    (["--provider", "vastai", "--spot", "--bid", "0.5", "--max-price", "0.4"], {},
     "the bid $0.5/h is above the price cap $0.4/h"),
    (["--provider", "vastai", "--spot", "--bid", "-1"], {}, "--bid must be a positive number"),
    (["--provider", "vastai"], {"TAILPOD_SPOT": "maybe"}, "TAILPOD_SPOT"),
])
def test_up_refuses_a_spot_request_it_cannot_rent_before_anything(
        tailpod_home: Path, flags: list[str], env: dict[str, str], named: str) -> None:
    result = CliRunner().invoke(app, [*BASE, *flags], env={"COLUMNS": "300", **env})
    assert result.exit_code == 2, result.output
    flat = " ".join(result.output.split())
    assert named in flat
    assert "Traceback" not in result.output
    assert not (tailpod_home / "ledger.json").exists()
    assert not list(tailpod_home.glob("**/*.json"))  # nothing written: no intent, no run


def test_the_spot_setting_reads_yes_and_no(tailpod_home: Path) -> None:
    from tailpod.config import load_settings

    for raw, want in (("1", True), ("true", True), ("on", True), ("0", False), ("no", False)):
        got = load_settings(env={"TAILPOD_SPOT": raw, "TAILPOD_BID": "0.25"},
                            dotenv_path=tailpod_home / "absent.env")
        assert (got.spot, got.bid) == (want, 0.25)
