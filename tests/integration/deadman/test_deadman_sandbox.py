"""The dead-man switch against the sandbox cloud: real daemons, pod-scoped keys, the meter."""

from __future__ import annotations

import os
import threading
import time

import httpx
import pytest

from tailpod.sandbox import Sandbox

from .conftest import PROVIDERS, SANDBOX_NAME, Daemons, create_pod, read_state, wait_for


@pytest.mark.parametrize("provider", PROVIDERS)
def test_heartbeats_keep_the_pod_and_silence_terminates_it(
    sandbox: Sandbox, daemons: Daemons, provider: str
) -> None:
    pod = create_pod(sandbox, provider)
    heartbeat, _log = daemons.paths()
    # Each beat is dated an hour ahead, so one beat after the switch's own arming touch keeps the
    # pod however long a loaded machine then stalls this test; the test decides when tailpod goes
    # silent. The beater runs from before the switch starts until such a beat has landed.
    stop = threading.Event()

    def beat() -> None:
        while not stop.is_set():
            heartbeat.touch()
            ahead = time.time() + 3600
            os.utime(heartbeat, (ahead, ahead))
            stop.wait(0.05)

    beater = threading.Thread(target=beat, daemon=True)
    beater.start()
    try:
        proc, heartbeat, log = daemons.run(pod, timeout=1.0)
        wait_for(lambda: heartbeat.with_name("heartbeat.deadman.json").exists()
                 and read_state(heartbeat)["state"] == "armed"
                 and heartbeat.stat().st_mtime > time.time() + 60, 30)
    finally:
        stop.set()
        beater.join()
    time.sleep(2.5)  # at least 2.5 timeouts after the switch armed (a lower bound): it lives on
    assert proc.poll() is None, log.read_text()
    assert pod.billing(sandbox)
    assert read_state(heartbeat)["state"] == "armed"
    silent_from = time.time()
    os.utime(heartbeat, (silent_from, silent_from))  # the last beat, then silence

    assert proc.wait(timeout=30) == 0, log.read_text()
    assert time.time() - silent_from >= 1.0  # it waited for the timeout, not less
    # the sandbox's own record: the terminate came a full timeout after the last beat
    assert (pod.record.terminated_at or 0.0) >= silent_from + 1.0
    text = log.read_text()
    assert "no heartbeat from tailpod within 1 s" in text
    assert f"pod {pod.pod_id} is gone" in text
    assert pod.record.status == "terminated"
    assert sandbox.meter()["billing_count"] == 0
    state = read_state(heartbeat)
    assert state["state"] == "terminated" and "heartbeat" in state["reason"]


@pytest.mark.parametrize("provider", PROVIDERS)
def test_ttl_expiry_terminates_the_pod(sandbox: Sandbox, daemons: Daemons, provider: str) -> None:
    pod = create_pod(sandbox, provider)
    ttl_at = time.time() + 1.0
    proc, heartbeat, log = daemons.run(pod, ttl_at=ttl_at, timeout=0)  # TTL only
    assert proc.wait(timeout=10) == 0, log.read_text()
    assert time.time() >= ttl_at
    assert "TTL expired" in log.read_text()
    assert sandbox.meter()["billing_count"] == 0
    assert read_state(heartbeat)["state"] == "terminated"


@pytest.mark.parametrize("provider", PROVIDERS)
def test_api_errors_are_retried_until_the_pod_is_gone(
    sandbox: Sandbox, daemons: Daemons, provider: str
) -> None:
    pod = create_pod(sandbox, provider)
    name = SANDBOX_NAME[provider]
    sandbox.add_fault("rate_limit", provider=name, op="terminate", times=1, retry_after=1)
    sandbox.add_fault("server_error", provider=name, op="terminate", times=3, status=503)
    sandbox.add_fault("terminate_fail", provider=name, op="terminate", times=1, status=500)
    # success that does nothing: only checking afterwards catches it
    sandbox.add_fault("terminate_noop", provider=name, op="terminate", times=1)
    proc, heartbeat, log = daemons.run(pod, ttl_at=time.time() + 0.3, timeout=0,
                                       extra=["--max-backoff", "1"])
    assert proc.wait(timeout=20) == 0, log.read_text()
    text = log.read_text()
    assert "HTTP 429" in text
    if provider == "runpod":
        assert "retrying in 1.0 s" in text  # Retry-After honoured
    else:  # vast documents no Retry-After on a 429 (x-rate-limit @ c6246226): its own backoff
        assert "retrying in 1.0 s" not in text.split("HTTP 503")[0]
    assert "HTTP 503" in text and "HTTP 500" in text
    assert "still there" in text  # the no-op "success" was caught by the check
    assert all(f["fired"] == f["times"] for f in sandbox.cloud.faults.list())
    assert sandbox.meter()["billing_count"] == 0
    # Each attempt walks the termination table (RunPod: DELETE, the v2 action, GraphQL), so a
    # RunPod attempt can meet several faults; vast has one route, one fault per attempt.
    assert read_state(heartbeat)["attempts"] >= (3 if provider == "runpod" else 7)


@pytest.mark.parametrize("provider", PROVIDERS)
def test_a_pod_key_cannot_terminate_another_pod(
    sandbox: Sandbox, daemons: Daemons, provider: str
) -> None:
    mine, other = create_pod(sandbox, provider), create_pod(sandbox, provider)
    id_var, key_var = (("RUNPOD_POD_ID", "RUNPOD_API_KEY") if provider == "runpod"
                       else ("CONTAINER_ID", "CONTAINER_API_KEY"))
    env = {"PATH": "/usr/bin:/bin", id_var: other.pod_id, key_var: mine.pod_key}
    proc, heartbeat, log = daemons.run(mine, ttl_at=time.time(), timeout=0, env=env,
                                       environ_from="", extra=["--give-up-after", "1.5"])
    assert proc.wait(timeout=15) == 3, log.read_text()  # gave up
    text = log.read_text()
    assert "HTTP 403" in text and "IT MAY STILL BILL" in text
    assert other.billing(sandbox) and mine.billing(sandbox)
    assert read_state(heartbeat)["state"] == "gave_up"


@pytest.mark.parametrize("provider", PROVIDERS)
def test_pod_scoped_keys_in_the_sandbox(sandbox: Sandbox, provider: str) -> None:
    mine, other = create_pod(sandbox, provider), create_pod(sandbox, provider)
    id_var, key_var = (("RUNPOD_POD_ID", "RUNPOD_API_KEY") if provider == "runpod"
                       else ("CONTAINER_ID", "CONTAINER_API_KEY"))
    env = mine.env
    assert env[id_var] == mine.pod_id and env[key_var] == mine.pod_key
    assert env[key_var] not in (sandbox.runpod_key, sandbox.vast_key)
    assert other.env[key_var] != env[key_var]

    def url(pod_id: str) -> str:
        if provider == "runpod":
            return f"{sandbox.runpod_url}/v2/pods/{pod_id}"
        return f"{sandbox.vast_url}/api/v0/instances/{pod_id}/"

    def auth(key: str) -> dict[str, str]:
        return {"Authorization": f"Bearer {key}"}

    assert httpx.get(url(mine.pod_id), headers=auth(mine.pod_key)).status_code == 200
    assert httpx.get(url(other.pod_id), headers=auth(mine.pod_key)).status_code == 403
    assert httpx.delete(url(other.pod_id), headers=auth(mine.pod_key)).status_code == 403
    assert httpx.delete(url(other.pod_id), headers=auth("not-a-real-key-123")).status_code == 401
    listing = (f"{sandbox.runpod_url}/v2/pods" if provider == "runpod"
               else f"{sandbox.vast_url}/api/v1/instances/")
    assert httpx.get(listing, headers=auth(mine.pod_key)).status_code == 403  # account-wide
    assert other.billing(sandbox)
    assert httpx.delete(url(mine.pod_id), headers=auth(mine.pod_key)).status_code in (200, 204)
    assert not mine.billing(sandbox) and other.billing(sandbox)


def test_runpod_graphql_with_a_pod_key_is_scoped_too(sandbox: Sandbox) -> None:
    mine, other = create_pod(sandbox, "runpod"), create_pod(sandbox, "runpod")
    query = "mutation T($input: PodTerminateInput!) { podTerminate(input: $input) }"
    r = httpx.post(f"{sandbox.runpod_url}/graphql",
                   headers={"Authorization": f"Bearer {mine.pod_key}"},
                   json={"query": query, "variables": {"input": {"podId": other.pod_id}}})
    assert r.status_code == 200 and "scoped to another pod" in r.text
    assert other.billing(sandbox)
