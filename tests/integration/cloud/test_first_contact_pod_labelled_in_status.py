"""The first-contact CPU probe pod is labelled as the first-contact check wherever `status` lists
it, and by `down --all` when it settles one (newcomer 2.25: after the downs, `status --all` showed
it as an unlabelled `tailpod pod` with engine `-`, a pod the user never asked for and could not
tell what it was). Its ledger record is written by provision/runpod/first_contact.py; `status`
and `down --all` read the label from it."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest
from typer.testing import CliRunner

from tailpod.cli.main import app
from tailpod.errors import BillingNotProven
from tailpod.ledger import Ledger
from tailpod.provision.runpod import first_contact as fc
from tailpod.sandbox import Sandbox
from tests.helpers.api_timings import fast_first_contact_timings, fast_timings
from tests.helpers.lifecycle_policy import fast_policy

from .conftest import settings_for, shell_for

IMAGE = "vllm/vllm-openai@sha256:" + "ab" * 32
LABEL = "first-contact check"


def _probe(sandbox: Sandbox, home: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    env = shell_for(sandbox, home, monkeypatch)
    settings = settings_for(sandbox, home, **env)
    provider = fc.RunPodCpuProbe(settings, timings=fast_timings())
    facts = fc.run_first_contact(settings, IMAGE, timings=fast_first_contact_timings(),
                                 provider=provider, policy=fast_policy())
    assert facts.run_tag
    return facts.run_tag


def test_status_all_labels_the_probe_pod_as_the_first_contact_check(
        sandbox: Sandbox, tailpod_home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    tag = _probe(sandbox, tailpod_home, monkeypatch)
    shown = CliRunner().invoke(app, ["status", "--all", "--no-beat", "--json"])
    assert shown.exit_code == 0, shown.output
    (row,) = [r for r in json.loads(shown.stdout)["pods"] if r["run_tag"] == tag]
    assert row["purpose"] == LABEL
    text = CliRunner().invoke(app, ["status", "--all", "--no-beat"])
    assert text.exit_code == 0, text.output
    # the probe's row (a table row, or its block's engine line) names what it was
    assert LABEL in text.stdout


def test_down_all_labels_the_probe_pod_it_settles(
        sandbox: Sandbox, tailpod_home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A probe whose own teardown was not proven (a terminate that does nothing, the pod key
    refused its self-kill) is left for `down --all`, which names it as the check."""
    httpx.post(f"{sandbox.admin_url}/admin/settings", json={"refuse_pod_key_on_rest": True})
    sandbox.cloud.faults.add({"kind": "terminate_noop", "provider": "runpod"})
    with pytest.raises(BillingNotProven):
        _probe(sandbox, tailpod_home, monkeypatch)
    sandbox.cloud.faults.clear()
    (record,) = [r for r in Ledger(tailpod_home).active() if r.provider == "runpod"]
    result = CliRunner().invoke(app, ["down", "--all"])
    assert result.exit_code == 0, result.output
    said = " ".join(result.stdout.split())
    assert f"down {record.run_tag} (runpod, {LABEL})" in said
