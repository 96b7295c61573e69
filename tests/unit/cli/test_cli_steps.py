"""Without a terminal, `up` leaves a plain line per step: the phases, the pod id, the GPU rented
and its price, so a failed `up` in a log still says what was rented."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tailpod.cli.common import StepLedger, step_say
from tailpod.cli.main import app
from tailpod.ledger import PodRecord


def test_failed_up_without_a_terminal_names_what_it_rented(
        tmp_path: Path, tailpod_home: Path, tiny_models: dict[str, Path],
        monkeypatch: pytest.MonkeyPatch) -> None:
    from tailpod.sandbox import start_sandbox
    from tests.helpers.up_shell import REGISTRY_STAND_IN, up_shell

    sandbox = start_sandbox(start_delay_s=0.3, workdir=tmp_path / "sandbox",
                            stand_in_config=REGISTRY_STAND_IN)
    try:
        up_shell(sandbox, tailpod_home, monkeypatch, "vastai", str(tiny_models["target"]),
                 TAILPOD_HOME=str(tailpod_home), TAILPOD_GPUS="RTX 4090", TAILPOD_MAX_PRICE="0.60")
        # the running pod states 3x the offer's price: up refuses it and tears it down
        sandbox.add_fault("price_rises_running", provider="vast", factor=3.0)
        up = CliRunner().invoke(app, ["up"])
        assert up.exit_code == 1, up.output
        err = up.stderr
        pods = sandbox.meter()
        assert re.search(r"^\[\s*\d+ s\] starting vllm", err, re.M), err
        # the cap with its unit, as --max-price takes it (newcomer 2.4: it read "(cap 0.6)")
        assert re.search(r"^\[\s*\d+ s\] renting on vastai: RTX 4090 \(cap \$0\.6/h\)$",
                         err, re.M), err
        match = re.search(r"^(tp-\S+): pod id (\S+) \(vastai\)$", err, re.M)
        assert match, err
        assert re.search(rf"^{re.escape(match.group(1))}: GPU RTX 4090 \(vastai\)$", err, re.M)
        assert re.search(rf"^{re.escape(match.group(1))}: price \$\d+\.\d{{3}}/h \(vastai\)$",
                         err, re.M), err
        assert sandbox.billing_now() == [], pods
    finally:
        sandbox.close()


def test_step_ledger_says_each_fact_once(tailpod_home: Path) -> None:
    said: list[str] = []
    ledger = StepLedger(tailpod_home, say=said.append)
    ledger.put(PodRecord(run_tag="tp-s", provider="runpod"))
    ledger.update("tp-s", event="created", pod_id="abc123")
    ledger.update("tp-s", event="running", pod_id="abc123", gpu="NVIDIA A40", price_per_hr=0.4)
    ledger.update("tp-s", event="again", gpu="NVIDIA A40")
    assert said == ["tp-s: pod id abc123 (runpod)", "tp-s: GPU NVIDIA A40 (runpod)",
                    "tp-s: price $0.400/h (runpod)"]


def test_step_say_prints_each_new_line_once(capsys: pytest.CaptureFixture[str]) -> None:
    update = step_say("starting")
    for line in ("pulling", "pulling", "  loading   weights ", "ready"):
        update(0.0, line)
    lines = [re.sub(r"^\[\s*\d+ s\] ", "", x) for x in capsys.readouterr().err.splitlines()]
    assert lines == ["starting", "pulling", "loading weights", "ready"]
