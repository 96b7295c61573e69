"""A vast.ai spot (interruptible) pod against the sandbox (issue 40): the rent bids through vast's
documented route and the ledger says so; a lost bid (the emulator's `outbid` fault, armed at the
moment the test chooses) stops the instance, which still bills its disk; `status` says so and
names what settles it; `down` (or `down --all` after the laptop side died) destroys it and proves
the instance and its disk gone.

Expected figures come from the emulator's own offers (what "vast" sells), worked out here: an
interruptible instance bills its bid plus its storage, `storage_cost` $/GB/month x disk / 720
(vast-ai/docs @ c6246226 api-reference/openapi/yaml/show_instances.yaml example, docs/providers.md)."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
from typer.testing import CliRunner

from tailpod.cli.main import app
from tailpod.ledger import Ledger, PodRecord
from tailpod.provision.base import PodSpec
from tailpod.provision.create import up_remote
from tailpod.sandbox import Sandbox
from tailpod.sandbox.model import SandboxPod
from tests.helpers.api_timings import fast_timings
from tests.helpers.lifecycle_policy import fast_policy

from .conftest import settings_for

GPU = "RTX 4090"
DISK_GB = 20


def _env(sandbox: Sandbox, home: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    env = {**sandbox.env(), "TAILPOD_PROVIDER": "vastai",
           "TAILPOD_RESULTS_DIR": str(home / "results")}
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    monkeypatch.delenv("RUNPOD_API_KEY")
    return env


def _rent_spot(sandbox: Sandbox, home: Path, monkeypatch: pytest.MonkeyPatch, tag: str,
               bid: float | None) -> tuple[Ledger, PodRecord, SandboxPod]:
    env = _env(sandbox, home, monkeypatch)
    settings = settings_for(sandbox, home, **env)
    ledger = Ledger(settings.state_dir)
    up_remote(settings, ledger,
              PodSpec(run_tag=tag, gpu_preference=[GPU], image="img", disk_gb=DISK_GB,
                      start_command=["sleep", "30"], spot=True, bid=bid),
              policy=fast_policy(), timings=fast_timings())
    record = ledger.get(tag)
    assert record is not None and record.pod_id
    pod = sandbox.cloud.pods[f"vast:{record.pod_id}"]
    deadline = time.monotonic() + 5.0
    while pod.started_at is None and time.monotonic() < deadline:
        time.sleep(0.02)
    assert pod.started_at is not None, "the instance's container never came up"
    return ledger, record, pod


def _offers() -> list[tuple[float, float]]:
    """(min bid, storage $/h at DISK_GB) of each RTX 4090 offer the emulator sells."""
    from tailpod.sandbox.model import default_vast_offers

    return [(round(o.dph_base * 0.5, 4), o.storage_cost * DISK_GB / 720.0)
            for o in default_vast_offers() if o.gpu_name == GPU and o.num_gpus == 1]


def test_a_spot_rent_sends_the_bid_and_the_ledger_records_it(
        sandbox: Sandbox, tailpod_home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    bid = round(max(low for low, _ in _offers()) + 0.05, 4)  # wins on every offer
    ledger, record, pod = _rent_spot(sandbox, tailpod_home, monkeypatch, "tp-spot-1", bid)
    assert pod.meta["is_bid"] is True and pod.compute_rate == pytest.approx(bid)
    assert record.extra.spot is True and record.extra.bid == pytest.approx(bid)
    storage = pod.storage_cost_gb_month * DISK_GB / 720.0
    assert record.price_per_hr == pytest.approx(bid + storage, abs=1e-6)
    intent = next(e for e in record.events if e["event"] == "intent")
    assert intent["spot"] is True and intent["bid"] == pytest.approx(bid)
    assert json.loads(json.dumps(record.to_json()))["extra"]["spot"] is True


def test_without_a_bid_the_offer_s_minimum_bid_is_sent(
        sandbox: Sandbox, tailpod_home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _, record, pod = _rent_spot(sandbox, tailpod_home, monkeypatch, "tp-spot-2", None)
    offer = sandbox.cloud.vast_offers[pod.offer_id]  # type: ignore[index]
    assert pod.compute_rate == pytest.approx(round(offer.dph_base * 0.5, 4))
    assert record.extra.bid == pytest.approx(round(offer.dph_base * 0.5, 4))


def test_status_says_a_preempted_pod_still_bills_its_disk_and_down_proves_it_gone(
        sandbox: Sandbox, tailpod_home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _, record, pod = _rent_spot(sandbox, tailpod_home, monkeypatch, "tp-spot-3", None)
    storage = pod.storage_cost_gb_month * DISK_GB / 720.0
    sandbox.add_fault("outbid", provider="vast", times=1)  # the bid is lost now
    res = CliRunner().invoke(app, ["status", "--no-beat"], env={"COLUMNS": "250"})
    assert res.exit_code == 0, res.output
    flat = " ".join(res.output.split())
    assert "tp-spot-3: preempted at" in flat
    assert f"storage still bills ${storage:.4f}/h; settle it with: tailpod down tp-spot-3" in flat
    assert "preempted: a spot pod that lost its bid" in flat  # the flag is explained
    assert pod.status == "stopped"
    billing = [r for r in sandbox.billing_now() if r["id"] == record.pod_id]
    assert [r["rate_per_hr"] for r in billing] == [pytest.approx(storage, abs=1e-6)]
    js = CliRunner().invoke(app, ["status", "--no-beat", "--json"])
    doc = json.loads(js.stdout)
    assert doc["cloud"]["rate_per_hr_now"] == pytest.approx(storage, abs=1e-5)
    first = " ".join(res.output.split()).split("preempted at ")[1][:23]
    assert f"preempted at {first}" in " ".join(json.dumps(doc).split())  # the same time again

    down = CliRunner().invoke(app, ["down", "tp-spot-3"], env={"COLUMNS": "250"})
    assert down.exit_code == 0, down.output
    assert sandbox.billing_now() == []
    assert pod.status == "terminated"


def test_down_all_settles_a_preemption_the_laptop_never_saw(
        sandbox: Sandbox, tailpod_home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _, record, pod = _rent_spot(sandbox, tailpod_home, monkeypatch, "tp-spot-4", None)
    sandbox.add_fault("outbid", provider="vast", times=1)
    # Any vast request plays the lost bid; the laptop side that rented is gone (no ledger event)
    httpx.get(f"{sandbox.vast_url}/api/v0/users/current/",
              headers={"Authorization": f"Bearer {sandbox.vast_key}"}, timeout=10.0)
    assert pod.status == "stopped" and "outbid_at" in pod.meta
    res = CliRunner().invoke(app, ["down", "--all"], env={"COLUMNS": "250"})
    assert res.exit_code == 0, res.output
    assert pod.status == "terminated"
    assert sandbox.billing_now() == []


def _vast_request(sandbox: Sandbox) -> None:
    """Any vast request: the emulator plays its bid faults on it."""
    httpx.get(f"{sandbox.vast_url}/api/v0/users/current/",
              headers={"Authorization": f"Bearer {sandbox.vast_key}"}, timeout=10.0)


def test_a_pod_that_wins_its_bid_back_runs_its_start_command_again(
        sandbox: Sandbox, tailpod_home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """What covers a spot pod that comes back: its start command, which carries the stage-0
    dead-man guard, runs again (the emulator's reading of vast's `onstart`, docs/providers.md),
    and status no longer calls it preempted; its GPU bills again."""
    env = _env(sandbox, tailpod_home, monkeypatch)
    settings = settings_for(sandbox, tailpod_home, **env)
    ledger = Ledger(settings.state_dir)
    up_remote(settings, ledger,
              PodSpec(run_tag="tp-spot-5", gpu_preference=[GPU], image="img", disk_gb=DISK_GB,
                      start_command=["sh", "-c", "echo guard-started; sleep 30"], spot=True),
              policy=fast_policy(), timings=fast_timings())
    record = ledger.get("tp-spot-5")
    assert record is not None
    pod = sandbox.cloud.pods[f"vast:{record.pod_id}"]

    def started_lines() -> int:
        return sum("guard-started" in line for line in sandbox.cloud.container_log(pod))

    def wait_for(check: Any) -> None:
        deadline = time.monotonic() + 5.0
        while not check() and time.monotonic() < deadline:
            time.sleep(0.02)
        assert check()

    wait_for(lambda: started_lines() == 1)
    sandbox.add_fault("outbid", provider="vast", times=1)
    _vast_request(sandbox)
    assert pod.status == "stopped"
    sandbox.add_fault("bid_returns", provider="vast", times=1)
    _vast_request(sandbox)
    assert pod.status == "running" and "returned_at" in pod.meta
    wait_for(lambda: started_lines() == 2)
    res = CliRunner().invoke(app, ["status", "--no-beat"], env={"COLUMNS": "250"})
    assert res.exit_code == 0, res.output
    assert "preempted" not in res.output
    storage = pod.storage_cost_gb_month * DISK_GB / 720.0
    wait_for(lambda: [r["rate_per_hr"] for r in sandbox.billing_now()
                      if r["id"] == record.pod_id] == [pytest.approx(pod.compute_rate + storage,
                                                                     abs=1e-6)])
    down = CliRunner().invoke(app, ["down", "tp-spot-5"])
    assert down.exit_code == 0, down.output
    assert sandbox.billing_now() == []
