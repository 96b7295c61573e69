"""A vast.ai spot rent's traffic against the published contracts (issue 40): the offer search's
`type: "bid"` and the rent's `price` are in vast's schemas (search_offers.json, create_instance.json
here, derived from vast-ai/docs @ c6246226), and a lifecycle with a bid stays inside them."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from tailpod.config import load_settings, ttl_deadline
from tailpod.ledger import Ledger, PodRecord, new_run_tag
from tailpod.provision.base import PodSpec
from tailpod.provision.create import create_pod_safely
from tailpod.provision.providers import get_provider
from tailpod.provision.teardown import teardown
from tailpod.sandbox import Sandbox
from tests.helpers.api_timings import fast_timings
from tests.helpers.lifecycle_policy import fast_policy

from .contract import Recorder, contract_for, contract_problems


def test_a_spot_lifecycle_matches_vasts_contracts(sandbox: Sandbox, tmp_path: Path) -> None:
    recorder = Recorder()
    settings = load_settings(env={**sandbox.env(), "TAILPOD_HOME": str(tmp_path / "home")},
                             dotenv_path=tmp_path / "absent.env")
    provider = get_provider("vastai", settings, timings=fast_timings(), transport=recorder)
    ledger = Ledger(tmp_path / "home")
    tag = new_run_tag()
    spec = PodSpec(run_tag=tag, gpu_preference=["RTX 4090"], image="sandbox/image:latest",
                   start_command=["sh", "-c", "sleep 60"], disk_gb=20, ports=[22],
                   spot=True, bid=0.3)
    spec.ttl_at = ttl_deadline(1.0, time.time())
    create_pod_safely(provider, spec, ledger, PodRecord(run_tag=tag, provider="vastai"),
                      policy=fast_policy())
    record = ledger.get(tag)
    assert record is not None
    assert teardown(provider, ledger, record, tmp_path / "run", policy=fast_policy()).proven

    problems, seen = contract_problems("vast", recorder.exchanges)
    assert not problems, "\n".join(problems)
    assert {"search_offers", "create_instance"} <= seen
    searches = [x.request for x in recorder.exchanges
                if x.method == "POST" and x.path.startswith("/api/v0/bundles")]
    rents = [x.request for x in recorder.exchanges
             if x.method == "PUT" and x.path.startswith("/api/v0/asks/")]
    assert [q["type"] for q in searches] == ["bid"]
    assert [(r["price"], r["cancel_unavail"]) for r in rents] == [(0.3, True)]


@pytest.mark.parametrize("price", [0.0, 200.0])
def test_the_schema_refuses_a_bid_outside_vasts_range(price: float) -> None:
    """create_instance.yaml `price: minimum 0.001, maximum 128.0`: the contract holds the range
    the emulator enforces."""
    create = contract_for("vast", "PUT", "/api/v0/asks/1")
    assert create is not None
    assert create.request_errors({"image": "img", "price": price})
    assert not create.request_errors({"image": "img", "price": 0.3})
