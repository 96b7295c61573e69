"""The first-contact preflight check reads the recorded facts: both answers of each fact, and
`up` runs it (it is one of CHECKS), so a refused fact stops the rent before any GPU."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from tailpod.config import load_settings
from tailpod.preflight.base import Plan, Status
from tailpod.preflight.runner import CHECKS, run_preflight
from tailpod.provision.runpod import first_contact as fc

KEY = "rp_first_contact_key_0001"
IMAGE = "vllm/vllm-openai:v0.11.0"


def _settings(home: Path, **env: str):  # type: ignore[no-untyped-def]
    base = {"TAILPOD_HOME": str(home), "RUNPOD_API_KEY": KEY, "TAILPOD_PROVIDER": "runpod",
            "TAILPOD_IMAGE": IMAGE, **env}
    return load_settings(env=base, dotenv_path=home / "absent.env")


def _record(home: Path, **fields: object) -> None:
    facts = fc.FirstContactFacts(account=fc.account_id(KEY), image=IMAGE,
                                 checked_at=time.time(), start_form="json",
                                 start_command_ran=True, pod_key_self_kill=True,
                                 meter_delay_s=12.0, meter_bound_s=30.0)
    for name, value in fields.items():
        setattr(facts, name, value)
    fc.save(_settings(home), facts)


def _check(home: Path, **env: str):  # type: ignore[no-untyped-def]
    check = [c for c in CHECKS if c.name == "first-contact"]
    report = run_preflight(_settings(home, **env), Plan(), checks=check)
    return report.results[0]


def test_up_runs_the_first_contact_check() -> None:
    assert "first-contact" in [c.name for c in CHECKS]


def test_no_facts_warns_and_names_the_live_check(tailpod_home: Path) -> None:
    result = _check(tailpod_home)
    assert result.status is Status.WARN and "--live" in result.fix


def test_facts_that_hold_pass(tailpod_home: Path) -> None:
    _record(tailpod_home)
    result = _check(tailpod_home)
    assert result.status is Status.PASS, result.detail
    assert "12 s after create" in result.detail


def test_a_start_form_not_run_refuses_the_image_and_names_one_that_ran(
        tailpod_home: Path) -> None:
    _record(tailpod_home)
    _record(tailpod_home, image="lmsysorg/sglang:v0.5.15", checked_at=time.time() - 10)
    _record(tailpod_home, start_command_ran=False)
    result = _check(tailpod_home)
    assert result.status is Status.FAIL
    assert "did not run" in result.detail and "lmsysorg/sglang:v0.5.15" in result.fix


def test_a_refused_pod_key_asks_for_ttl_zero(tailpod_home: Path) -> None:
    _record(tailpod_home, pod_key_self_kill=False,
            self_kill_answers=["DELETE /v2/pods/{id} 403", "POST /v2/pods/{id}/action 403"])
    result = _check(tailpod_home)
    assert result.status is Status.FAIL
    assert "no self-kill" in result.detail and "403" in result.detail
    assert "--ttl-hours 0" in result.fix


def test_facts_of_another_account_do_not_count(tailpod_home: Path) -> None:
    _record(tailpod_home, pod_key_self_kill=False)
    result = _check(tailpod_home, RUNPOD_API_KEY="rp_another_account_key_02")
    assert result.status is Status.WARN


@pytest.mark.parametrize("provider", ["vastai"])
def test_other_providers_skip(tailpod_home: Path, provider: str) -> None:
    assert _check(tailpod_home, TAILPOD_PROVIDER=provider).status is Status.SKIP
