"""The first-contact pod's TTL and what first contact prints when its teardown is not proven
(issue 37 item 10; provision/runpod/first_contact.py). The CPU probe pod always carries a one-hour
TTL, whatever TAILPOD_TTL_HOURS says (0 included: the probe is never left without one). When
its teardown cannot be proven (a terminate that answers success and does nothing, and a pod key
refused its self-kill), first contact never says "proven down": it says the pod is not proven
down and may bill, and raises BillingNotProven (exit 3)."""

from __future__ import annotations

import time
from pathlib import Path

import httpx
import pytest

from tailpod.errors import BillingNotProven
from tailpod.ledger import Ledger
from tailpod.provision.runpod import first_contact as fc
from tailpod.sandbox import Sandbox
from tests.helpers.api_timings import fast_first_contact_timings, fast_timings
from tests.helpers.lifecycle_policy import fast_policy

from .conftest import settings_for

IMAGE = "vllm/vllm-openai@sha256:" + "ab" * 32
PROBE_TTL_S = 3600.0


def _run(sandbox: Sandbox, home: Path, lines: list[str], **env: str) -> fc.FirstContactFacts:
    settings = settings_for(sandbox, home, **env)
    provider = fc.RunPodCpuProbe(settings, timings=fast_timings())
    return fc.run_first_contact(settings, IMAGE, timings=fast_first_contact_timings(),
                                provider=provider, say=lines.append, policy=fast_policy())


@pytest.mark.parametrize("ttl_hours", ["0", "4"])
def test_the_probe_pod_carries_a_one_hour_ttl(sandbox: Sandbox, tailpod_home: Path,
                                              ttl_hours: str) -> None:
    t0 = time.time()
    lines: list[str] = []
    facts = _run(sandbox, tailpod_home, lines, TAILPOD_TTL_HOURS=ttl_hours)
    record = Ledger(tailpod_home).get(facts.run_tag or "")
    assert record is not None and record.ttl_expires_at is not None
    assert t0 + PROBE_TTL_S <= record.ttl_expires_at <= time.time() + PROBE_TTL_S
    # proven down here, and said so
    assert record.status == "terminated"
    assert any(line.startswith("first contact: the pod is proven down") for line in lines)


def test_an_unproven_teardown_is_never_called_proven(sandbox: Sandbox,
                                                     tailpod_home: Path) -> None:
    httpx.post(f"{sandbox.admin_url}/admin/settings", json={"refuse_pod_key_on_rest": True})
    sandbox.cloud.faults.add({"kind": "terminate_noop", "provider": "runpod"})
    lines: list[str] = []
    with pytest.raises(BillingNotProven) as caught:
        _run(sandbox, tailpod_home, lines)
    assert caught.value.exit_code == 3
    said = "\n".join(lines)
    assert "proven down" not in said.replace("not proven down", "")
    assert "first contact: the pod is not proven down" in said and "may still bill" in said
    # the ledger keeps the pod for `down` to settle
    (record,) = [r for r in Ledger(tailpod_home).all() if r.provider == "runpod"]
    assert record.status != "terminated"
    sandbox.cloud.faults.clear()
