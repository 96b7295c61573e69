"""`up` whose booting pod a concurrent `tailpod down --all` ended (adversary-2026-12 #37: with
`down --all` 4 s after `up`, `up` waited 122 s for the tailnet join of a terminated pod, then
blamed the tailnet, the image and the start command; no `up` named the concurrent `down`).
`up` notices within its boot watch, names the `down`, and its own teardown proves nothing bills."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import pytest

from tailpod.engines.base import EngineConfig
from tailpod.errors import TailpodError
from tailpod.ledger import Ledger
from tailpod.pods import cloud as cloud_up
from tailpod.provision.teardown import down_remote
from tailpod.sandbox import start_sandbox
from tests.integration.cloud.test_cloud_fidelity import VLLM_PINNED, up_settings

WAIT_S = 60.0  # what the tailnet/SSH wait would hold on for; the test never gets near it


def test_up_stops_waiting_when_another_down_ended_its_pod_and_names_it(
    tmp_path: Path, tailpod_home: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    sb = start_sandbox(start_delay_s=0.1, workdir=tmp_path / "sandbox")
    try:
        settings = up_settings(sb, tailpod_home)
        monkeypatch.setattr(cloud_up, "pinned_image", lambda *_a: (VLLM_PINNED, None))
        monkeypatch.setattr(cloud_up, "BOOT_WATCH_S", 0.2)
        released = threading.Event()

        def never_reached(_settings: Any, record: Any, *_a: Any) -> None:
            # the other process: `down --all` with its own ledger, while this one waits
            down_remote(settings, Ledger(settings.state_dir), Ledger(settings.state_dir)
                        .get(record.run_tag))
            released.wait(WAIT_S)
            raise TailpodError(f"the pod did not join the tailnet within {WAIT_S:.0f} s")

        monkeypatch.setattr(cloud_up, "reach_pod", never_reached)
        said: list[str] = []
        started = time.monotonic()
        try:
            with pytest.raises(TailpodError) as caught:
                cloud_up.up_cloud(settings, EngineConfig(engine="vllm", model="org/m"),
                                  Ledger(settings.state_dir), said.append, preflight=False)
        finally:
            released.set()
        took = time.monotonic() - started
        (record,) = Ledger(settings.state_dir).all()
        assert took < WAIT_S / 2, (took, said)
        assert f"{record.run_tag} was ended by `tailpod down` in another process" \
            in caught.value.message, caught.value.message
        assert "billing proven stopped" in caught.value.message
        assert record.status == "terminated"
        assert sb.billing_now() == []
    finally:
        sb.close()
