"""Accounts and money fields (issue 12 item 5): vast's `credit` is the money left, and RunPod's
lifecycle still proves itself once its GraphQL API is retired."""

from __future__ import annotations

import json
import time
from dataclasses import replace
from pathlib import Path

import httpx
import pytest
from typer.testing import CliRunner

from tailpod.cli.main import app
from tailpod.config import Settings, ttl_deadline
from tailpod.ledger import Ledger
from tailpod.provision.base import PodInfo, PodSpec
from tailpod.provision.create import create_pod_safely
from tailpod.provision.providers import get_provider
from tailpod.provision.runpod.provider import GraphQLUnavailable
from tailpod.provision.teardown import teardown
from tailpod.sandbox import Sandbox
from tailpod.sandbox.model import SandboxPod
from tests.helpers.api_timings import fast_timings
from tests.helpers.lifecycle_policy import fast_policy

from .conftest import Cloud, settings_for


def vanish_but_bill(pod: SandboxPod) -> None:
    """The provider stops showing the pod but its meter keeps running (a lost pod)."""
    pod.status = "terminated"


# -- vast: credit, not balance -------------------------------------------------------------------
def test_vast_user_answers_distinct_credit_and_balance(sandbox: Sandbox) -> None:
    sandbox.set_account("vast", sandbox.vast_key, balance=42.0)
    me = httpx.get(sandbox.vast_url + "/api/v0/users/current/", timeout=5,
                   headers={"Authorization": f"Bearer {sandbox.vast_key}"}).json()
    assert me["credit"] == pytest.approx(42.0)
    assert me["balance"] != me["credit"]


def test_vast_affordability_reads_credit(sandbox: Sandbox, tailpod_home: Path) -> None:
    sandbox.set_account("vast", sandbox.vast_key, balance=7.5)
    provider = get_provider("vastai", settings_for(sandbox, tailpod_home),
                            timings=fast_timings())
    assert provider.balance() == pytest.approx(7.5)  # type: ignore[attr-defined]


def test_vast_charges_stopped_reads_credit(make_cloud) -> None:  # type: ignore[no-untyped-def]
    """A destroy that leaves the instance billing (and unlisted) must fail `charges-stopped`:
    the credit keeps falling. Reading `balance` (which moves the other way) would pass it."""
    cloud: Cloud = make_cloud("vastai")
    cloud.provider.timings = replace(fast_timings(), evidence_window_s=0.6)  # type: ignore[attr-defined]
    spec = cloud.spec(gpus=[cloud.gpu("second")])
    spec.ttl_at = ttl_deadline(1.0, time.time())
    info = create_pod_safely(cloud.provider, spec, cloud.ledger, cloud.record(spec),
                             policy=cloud.policy)
    # make the meter move fast enough to see in a short window
    pod = cloud.sandbox.cloud.find("vast", info.pod_id)
    assert pod is not None
    cloud.sandbox.cloud.meter.set_rate("vast", info.pod_id, 3600.0, "gpu+disk")
    vanish_but_bill(pod)
    evidence = cloud.provider.billing_evidence(spec.run_tag, info.pod_id, info.price_per_hr)
    charges = next(c for c in evidence.checks if c.name == "charges-stopped")
    assert not charges.passed, charges.detail
    assert "credit" in charges.detail


def test_runpod_proof_counts_a_neighbour_that_is_still_provisioning(make_cloud) -> None:  # type: ignore[no-untyped-def]
    """A pod of the same account still PROVISIONING bills and states its cost, but tailpod reads
    its price only once it runs: the spend-rate check must still count it as explained, or the
    proof of a torn-down pod fails while a neighbour starts (seen in a parallel matrix)."""
    cloud: Cloud = make_cloud("runpod")
    first = cloud.spec()
    first.ttl_at = ttl_deadline(1.0, time.time())
    done = create_pod_safely(cloud.provider, first, cloud.ledger, cloud.record(first),
                             policy=cloud.policy)
    cloud.provider.terminate(done.pod_id)
    cloud.sandbox.cloud.provisioning_s = 3600.0  # the neighbour stays PROVISIONING
    cloud.fault("slow_start", seconds=3600.0)
    spec = cloud.spec()
    spec.ttl_at = ttl_deadline(1.0, time.time())
    neighbour = create_pod_safely(cloud.provider, spec, cloud.ledger, cloud.record(spec),
                                  policy=cloud.policy)
    listed = {p.pod_id: p for p in cloud.provider.list_all()}
    assert listed[neighbour.pod_id].price_per_hr is None  # not running: no price recorded
    assert cloud.billing()  # ...but it bills
    evidence = cloud.provider.billing_evidence(first.run_tag, done.pod_id, done.price_per_hr)
    spend = next(c for c in evidence.checks if c.name == "account-spend-rate")
    assert spend.passed, spend.detail


# -- RunPod: GraphQL retired ---------------------------------------------------------------------
def test_sandbox_switch_retires_graphql(retired: Sandbox) -> None:
    answer = httpx.post(retired.runpod_url + "/graphql", timeout=5,
                        json={"query": "query { myself { clientBalance } }"},
                        headers={"Authorization": f"Bearer {retired.runpod_key}"})
    assert answer.status_code == 404
    rest = httpx.get(retired.runpod_url + "/v2/pods", timeout=5,
                     headers={"Authorization": f"Bearer {retired.runpod_key}"})
    assert rest.status_code == 200


def test_runpod_account_unavailable_without_graphql(retired: Sandbox, tailpod_home: Path) -> None:
    provider = get_provider("runpod", settings_for(retired, tailpod_home),
                            timings=fast_timings())
    with pytest.raises(GraphQLUnavailable):
        provider.account_spend()  # type: ignore[attr-defined]
    facts = provider.account()  # type: ignore[attr-defined]
    assert facts.balance is None and facts.unavailable and "unavailable" in facts.unavailable


def rent_without_graphql(retired: Sandbox, settings: Settings) -> tuple[Cloud, PodSpec, PodInfo]:
    """A RunPod pod made through tailpod's create path (ledger first) on the sandbox whose
    GraphQL is retired, with the ledger in the settings' state directory."""
    provider = get_provider("runpod", settings, timings=fast_timings())
    cloud = Cloud("runpod", retired, settings, provider, Ledger(settings.state_dir),
                  fast_policy(), settings.state_dir)
    spec = cloud.spec(gpus=[cloud.gpu("second")])
    spec.ttl_at = ttl_deadline(1.0, time.time())
    info = create_pod_safely(provider, spec, cloud.ledger, cloud.record(spec), policy=cloud.policy)
    return cloud, spec, info


def test_runpod_lifecycle_proves_without_graphql(retired: Sandbox, tailpod_home: Path) -> None:
    cloud, spec, info = rent_without_graphql(retired, settings_for(retired, tailpod_home))
    provider, ledger = cloud.provider, cloud.ledger
    record = ledger.get(spec.run_tag)
    assert record is not None
    evidence = teardown(provider, ledger, record, cloud.run_dir(spec.run_tag),
                        policy=cloud.policy)
    assert evidence.proven, [(c.name, c.detail) for c in evidence.checks]
    names = {c.name for c in evidence.checks}
    assert {"tag-listing", "direct-lookup", "billing-history"} <= names
    assert "account-spend-rate" not in names
    lookup = next(c for c in evidence.checks if c.name == "direct-lookup")
    assert "GraphQL unavailable" in lookup.detail
    assert retired.meter()["billing_count"] == 0
    assert info.pod_id


def test_runpod_billing_history_fails_while_the_pod_bills(retired: Sandbox,
                                                          tailpod_home: Path) -> None:
    """Without GraphQL, a pod that left the listings but still bills fails the proof."""
    cloud, spec, info = rent_without_graphql(retired, settings_for(retired, tailpod_home))
    provider = cloud.provider
    pod = retired.cloud.find("runpod", info.pod_id)
    assert pod is not None
    retired.cloud.meter.set_rate("runpod", info.pod_id, 3600.0, "gpu+disk")
    vanish_but_bill(pod)
    evidence = provider.billing_evidence(spec.run_tag, info.pod_id, info.price_per_hr)
    history = next(c for c in evidence.checks if c.name == "billing-history")
    assert not history.passed and not evidence.proven, history.detail


def test_cli_check_and_down_without_graphql(retired: Sandbox, tailpod_home: Path,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    env = {**retired.env(), "TAILPOD_PROVIDER": "runpod", "TAILPOD_GPUS": "NVIDIA A40",
           "TAILPOD_RESULTS_DIR": str(tailpod_home / "results")}
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    _cloud, spec, _info = rent_without_graphql(retired, settings_for(retired, tailpod_home, **env))
    runner = CliRunner()
    check = runner.invoke(app, ["check-requirements", "--json"])
    rows = json.loads(check.stdout)
    row = next(r for r in rows["checks"] if r["name"] == "provider")
    assert row["status"] == "warn" and row["data"]["account"] == "unavailable", row
    down = runner.invoke(app, ["down", spec.run_tag])
    assert down.exit_code == 0, down.output
    assert retired.meter()["billing_count"] == 0


@pytest.mark.parametrize(("status", "body"), [
    (410, {"errors": [{"message": "Gone"}]}),
    (200, {"errors": [{"message": "The GraphQL API has been retired; use the REST API"}]}),
])
def test_other_retirement_answers_are_recognised(status: int, body: dict[str, object]) -> None:
    import httpx as _httpx

    from tailpod.config import Settings
    from tailpod.provision.runpod.provider import RunPodProvider
    from tailpod.secrets import Secret

    def answer(request: _httpx.Request) -> _httpx.Response:
        if request.url.path == "/graphql":
            return _httpx.Response(status, json=body)
        return _httpx.Response(200, json={"pods": []})

    settings = Settings(runpod_api_key=Secret("rp_test_key_0001"))  # type: ignore[call-arg]
    provider = RunPodProvider(settings, timings=fast_timings(),
                              transport=_httpx.MockTransport(answer))
    with pytest.raises(GraphQLUnavailable):
        provider.account_spend()  # type: ignore[attr-defined]
