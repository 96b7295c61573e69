"""The pod's single-use tailnet auth key after a create that did not finish (issue 38 item 8;
adversary F10, F12, #9, #19, #26): a create the provider refuses (no capacity) leaves no live
minted key (it stayed valid 30 minutes, unknown to the ledger); the key's id and the tailnet
intent are in the ledger from the record's first write, so an `up` that dies during the create
leaves a record whose `down TAG` deletes and checks the pod's tailnet device."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import pytest

from tailpod.engines.base import EngineConfig
from tailpod.errors import CapacityError
from tailpod.ledger import Ledger, PodRecord
from tailpod.pods import cloud as cloud_up
from tailpod.provision import create as create_mod
from tailpod.provision.tailnet.devices import PROOF_NAME
from tailpod.provision.teardown import down_remote, run_dir_for
from tailpod.sandbox import Sandbox
from tailpod.sandbox.tailscale import DEFAULT_API_TOKEN, DEFAULT_AUTH_KEY_ID

from .test_up_key_after_volume import IMAGE, _settings, world  # noqa: F401 - world: a fixture

GPU = "NVIDIA A40"


def _live_keys(sb: Sandbox) -> list[str]:
    """The ids of the keys the emulated tailnet would still accept (not revoked or expired)."""
    base = sb.extra_urls["tailscale"].rstrip("/") + "/api/v2/tailnet/-/keys"
    auth = {"Authorization": f"Bearer {DEFAULT_API_TOKEN}"}
    listed = httpx.get(base, headers=auth, timeout=10.0)
    listed.raise_for_status()
    live = []
    for key_id in (k["id"] for k in listed.json()["keys"]):
        one = httpx.get(f"{base}/{key_id}", headers=auth, timeout=10.0)  # the list has ids only
        one.raise_for_status()
        if not one.json().get("invalid"):
            live.append(key_id)
    return sorted(live)


def test_a_refused_create_leaves_no_live_minted_key(
        world: Sandbox, tailpod_home: Path, monkeypatch: pytest.MonkeyPatch) -> None:  # noqa: F811
    settings = _settings(world, tailpod_home, GPU)
    ledger = Ledger(settings.state_dir)
    monkeypatch.setattr(cloud_up, "pinned_image", lambda *_a: (IMAGE, None))
    world.add_fault("capacity", provider="runpod", gpu=GPU)
    said: list[str] = []
    with pytest.raises(CapacityError):
        cloud_up.up_cloud(settings, EngineConfig(engine="vllm", model=str(tailpod_home)),
                          ledger, said.append, preflight=False)
    assert any("minted" in line for line in said), said  # a key really was minted and sent
    assert _live_keys(world) == [DEFAULT_AUTH_KEY_ID], said  # ...and dead: only the configured
    assert world.billing_now() == []  # nothing was rented
    [record] = ledger.all()  # the ledger knew the key while it lived
    assert record.tailnet.get("auth_key_id") and record.tailnet.get("enabled") is True


def test_an_up_that_dies_in_the_create_leaves_a_record_whose_down_deletes_the_device(
        world: Sandbox, tailpod_home: Path, monkeypatch: pytest.MonkeyPatch) -> None:  # noqa: F811
    settings = _settings(world, tailpod_home, GPU)
    ledger = Ledger(settings.state_dir)
    monkeypatch.setattr(cloud_up, "pinned_image", lambda *_a: (IMAGE, None))

    def dies_in_the_create(provider: Any, spec: Any, ledger: Ledger, record: PodRecord,
                           **_k: Any) -> None:
        ledger.put(record)  # the record's first write, as create_pod_safely makes it...
        raise SystemExit(137)  # ...then the process is gone, the create in flight

    monkeypatch.setattr(create_mod, "create_pod_safely", dies_in_the_create)
    with pytest.raises(SystemExit):
        cloud_up.up_cloud(settings, EngineConfig(engine="vllm", model=str(tailpod_home)),
                          ledger, lambda _line: None, preflight=False)
    [record] = ledger.all()
    assert record.tailnet.get("enabled") is True and record.tailnet.get("auth_key_id")
    down_remote(settings, ledger, record)  # nothing was created: proven, device checked
    proof = json.loads((run_dir_for(settings, record.run_tag) / "billing-proof.json").read_text())
    assert PROOF_NAME in [c["name"] for c in proof["checks"]], proof["checks"]
