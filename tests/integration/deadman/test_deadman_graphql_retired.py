"""The dead-man switch once RunPod's GraphQL is retired (issue 12 item 5): REST alone still ends
the pod, and a retired GraphQL endpoint (404) is never read as "the pod is gone"."""

from __future__ import annotations

from tailpod.sandbox import Sandbox

from .conftest import Daemons, create_pod


def test_rest_ends_the_pod_with_graphql_retired(sandbox: Sandbox, daemons: Daemons) -> None:
    sandbox.cloud.graphql_retired = True
    pod = create_pod(sandbox, "runpod")
    proc, _heartbeat, log = daemons.run(pod, ttl_at=1.0)
    assert proc.wait(timeout=30) == 0, log.read_text()
    assert pod.record.status == "terminated" and sandbox.meter()["billing_count"] == 0


def test_retired_graphql_is_not_mistaken_for_a_gone_pod(sandbox: Sandbox,
                                                        daemons: Daemons) -> None:
    """REST refuses the pod key and GraphQL answers 404: the switch must keep the pod on its
    list (and give up loudly), never report it terminated while it bills."""
    sandbox.cloud.graphql_retired = True
    sandbox.cloud.refuse_pod_key_on_rest = True
    pod = create_pod(sandbox, "runpod")
    proc, _heartbeat, log = daemons.run(pod, ttl_at=1.0, extra=["--give-up-after", "2"])
    assert proc.wait(timeout=30) != 0
    text = log.read_text()
    assert "GraphQL unavailable" in text, text
    assert pod.billing(sandbox) and pod.record.status != "terminated"
