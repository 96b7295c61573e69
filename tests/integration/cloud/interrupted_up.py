"""`up` on the sandbox cloud that stops dead at one step, so a test can `kill -9` it there.

Run from the repository as `python -m tests.integration.cloud.interrupted_up STEP READY_FILE`
with the sandbox's environment. STEP is
`create` (the provider has answered with the pod id, the create call has not returned),
`ssh-wait` (waiting for the pod to be reachable) or `engine-start` (connected, starting the
engine). The real ledger, provider adapter and teardown code run; only the pod's side (its start
command, SSH, the engine) is stood in for, since the process is killed before it would matter.
"""

from __future__ import annotations

import contextlib
import dataclasses
import sys
import time
from pathlib import Path
from typing import Any

from tailpod.config import load_settings
from tailpod.engines.base import EngineConfig
from tailpod.ledger import Ledger
from tailpod.pods import cloud as cloud_up
from tailpod.provision import create as lifecycle_create
from tailpod.provision import providers as provider_registry
from tailpod.provision.ssh.client import SshTarget
from tests.helpers.api_timings import fast_timings

STEP, READY = sys.argv[1], Path(sys.argv[2])
DIGEST = "sha256:" + "ab" * 32


def stop_here(*_args: Any, **_kwargs: Any) -> Any:
    READY.write_text(STEP)
    time.sleep(600)  # the test kills this process long before


def main() -> None:
    settings = load_settings()
    real_spec = cloud_up._spec
    cloud_up._spec = lambda *a, **k: dataclasses.replace(  # type: ignore[assignment]
        real_spec(*a, **k), start_command=["sleep", "600"])
    cloud_up.pinned_image = lambda *_a: (f"sandbox/image@{DIGEST}", DIGEST)  # type: ignore[assignment]
    real_get = provider_registry.get_provider
    provider_registry.get_provider = (  # type: ignore[assignment]
        lambda name, s, **_o: real_get(name, s, timings=fast_timings()))
    if STEP == "create":
        record_id = lifecycle_create._record_provider_id

        def recorded_then_stop(ledger: Ledger, run_tag: str, pod_id: str) -> None:
            record_id(ledger, run_tag, pod_id)
            stop_here()

        lifecycle_create._record_provider_id = recorded_then_stop  # type: ignore[assignment]
    elif STEP == "ssh-wait":
        cloud_up.reach_pod = stop_here  # type: ignore[assignment]
    elif STEP == "engine-start":
        cloud_up.reach_pod = lambda *_a: SshTarget("127.0.0.1", 22, name="pod")  # type: ignore[assignment]
        cloud_up.open_pod_agent = lambda *_a: contextlib.nullcontext(None)  # type: ignore[assignment]
        cloud_up.arm_deadman = stop_here  # type: ignore[assignment]
    cloud_up.up_cloud(settings, EngineConfig(engine="vllm", model="org/model"),
                      Ledger(settings.state_dir), print, use_tailnet=False, preflight=False)


if __name__ == "__main__":
    main()
