"""Every run records what the provider's account was seen to do (issue 25: first contact's
results "stamped into every run"): the pod's ledger record carries `extra.provider_facts`
(pods/cloud.py follow_image), the sweep copies it into run.json, and `report` shows it."""

from __future__ import annotations

import json
import time
from pathlib import Path

from tailpod.config import load_settings
from tailpod.engines.base import EngineConfig
from tailpod.ledger import PodRecord
from tailpod.measure.sweep import RunContext, RunDirectory, run_sweep
from tailpod.provision.runpod import facts as fc
from tailpod.results.io import write_run
from tailpod.results.report import write_report
from tailpod.results.schema import RunMeta
from tests.unit.measure.test_sweep import ScriptedHost, make_plan
from tests.unit.results.conftest import build_run

KEY = "rp_provider_facts_key_0001"
IMAGE = "vllm/vllm-openai:v0.11.0"


def _record(provider_facts: dict[str, object] | None) -> PodRecord:
    record = PodRecord(run_tag="tp-facts", provider="runpod", gpu="NVIDIA H100 80GB HBM3",
                       gpu_count=1, price_per_hr=2.99, image=IMAGE)
    if provider_facts is not None:
        record.extra.provider_facts = provider_facts
    return record


def _sweep(tmp_path: Path, record: PodRecord) -> dict[str, object] | None:
    """The run.json `provider_facts` a sweep on this pod writes (validated by the schema)."""
    ctx = RunContext.for_pod(record, "r1", EngineConfig(engine="vllm", model="/m"))
    run_sweep(make_plan([0, 1], extend=False), RunDirectory(tmp_path), ScriptedHost({0: 10, 1: 15}),
              ctx, log=lambda *_: None)
    written = json.loads((tmp_path / "run.json").read_text())
    assert RunMeta.model_validate(written).provider_facts == written["provider_facts"]
    return written["provider_facts"]  # type: ignore[no-any-return]


def _report_row(tmp_path: Path, provider_facts: dict[str, object] | None) -> str:
    run = build_run({"plain": {1: [60.0, 61.0], 2: [110.0, 111.0]}}, price=2.99)
    run.meta.provider_facts = provider_facts
    report = write_report([write_run(run, tmp_path / "report-run")]).read_text()
    return next(line for line in report.splitlines() if line.startswith("| provider facts |"))


def test_first_contact_results_reach_run_json_and_the_report(tmp_path: Path) -> None:
    home = tmp_path / "home"
    settings = load_settings(env={"TAILPOD_HOME": str(home), "RUNPOD_API_KEY": KEY},
                             dotenv_path=home / "absent.env")
    checked = time.mktime((2026, 11, 30, 12, 0, 0, 0, 0, 0)) - time.timezone
    fc.save(settings, fc.FirstContactFacts(
        account=fc.account_id(KEY), image=IMAGE, checked_at=checked, start_form="json",
        start_command_ran=True, pod_key_self_kill=False, meter_delay_s=42.0,
        meter_bound_s=90.0))
    # What `up` writes into the ledger record (pods/cloud.py follow_image + the running step).
    facts = {"start_form": "json", "min_cuda": "12.8", "host_cuda": "12.9",
             "first_contact": fc.run_stamp(settings, IMAGE)}
    written = _sweep(tmp_path / "run", _record(facts))
    assert isinstance(written, dict)
    stamp = written["first_contact"]
    assert stamp["verified"] is True and stamp["same_image"] is True
    assert stamp["account"] == fc.account_id(KEY) and KEY not in json.dumps(written)
    assert stamp["start_command_ran"] is True and stamp["pod_key_self_kill"] is False
    assert stamp["meter_delay_s"] == 42.0

    row = _report_row(tmp_path, written)
    assert "start form json" in row and "CUDA asked ≥ 12.8" in row and "host CUDA 12.9" in row
    assert "first contact 2026-11-30 with this image" in row
    assert "start command ran" in row and "pod-key self-kill REFUSED" in row
    assert "meter showed spend 42 s after create" in row


def test_a_run_on_an_account_never_checked_says_so(tmp_path: Path) -> None:
    home = tmp_path / "home"
    settings = load_settings(env={"TAILPOD_HOME": str(home), "RUNPOD_API_KEY": KEY},
                             dotenv_path=home / "absent.env")
    facts = {"start_form": "plain", "min_cuda": None,
             "first_contact": fc.run_stamp(settings, IMAGE)}
    written = _sweep(tmp_path / "run", _record(facts))
    assert isinstance(written, dict) and written["first_contact"]["verified"] is False
    row = _report_row(tmp_path, written)
    assert "start form plain" in row and "CUDA asked ≥ none" in row
    assert "first contact: NOT VERIFIED (no first contact on this account" in row


def test_a_run_without_a_rented_pod_records_none(tmp_path: Path) -> None:
    assert _sweep(tmp_path / "run", _record(None)) is None
    # No row at all: a local run, or one written before the facts were kept, renders as it did.
    run = build_run({"plain": {1: [60.0, 61.0], 2: [110.0, 111.0]}}, price=2.99)
    run.meta.provider_facts = None
    report = write_report([write_run(run, tmp_path / "report-run")]).read_text()
    assert "| provider facts |" not in report
