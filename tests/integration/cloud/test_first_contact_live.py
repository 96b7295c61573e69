"""First contact on the sandbox: a CPU pod verifies the start form, the pod key's self-kill and
the meter delay, and is proven down whatever the answers; each fact is played both ways."""

from __future__ import annotations

import json
import time
from pathlib import Path

import httpx
import pytest

from tailpod.ledger import Ledger
from tailpod.provision.runpod import first_contact as fc
from tailpod.sandbox import Sandbox
from tests.helpers.api_timings import fast_first_contact_timings, fast_timings
from tests.helpers.lifecycle_policy import fast_policy

from .conftest import settings_for

# An image with an ENTRYPOINT (vllm serve, sandbox/images.py): only the JSON form replaces it.
IMAGE = "vllm/vllm-openai@sha256:" + "ab" * 32


def _run(sandbox: Sandbox, home: Path, **timing: float) -> fc.FirstContactFacts:
    settings = settings_for(sandbox, home)
    provider = fc.RunPodCpuProbe(settings, timings=fast_timings())
    lines: list[str] = []
    timings = fc.FirstContactTimings(**{**vars(fast_first_contact_timings()), **timing})
    facts = fc.run_first_contact(settings, IMAGE, timings=timings, provider=provider,
                                 say=lines.append, policy=fast_policy())
    facts.notes.append("said: " + " || ".join(lines))
    return facts


def _nothing_bills(sandbox: Sandbox) -> None:
    assert sandbox.billing_now() == []
    assert all(p["status"] == "terminated" for p in sandbox.cloud.pods_public())


def test_all_three_facts_hold_and_the_pod_killed_itself(sandbox: Sandbox,
                                                        tailpod_home: Path) -> None:
    facts = _run(sandbox, tailpod_home)
    assert facts.start_command_ran is True
    assert facts.pod_key_self_kill is True
    # the log of a deleted pod may be gone before tailpod reads the route's answer
    assert all(a.startswith("DELETE /v2/pods/") and a.endswith(" 204")
               for a in facts.self_kill_answers)
    # the sandbox meter accrues from create: the delay is at most the time the meter was watched
    assert facts.meter_delay_s is not None and 0 <= facts.meter_delay_s <= facts.meter_bound_s
    # a CPU pod: the cheapest sandbox flavor is cpu3c at $0.03 per vCPU, 2 vCPUs -> $0.06/h
    assert facts.cpu == "cpu3c x2"
    pods = sandbox.cloud.pods_public()
    assert len(pods) == 1 and pods[0]["gpu_count"] == 0
    assert facts.cost_usd is not None and 0 < facts.cost_usd < 0.06 * 60 / 3600
    said = facts.notes[-1]
    assert "cost before" in said and "cost after" in said
    _nothing_bills(sandbox)
    # kept per account (a hash, never the key) and image; the ledger says proven
    stored = json.loads((tailpod_home / fc.FACTS_FILE).read_text())
    text = json.dumps(stored)
    assert sandbox.runpod_key not in text
    assert stored["facts"][0]["account"] == fc.account_id(sandbox.runpod_key)
    assert stored["facts"][0]["image"] == IMAGE
    record = Ledger(tailpod_home).get(facts.run_tag or "")
    assert record is not None and record.status == "terminated"


def test_a_refused_json_start_form_is_seen_and_the_pod_is_torn_down(sandbox: Sandbox,
                                                                    tailpod_home: Path) -> None:
    httpx.post(f"{sandbox.admin_url}/admin/settings", json={"runpod_json_start_form": False})
    started = time.monotonic()
    facts = _run(sandbox, tailpod_home, boot_s=3.0)
    assert facts.start_command_ran is False
    assert facts.pod_key_self_kill is None  # the script never ran: nothing was learned
    # the JSON text went to the image's ENTRYPOINT as one argument, and no shell ran it
    # (as vllm serve's model: a log line quoting the command text is no marker)
    notes = " ".join(facts.notes)
    assert "no marker within 3 s; the log ends: OSError: {entrypoint:" in notes
    assert time.monotonic() - started < 30
    _nothing_bills(sandbox)
    assert fc.facts_for(settings_for(sandbox, tailpod_home), IMAGE)[0].start_command_ran is False


def test_a_refused_pod_key_is_seen_and_tailpod_kills_the_pod(sandbox: Sandbox,
                                                             tailpod_home: Path) -> None:
    answer = httpx.post(f"{sandbox.admin_url}/admin/settings",
                        json={"refuse_pod_key_on_rest": True})
    assert answer.json()["refuse_pod_key_on_rest"] is True
    facts = _run(sandbox, tailpod_home)
    assert facts.start_command_ran is True
    assert facts.pod_key_self_kill is False
    assert [a.split()[-1] for a in facts.self_kill_answers] == ["403", "403"]
    _nothing_bills(sandbox)


def test_settings_refuse_unknown_names(sandbox: Sandbox) -> None:
    answer = httpx.post(f"{sandbox.admin_url}/admin/settings", json={"no_such": True})
    assert answer.status_code == 400 and "no_such" in answer.text


def test_check_requirements_live_on_the_sandbox(sandbox: Sandbox, tailpod_home: Path,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    from typer.testing import CliRunner

    from tailpod.cli.main import app

    for name, value in {**sandbox.env(), "TAILPOD_FIRST_CONTACT_HOLD_S": "1",
                        "TAILPOD_FIRST_CONTACT_BOOT_S": "20", "TAILPOD_FIRST_CONTACT_POLL_S":
                        "0.2", "TAILPOD_FIRST_CONTACT_GONE_S": "15"}.items():
        monkeypatch.setenv(name, value)
    result = CliRunner().invoke(app, ["check-requirements", "--live", "--provider", "runpod",
                                      "--image", IMAGE, "--json"])
    err = " ".join(result.stderr.split())
    assert "cost before" in err and "cost after" in err, result.output
    assert "start command (json form): ran" in err
    assert "pod key self-kill over REST v2: works" in err
    assert sandbox.runpod_key not in result.output
    _nothing_bills(sandbox)
    checks = {c["name"]: c for c in json.loads(result.stdout)["checks"]}
    assert checks["first-contact"]["status"] == "pass", checks["first-contact"]
