"""Money truth when things go wrong (issue 26): status and down never reassure without evidence,
their deadlines hold against an API that never answers, a proven-down pod's spend is frozen,
and a disk that refuses the ledger never stops a terminate."""

from __future__ import annotations

import contextlib
import errno
import json
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tailpod.cli.main import app
from tailpod.ledger import Ledger
from tailpod.provision import teardown as lifecycle_teardown
from tailpod.provision.base import PodSpec
from tailpod.provision.create import create_pod_safely, up_remote
from tailpod.provision.teardown import UnprovenTeardown, teardown
from tailpod.sandbox import Sandbox
from tests.helpers.api_timings import fast_timings
from tests.helpers.lifecycle_policy import fast_policy

from .conftest import Cloud, settings_for, shell_for


def _runpod_pod(sandbox: Sandbox, home: Path, monkeypatch: pytest.MonkeyPatch,
                tag: str) -> Ledger:
    env = shell_for(sandbox, home, monkeypatch)
    settings = settings_for(sandbox, home, **env)
    ledger = Ledger(settings.state_dir)
    up_remote(settings, ledger, PodSpec(run_tag=tag, gpu_preference=["A40"], image="img",
                                        start_command=["sleep", "30"]),
              policy=fast_policy(), timings=fast_timings())
    return ledger


def _billing_tags(sandbox: Sandbox) -> list[str]:
    return sorted(str(r["name"]) for r in sandbox.billing_now())


def test_status_against_a_silent_api_says_unknown_on_stderr_and_exits_3(
        sandbox: Sandbox, tailpod_home: Path, monkeypatch: pytest.MonkeyPatch,
        silent_api: str) -> None:
    _runpod_pod(sandbox, tailpod_home, monkeypatch, "tp-silent-1")
    monkeypatch.setenv("TAILPOD_RUNPOD_URL", silent_api)
    runner = CliRunner()

    started = time.monotonic()
    plain = runner.invoke(app, ["status", "--timeout", "3", "--no-beat"])
    took = time.monotonic() - started
    assert plain.exit_code == 3, plain.output
    assert took >= 3.0  # it really waited for the provider, up to its deadline
    assert took < 30.0, f"status ran {took:.0f} s past a 3 s deadline"
    assert "nothing is running" not in plain.output
    assert "could not ask" in plain.stderr and "runpod" in plain.stderr
    assert "the ledger holds 1 cloud pod" in plain.stderr
    assert "could not ask" not in plain.stdout

    as_json = runner.invoke(app, ["status", "--json", "--timeout", "2", "--no-beat"])
    assert as_json.exit_code == 3, as_json.output
    payload = json.loads(as_json.stdout)
    assert payload["cloud"]["rate_per_hr_now"] is None  # unknown, never 0
    assert "runpod" in payload["cloud"]["rate_unknown_reason"]
    assert payload["unknown"] and "the ledger holds 1 cloud pod" in payload["unknown"]
    assert _billing_tags(sandbox) == ["tp-silent-1"]  # it was billing all along


def test_status_with_an_empty_ledger_and_a_silent_api_never_says_nothing_is_running(
        sandbox: Sandbox, tailpod_home: Path, monkeypatch: pytest.MonkeyPatch,
        silent_api: str) -> None:
    env = {**sandbox.env(), "TAILPOD_RUNPOD_URL": silent_api}
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    monkeypatch.delenv("VAST_API_KEY")
    result = CliRunner().invoke(app, ["status", "--timeout", "2", "--no-beat"])
    assert result.exit_code == 3, result.output
    assert "nothing is running" not in result.output
    assert "the ledger holds 0 cloud pods" in result.stderr


def test_down_timeout_5_against_a_silent_api_exits_3_in_time_with_the_manual_stop(
        sandbox: Sandbox, tailpod_home: Path, monkeypatch: pytest.MonkeyPatch,
        silent_api: str) -> None:
    ledger = _runpod_pod(sandbox, tailpod_home, monkeypatch, "tp-silent-2")
    pod_id = ledger.get("tp-silent-2").pod_id  # type: ignore[union-attr]
    assert pod_id
    monkeypatch.setenv("TAILPOD_RUNPOD_URL", silent_api)

    started = time.monotonic()
    down = CliRunner().invoke(app, ["down", "tp-silent-2", "--timeout", "5"])
    took = time.monotonic() - started
    assert down.exit_code == 3, down.output
    assert took < 30.0, f"down --timeout 5 took {took:.0f} s"
    assert "tp-silent-2" in down.output and pod_id in down.output
    # the manual stop: the console page and the exact API call, the key by name only
    assert "https://console.runpod.io/pods" in down.output
    # RunPod REST v2: DELETE /v2/pods/{podId} (runpod/docs api-reference-v2/openapi.json)
    flat = down.output.replace("\n", "")
    assert "curl -X DELETE" in flat and f"{silent_api}/v2/pods/{pod_id}" in flat
    assert "$RUNPOD_API_KEY" in down.output
    assert sandbox.runpod_key not in down.output
    assert _billing_tags(sandbox) == ["tp-silent-2"]  # nothing reached the provider

    # With the API back, down proves it and the spend stays frozen afterwards.
    monkeypatch.setenv("TAILPOD_RUNPOD_URL", sandbox.runpod_url)
    again = CliRunner().invoke(app, ["down", "tp-silent-2"])
    assert again.exit_code == 0, again.output
    assert _billing_tags(sandbox) == []


def test_a_proven_down_pods_uptime_and_spend_stay_frozen(
        sandbox: Sandbox, tailpod_home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    ledger = _runpod_pod(sandbox, tailpod_home, monkeypatch, "tp-frozen-1")
    down = CliRunner().invoke(app, ["down", "tp-frozen-1"])
    assert down.exit_code == 0, down.output
    record = ledger.get("tp-frozen-1")
    assert record is not None and record.status == "terminated"
    proven = [e["t"] for e in record.events if e["event"] == "billing-proven"]
    assert proven
    expected_uptime = proven[0] - record.created_at
    expected_spend = round((record.price_per_hr or 0) * expected_uptime / 3600, 4)

    def row() -> dict[str, object]:
        out = CliRunner().invoke(app, ["status", "--all", "--json", "--no-beat"])
        assert out.exit_code == 0, out.output
        return {r["run_tag"]: r for r in json.loads(out.stdout)["pods"]}["tp-frozen-1"]

    first = row()
    time.sleep(1.5)
    later = row()
    assert later["uptime_s"] == first["uptime_s"]
    assert later["spend_usd"] == first["spend_usd"]
    # frozen at the proven end (rounded as status rounds), not at the moment status ran
    assert abs(float(later["uptime_s"]) - expected_uptime) <= 0.2  # type: ignore[arg-type]
    assert later["spend_usd"] == expected_spend

    # A second `down` asks the provider again, and proving it again keeps the first end.
    again = CliRunner().invoke(app, ["down", "tp-frozen-1"])
    assert again.exit_code == 0, again.output
    assert "asking runpod again" in again.stderr
    assert row()["uptime_s"] == first["uptime_s"]


def test_down_of_a_tag_the_ledger_calls_terminated_still_asks_the_provider(
        sandbox: Sandbox, tailpod_home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    ledger = _runpod_pod(sandbox, tailpod_home, monkeypatch, "tp-liar-1")
    ledger.update("tp-liar-1", event="test-says-terminated", status="terminated")
    assert _billing_tags(sandbox) == ["tp-liar-1"]
    down = CliRunner().invoke(app, ["down", "tp-liar-1"])
    assert down.exit_code == 0, down.output
    assert _billing_tags(sandbox) == []  # the pod the ledger called terminated was killed


def test_down_of_a_terminated_tag_exits_3_when_the_provider_cannot_be_asked(
        sandbox: Sandbox, tailpod_home: Path, monkeypatch: pytest.MonkeyPatch,
        silent_api: str) -> None:
    ledger = _runpod_pod(sandbox, tailpod_home, monkeypatch, "tp-liar-2")
    ledger.update("tp-liar-2", event="test-says-terminated", status="terminated")
    monkeypatch.setenv("TAILPOD_RUNPOD_URL", silent_api)
    down = CliRunner().invoke(app, ["down", "tp-liar-2", "--timeout", "3"])
    assert down.exit_code == 3, down.output
    assert "already terminated" not in down.output


def _full_disk(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*_args: object, **_kwargs: object) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(Ledger, "_write_file", refuse)
    monkeypatch.setattr(lifecycle_teardown, "write_proof", refuse)


def test_down_on_a_full_disk_terminates_first_then_exits_3_with_one_line(
        sandbox: Sandbox, tailpod_home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _runpod_pod(sandbox, tailpod_home, monkeypatch, "tp-full-1")
    _full_disk(monkeypatch)
    down = CliRunner().invoke(app, ["down", "tp-full-1"])
    assert down.exit_code == 3, down.output
    assert down.exception is None or isinstance(down.exception, SystemExit)
    assert "Traceback" not in down.output
    assert "No space left on device" in down.stderr and "tp-full-1" in down.stderr
    assert _billing_tags(sandbox) == []  # the terminate went out all the same


def test_down_all_on_a_full_disk_terminates_and_exits_3(
        sandbox: Sandbox, tailpod_home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _runpod_pod(sandbox, tailpod_home, monkeypatch, "tp-full-2")
    _full_disk(monkeypatch)
    down = CliRunner().invoke(app, ["down", "--all"])
    assert down.exit_code == 3, down.output
    assert down.exception is None or isinstance(down.exception, SystemExit)
    assert "No space left on device" in down.output
    assert _billing_tags(sandbox) == []


def test_up_refuses_to_rent_when_the_ledger_cannot_be_written(
        sandbox: Sandbox, tailpod_home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    settings = settings_for(sandbox, tailpod_home, TAILPOD_PROVIDER="runpod")
    ledger = Ledger(settings.state_dir)
    _full_disk(monkeypatch)
    from tailpod.errors import TailpodError

    with pytest.raises(TailpodError) as err:
        up_remote(settings, ledger, PodSpec(run_tag="tp-full-3", gpu_preference=["A40"],
                                            image="img", start_command=["sleep", "30"]),
                  policy=fast_policy(), timings=fast_timings())
    assert err.value.exit_code == 1 and "nothing was rented" in err.value.message
    assert sandbox.billing_now() == []


# -- guarantees pinned against the mutants of issue 26 -------------------------------------------
def test_down_all_exits_3_while_the_listing_fails_and_an_orphan_bills(
        sandbox: Sandbox, tailpod_home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Mutant: raise_if_unproven ignoring outcomes that carry no evidence (a failed listing)."""
    env = {**sandbox.env(), "TAILPOD_RESULTS_DIR": str(tailpod_home / "results")}
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    monkeypatch.delenv("VAST_API_KEY")
    from tailpod.provision.providers import get_provider

    orphan = get_provider("runpod", settings_for(sandbox, tailpod_home, **env)).create(
        PodSpec(run_tag="tp-orphan-503", gpu_preference=["A40"], image="img",
                start_command=[]))
    sandbox.add_fault("server_error", provider="runpod", op="list", status=503)
    down = CliRunner().invoke(app, ["down", "--all", "--timeout", "20"])
    assert down.exit_code == 3, down.output
    assert "nothing tailpod-tagged is left" not in down.output
    assert "https://console.runpod.io/pods" in down.output  # where to look by hand
    assert [r["id"] for r in sandbox.billing_now()] == [orphan.pod_id]


def test_down_all_stops_a_stopped_runpod_pod_that_bills_its_disk(
        sandbox: Sandbox, tailpod_home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Mutant: RunPod's listing dropping EXITED pods (a stopped pod still bills its volume)."""
    ledger = _runpod_pod(sandbox, tailpod_home, monkeypatch, "tp-stopped-1")
    record = ledger.get("tp-stopped-1")
    assert record is not None and record.pod_id
    ledger.update("tp-stopped-1", status="terminated")  # the ledger lost track of it
    pod = sandbox.cloud.pods[f"runpod:{record.pod_id}"]
    pod.volume_gb = 20  # a pod with a volume: RunPod bills it while the pod is stopped
    sandbox.cloud.stop(pod)
    assert [(r["id"], r["billing_what"]) for r in sandbox.billing_now()] == [
        (record.pod_id, "disk (stopped)")]
    down = CliRunner().invoke(app, ["down", "--all"])
    assert down.exit_code == 0, down.output
    assert "nothing tailpod-tagged is left" not in down.output
    assert sandbox.billing_now() == []


def test_an_api_error_during_downs_wait_is_not_read_as_gone(cloud: Cloud) -> None:
    """Mutant: wait_gone treating a failed listing as "gone"; the proof's own check must fail
    (not only the provider's evidence, which fails for the same outage)."""
    spec = cloud.spec(gpus=[cloud.gpu("second")])
    create_pod_safely(cloud.provider, spec, cloud.ledger, cloud.record(spec), policy=cloud.policy)
    cloud.fault("terminate_noop")  # the pod stays listed: only the wait could say it is gone
    cloud.fault("server_error", op="list", status=503)
    record = cloud.ledger.get(spec.run_tag)
    assert record is not None
    with pytest.raises(UnprovenTeardown) as err:
        teardown(cloud.provider, cloud.ledger, record, cloud.run_dir(spec.run_tag),
                 policy=cloud.policy)
    checks = {c.name: c for c in err.value.evidence.checks}
    assert checks["gone-from-provider"].passed is False
    assert [r["name"] for r in cloud.billing()] == [spec.run_tag]


def test_the_provider_holds_the_cap_to_the_price_the_new_pod_states(cloud: Cloud) -> None:
    """Mutant: the cap check after create removed (runpod/provider.py, vastai/provider.py).
    The sandbox rents at 3x the offer (A40 $0.40/h on RunPod; RTX 4090 offers $0.35-0.42/h on
    vast), above a $0.60/h cap that every offer is under."""
    from tailpod.errors import CapacityError

    cloud.fault("price_above_offer", factor=3.0)
    spec = cloud.spec(gpus=[cloud.gpu("second")], max_price=0.60)
    with pytest.raises(CapacityError, match="above the cap"):
        create_pod_safely(cloud.provider, spec, cloud.ledger, cloud.record(spec),
                          policy=cloud.policy)
    deadline = time.monotonic() + 5
    while cloud.billing() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert cloud.billing() == []  # terminated at once


@pytest.mark.parametrize(("provider", "gpu"), [("runpod", "NVIDIA A40"), ("vastai", "RTX 4090")])
def test_up_refuses_a_running_pod_that_states_a_price_above_the_cap(
        provider: str, gpu: str, tmp_path: Path, tailpod_home: Path,
        tiny_models: dict[str, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    """Mutant: `up`'s check_stated_price call removed (pods/cloud.py): the read-back after create
    states the offer's price, under the cap; the running pod states 3x it. (On RunPod the
    create's read-back may already see it running and priced, so the adapter's own check can
    catch it first: the vast case is the one that pins `up`'s.)"""
    from tailpod.sandbox import start_sandbox
    from tests.helpers.up_shell import REGISTRY_STAND_IN, up_shell

    sandbox = start_sandbox(start_delay_s=0.3, workdir=tmp_path / "sandbox",
                            stand_in_config=REGISTRY_STAND_IN)
    try:
        up_shell(sandbox, tailpod_home, monkeypatch, provider, str(tiny_models["target"]),
                 TAILPOD_HOME=str(tailpod_home), TAILPOD_GPUS=gpu, TAILPOD_MAX_PRICE="0.60")
        sandbox.add_fault("price_rises_running", provider="runpod" if provider == "runpod"
                          else "vast", factor=3.0)
        up = CliRunner().invoke(app, ["up"])
        assert up.exit_code == 1, up.output
        assert "above the cap" in up.output
        assert sandbox.billing_now() == []  # torn down, proven
    finally:
        sandbox.close()


def test_down_all_settles_a_local_pod_with_no_cloud_configured(
        tailpod_home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`down --all` with only a `--provider local` pod in the ledger stops it (it holds the GPU on
    a GPU box), instead of "no cloud provider is configured"."""
    import os
    import socket as sock
    import sys

    from tailpod.ledger import PodRecord
    from tailpod.provision.local.provider import LocalProvider

    for key in ("RUNPOD_API_KEY", "VAST_API_KEY"):
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("TAILPOD_RESULTS_DIR", str(tailpod_home / "results"))
    with sock.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    spec = PodSpec(run_tag="tp-local-1", gpu_preference=["local"], image="",
                   start_command=[sys.executable, "-c", "import time; time.sleep(120)"],
                   ports=[port])
    info = LocalProvider(tailpod_home).create(spec)
    pgid = int(info.detail["pgid"])
    Ledger(tailpod_home).put(PodRecord(run_tag="tp-local-1", provider="local", status="running",
                                       pod_id=info.pod_id))
    try:
        down = CliRunner().invoke(app, ["down", "--all"])
        assert down.exit_code == 0, down.output
        with pytest.raises(ProcessLookupError):
            os.killpg(pgid, 0)  # the process group is gone
        assert Ledger(tailpod_home).get("tp-local-1").status == "terminated"  # type: ignore[union-attr]
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pgid, 9)


def test_a_failed_tailnet_check_is_named_as_the_cause_not_the_provider(cloud: Cloud) -> None:
    """The pod is gone (meter 0) but its tailnet device could not be deleted: the failure names
    the device, not "<provider>: ... is not proven gone", and no manual pod stop is offered."""
    from tailpod.provision.base import ProofCheck

    spec = cloud.spec(gpus=[cloud.gpu("second")])
    create_pod_safely(cloud.provider, spec, cloud.ledger, cloud.record(spec), policy=cloud.policy)
    record = cloud.ledger.get(spec.run_tag)
    assert record is not None

    def tailnet() -> list[ProofCheck]:
        return [ProofCheck("tailnet device removed", False, "Tailscale API: HTTP 503")]

    with pytest.raises(UnprovenTeardown) as err:
        teardown(cloud.provider, cloud.ledger, record, cloud.run_dir(spec.run_tag),
                 policy=cloud.policy, extra_proofs=tailnet)
    assert cloud.billing() == []  # the pod really is gone
    message = err.value.message
    assert "tailnet device removed failed (Tailscale API: HTTP 503)" in message
    assert "is not proven gone" not in message and "stop it by hand" not in message
    failed = [c.name for c in err.value.evidence.checks if not c.passed]
    assert failed == ["tailnet device removed"]
