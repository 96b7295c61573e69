"""Ctrl-C during `up`'s engine start: the pod is torn down and billing proven stopped, and the
interrupt itself says so, so the terminal shows it at exit 130 (newcomer 2.26: it printed only
`interrupted` while billing-proof.json held the proof)."""

from __future__ import annotations

from contextlib import nullcontext
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from tailpod.engines.base import EngineConfig
from tailpod.errors import Interrupted
from tailpod.ledger import Ledger
from tailpod.pods import cloud as cloud_up
from tailpod.sandbox import start_sandbox
from tailpod.sandbox.sshd import sshd_available
from tests.integration.cloud.test_cloud_fidelity import VLLM_PINNED, up_settings


@pytest.mark.skipif(not sshd_available(), reason="OpenSSH sshd is not installed")
def test_ctrl_c_in_the_engine_start_tears_down_and_the_interrupt_says_proven(
    tmp_path: Path, tailpod_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    sb = start_sandbox(sshd=True, start_delay_s=0.1, workdir=tmp_path / "sandbox")
    try:
        settings = up_settings(sb, tailpod_home)
        ledger = Ledger(settings.state_dir)
        monkeypatch.setattr(cloud_up, "pinned_image", lambda *_a: (VLLM_PINNED, None))
        monkeypatch.setattr(cloud_up, "RUNNING_POLL_S", 0.2)
        agent = SimpleNamespace(state_dir="/pod/state")
        monkeypatch.setattr(cloud_up, "open_pod_agent", lambda *_a: nullcontext(agent))
        monkeypatch.setattr(cloud_up, "arm_deadman", lambda *_a: {"armed": True, "pid": 1})

        def ctrl_c(*_a: Any) -> None:
            raise KeyboardInterrupt

        monkeypatch.setattr(cloud_up, "start_arm", ctrl_c)
        with pytest.raises(Interrupted) as caught:
            cloud_up.up_cloud(settings, EngineConfig(engine="vllm", model="org/m"), ledger,
                              lambda _l: None, preflight=False)
        (record,) = ledger.all()
        assert caught.value.settled == f"{record.run_tag} was torn down, billing proven stopped"
        assert record.status == "terminated"
        assert sb.meter()["billing_count"] == 0
    finally:
        sb.close()
