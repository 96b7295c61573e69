"""adversary-2026-12 F10 (#9, #19) as the adversary saw it: `up` SIGKILLed while the create's
answer is in flight, after the provider made the pod and the pod joined the tailnet. `down TAG`
proved the pod gone, but its proof had no tailnet row and the device `tailpod-<tag>` stayed
(also after `down --all`). The record's first write holds the tailnet intent, so `down TAG`
deletes the device and says so. (test_up_key_refused_create.py pins the proof's row where no
pod was made; here the pod and its device exist.)"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import pytest

from tailpod.engines.base import EngineConfig
from tailpod.ledger import Ledger, PodRecord
from tailpod.pods import cloud as cloud_up
from tailpod.provision import create as create_mod
from tailpod.provision.tailnet.devices import PROOF_NAME
from tailpod.provision.teardown import down_remote, run_dir_for
from tailpod.sandbox import Sandbox
from tailpod.sandbox.tailscale import DEFAULT_API_TOKEN, DEFAULT_AUTH_KEY, register_device_standin
from tailpod.secrets import Secret

from .test_up_key_after_volume import IMAGE, _settings, world  # noqa: F401 - world: a fixture


def _hostnames(sb: Sandbox) -> list[str]:
    reply = httpx.get(sb.extra_urls["tailscale"] + "/api/v2/tailnet/-/devices",
                      headers={"Authorization": f"Bearer {DEFAULT_API_TOKEN}"}, timeout=10)
    reply.raise_for_status()
    return sorted(d["hostname"] for d in reply.json()["devices"])


def test_down_of_an_up_killed_in_its_create_deletes_the_pods_device(
        world: Sandbox, tailpod_home: Path, monkeypatch: pytest.MonkeyPatch) -> None:  # noqa: F811
    settings = _settings(world, tailpod_home, "NVIDIA A40")
    ledger = Ledger(settings.state_dir)
    monkeypatch.setattr(cloud_up, "pinned_image", lambda *_a: (IMAGE, None))

    def made_joined_then_killed(provider: Any, spec: Any, ledger: Ledger, record: PodRecord,
                                **_k: Any) -> None:
        ledger.put(record)  # the record's first write, as create_pod_safely makes it
        provider.create(spec)  # the provider made the pod...
        register_device_standin(world.extra_urls["tailscale"], Secret(DEFAULT_AUTH_KEY),
                                f"tailpod-{record.run_tag}", "127.0.0.1", 1)  # ...it joined
        raise SystemExit(137)  # ...and `up` is gone before the create's answer came back

    monkeypatch.setattr(create_mod, "create_pod_safely", made_joined_then_killed)
    with pytest.raises(SystemExit):
        cloud_up.up_cloud(settings, EngineConfig(engine="vllm", model=str(tailpod_home)),
                          ledger, lambda _line: None, preflight=False)
    [record] = ledger.all()
    device = f"tailpod-{record.run_tag}"
    assert world.billing_now() != [] and _hostnames(world) == [device]
    down_remote(settings, ledger, record)
    assert world.billing_now() == []
    assert _hostnames(world) == []
    proof = json.loads((run_dir_for(settings, record.run_tag) / "billing-proof.json").read_text())
    [check] = [c for c in proof["checks"] if c["name"] == PROOF_NAME]
    assert check["passed"] is True and device in str(check["detail"]), check
