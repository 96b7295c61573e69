"""What `up` and `up --lanes` say first of what they started (cli/pods.py print_up_start): the
loud line when capacity fallback rented another card than the first asked for, then the record as
JSON under --json (nothing more to say) or the caller's own lines."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tailpod.cli.pods import print_up_start
from tailpod.config import load_settings
from tailpod.ledger import PodRecord
from tailpod.pods.base import UpResult
from tailpod.provision.base import PodInfo, PodState

NOTE = "NOTE: H100 SXM was not available; rented NVIDIA A40 at $0.400/h instead"


def _result(fallback_from: str | None) -> UpResult:
    record = PodRecord(run_tag="tp-a", provider="local", status="running")
    detail = {"fallback_from": fallback_from} if fallback_from else {}
    info = PodInfo("p1", "tp-a", PodState.RUNNING, gpu_type="NVIDIA A40", price_per_hr=0.4,
                   detail=detail)
    return UpResult(record, info)


@pytest.mark.parametrize("json_out", [False, True])
def test_a_fallback_is_said_before_anything_else(capsys: pytest.CaptureFixture[str],
                                                 tmp_path: Path, json_out: bool) -> None:
    settings = load_settings(env={"TAILPOD_HOME": str(tmp_path)},
                             dotenv_path=tmp_path / "absent.env")
    done = print_up_start(settings, _result("H100 SXM"), json_out)
    out = capsys.readouterr().out
    assert done is json_out  # under --json the record is all there is left to say
    first, _, rest = out.partition("\n")
    assert " ".join(first.split()) == NOTE
    if json_out:
        assert json.loads(rest)["run_tag"] == "tp-a"
    else:
        assert rest == ""  # a pod on this machine: no rental or ssh entry to print


def test_no_fallback_says_nothing(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    settings = load_settings(env={"TAILPOD_HOME": str(tmp_path)},
                             dotenv_path=tmp_path / "absent.env")
    assert print_up_start(settings, _result(None), False) is False
    assert print_up_start(settings, UpResult(_result(None).record), False) is False
    assert capsys.readouterr().out == ""
