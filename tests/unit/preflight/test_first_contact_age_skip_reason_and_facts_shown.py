"""What the first-contact check says besides its verdicts (preflight/first_contact.py): how old
the deciding result is ("within the hour" under an hour, then whole hours), why it skips for
another provider, and the facts it shows (`check-requirements --json` `data`): the summaries of
the three newest results, none when there are none. Found by mutating the module (docs/testing.md,
"first contact, gpus, logs (session 19)")."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from tailpod.config import load_settings
from tailpod.preflight import first_contact as check
from tailpod.preflight.base import Plan, Status
from tailpod.preflight.runner import CHECKS, run_preflight
from tailpod.provision.runpod import first_contact as fc

KEY = "rp_first_contact_key_0001"
IMAGE = "vllm/vllm-openai:v0.11.0"
NOW = 1_800_000_000.0  # a fixed wall clock, so the age is exact


def _settings(home: Path, **env: str):  # type: ignore[no-untyped-def]
    base = {"TAILPOD_HOME": str(home), "RUNPOD_API_KEY": KEY, "TAILPOD_PROVIDER": "runpod",
            "TAILPOD_IMAGE": IMAGE, **env}
    return load_settings(env=base, dotenv_path=home / "absent.env")


def _facts(age_s: float, meter_delay_s: float = 12.0) -> fc.FirstContactFacts:
    return fc.FirstContactFacts(account=fc.account_id(KEY), image=IMAGE,
                                checked_at=NOW - age_s, start_form="json",
                                start_command_ran=True, pod_key_self_kill=True,
                                meter_delay_s=meter_delay_s, meter_bound_s=30.0)


@pytest.mark.parametrize(("age_s", "said"), [
    (-120.0, "within the hour"),  # a clock behind the record's: never a negative age
    (0.0, "within the hour"),
    (3599.0, "within the hour"),
    (3600.0, "1 h ago"),  # one hour exactly is an hour
    (7140.0, "2 h ago"),  # 1.98 h, rounded
    (10800.0, "3 h ago"),
])
def test_the_age_of_the_deciding_result(tailpod_home: Path, monkeypatch: pytest.MonkeyPatch,
                                        age_s: float, said: str) -> None:
    monkeypatch.setattr(check.time, "time", lambda: NOW)
    items = check.assess(_settings(tailpod_home), [_facts(age_s)], IMAGE, "json").items
    assert items[0] == (Status.PASS,
                        f"{IMAGE}: the json start form ran (first contact {said})", "")


def _result(home: Path, **env: str):  # type: ignore[no-untyped-def]
    first_contact = [c for c in CHECKS if c.name == "first-contact"]
    return run_preflight(_settings(home, **env), Plan(), checks=first_contact).results[0]


def test_another_provider_skips_with_the_reason(tailpod_home: Path) -> None:
    result = _result(tailpod_home, TAILPOD_PROVIDER="vastai")
    assert (result.status, result.detail) == (Status.SKIP, "first contact is a RunPod check")


def test_the_facts_shown_are_the_three_newest_summaries(tailpod_home: Path) -> None:
    settings = _settings(tailpod_home)
    now = time.time()
    for age_s, delay in [(40.0, 14.0), (30.0, 13.0), (20.0, 12.0), (10.0, 11.0)]:
        facts = _facts(0.0, meter_delay_s=delay)
        facts.checked_at = now - age_s
        facts.image = f"img/{int(delay)}:1"  # one record per image: all four are kept
        fc.save(settings, facts)
    result = _result(tailpod_home)
    said = "start command (json form): ran; pod key self-kill over REST v2: works; "
    assert result.data == {"facts": [said + "the meter showed spend 11 s after create",
                                     said + "the meter showed spend 12 s after create",
                                     said + "the meter showed spend 13 s after create"]}


def test_no_facts_shown_when_there_are_none(tailpod_home: Path) -> None:
    result = _result(tailpod_home)
    assert result.status is Status.WARN and result.data == {}
