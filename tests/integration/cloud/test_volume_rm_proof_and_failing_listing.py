"""`volume rm`'s proof and a failing volume listing on the RunPod sandbox (issue 37 item 10).

`volume rm` calls a volume deleted only when both its direct look-up answers 404 and the listing
no longer carries its name, so a listing or a look-up that lags (sandbox faults
`stale_volume_list`, `stale_volume_get`) holds the proof back until it catches up, and a listing
that lags past the wait is exit 3 with the ledger still calling the volume active.
A listing that fails (`server_error` on `volume_list`) never settles a volume as deleted:
`volume ls` names it unknown and exits 3 (docs/volumes.md)."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tailpod.cli.main import app
from tailpod.errors import BillingNotProven
from tailpod.ledger import Ledger
from tailpod.provision import volumes as vol
from tailpod.provision.providers import get_provider
from tailpod.sandbox import Sandbox
from tests.helpers.api_timings import fast_timings

from .conftest import settings_for


def _create(name: str = "cache1") -> None:
    made = CliRunner().invoke(app, ["volume", "create", name, "--size-gb", "20", "--gpu", "A40"])
    assert made.exit_code == 0, made.output


def _listed(sandbox: Sandbox) -> list[str]:
    """What the account's listing shows now, lag included (the emulator's own view)."""
    (account,) = [a for a in sandbox.cloud.accounts.values() if a.provider == "runpod"]
    return [v.name for v in sandbox.cloud.volumes_listed(account)]


def test_rm_waits_until_a_lagging_listing_no_longer_carries_the_volume(
        sandbox: Sandbox, tailpod_home: Path, cli_env: dict[str, str]) -> None:
    _create()
    sandbox.cloud.faults.add({"kind": "stale_volume_list", "seconds": 1.0})
    t0 = time.monotonic()
    gone = CliRunner().invoke(app, ["volume", "rm", "cache1", "--json"])
    assert gone.exit_code == 0, gone.output
    # the proof stood only once the listing caught up: nothing lists it the moment rm returns
    assert "tp-vol-cache1" not in _listed(sandbox)
    assert time.monotonic() - t0 >= 1.0
    proof = json.loads(gone.stdout)
    assert proof["proven"] is True and proof["listed_by_name"] == 0
    assert list(proof["direct_lookup_gone"].values()) == [True]
    assert Ledger(tailpod_home).volume("tp-vol-cache1").status == "deleted"  # type: ignore[union-attr]


def test_rm_waits_until_a_lagging_direct_look_up_answers_404(
        sandbox: Sandbox, tailpod_home: Path, cli_env: dict[str, str]) -> None:
    _create()
    sandbox.cloud.faults.add({"kind": "stale_volume_get", "seconds": 1.0})
    gone = CliRunner().invoke(app, ["volume", "rm", "cache1", "--json"])
    assert gone.exit_code == 0, gone.output
    (volume_id,) = json.loads(gone.stdout)["volume_ids"]
    (account,) = [a for a in sandbox.cloud.accounts.values() if a.provider == "runpod"]
    assert sandbox.cloud.volume_found(account, volume_id) is None  # 404 the moment rm returns


def test_a_listing_that_lags_past_the_wait_is_not_proof(
        sandbox: Sandbox, tailpod_home: Path, cli_env: dict[str, str]) -> None:
    _create()
    sandbox.cloud.faults.add({"kind": "stale_volume_list", "seconds": 30.0})
    settings = settings_for(sandbox, tailpod_home, **cli_env)
    ledger = Ledger(settings.state_dir)
    provider = get_provider("runpod", settings, timings=fast_timings())
    with pytest.raises(BillingNotProven) as caught:
        vol.delete_volume_proven(provider, ledger, "cache1", wait_s=0.5)
    assert "still bills" in caught.value.message and "still lists it" in caught.value.message
    assert caught.value.exit_code == 3
    record = ledger.volume("tp-vol-cache1")  # still there, so still billing: never "deleted"
    assert record is not None and record.active and record.status != "deleted"
    assert record.events[-1]["event"] == "delete-failed"


def test_a_failing_listing_leaves_the_volume_unknown_never_deleted(
        sandbox: Sandbox, tailpod_home: Path, cli_env: dict[str, str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    _create()
    # the API client's short test timings, so that its retries of the 503 take no seconds
    monkeypatch.setattr("tailpod.cli.volume.remote_providers", lambda settings: {
        "runpod": get_provider("runpod", settings, timings=fast_timings())})
    fault = sandbox.cloud.faults.add({"kind": "server_error", "provider": "runpod",
                                      "op": "volume_list", "status": 503})
    listing = CliRunner().invoke(app, ["volume", "ls", "--json"])
    assert listing.exit_code == 3, listing.output
    record = Ledger(tailpod_home).volume("tp-vol-cache1")
    assert record is not None and record.status == "kept"  # not settled as deleted
    doc = json.loads(listing.stdout)
    # not "kept on purpose" (nobody could say it is there) and not gone: unknown, it may bill
    assert doc["kept_on_purpose"] == []
    assert [(r["name"], r["state"]) for r in doc["billing_by_mistake"]] == [("cache1", "unknown")]
    assert "runpod" in doc["errors"]
    sandbox.cloud.faults.clear()
    assert fault.fired >= 1
    again = CliRunner().invoke(app, ["volume", "ls", "--json"])
    assert again.exit_code == 0, again.output
    assert [r["name"] for r in json.loads(again.stdout)["kept_on_purpose"]] == ["cache1"]
