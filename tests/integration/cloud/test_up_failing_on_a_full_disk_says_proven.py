"""`up` whose bootstrap meets a full disk after the rent (adversary-2026-12 re-check of F1: 12 KB
free under TAILPOD_HOME): the pod is torn down with proof, and the user reads one line, no
traceback, and that billing was proven stopped. At e816682 the user saw `bootstrap failed
(OSError)` and a raw `OSError: [Errno 28]` traceback, with nothing about the pod."""

from __future__ import annotations

import errno
from pathlib import Path
from typing import Any

import pytest
import typer

from tailpod.cli.common import handle_errors
from tailpod.engines.base import EngineConfig
from tailpod.ledger import Ledger
from tailpod.pods import cloud as cloud_up
from tailpod.sandbox import start_sandbox
from tests.integration.cloud.test_cloud_fidelity import VLLM_PINNED, up_settings

FULL = "/home/u/.tailpod/runs/tp-x/container.log"


def test_a_full_disk_in_the_bootstrap_tears_down_and_says_proven_in_one_line(
    tmp_path: Path, tailpod_home: Path, monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    sb = start_sandbox(start_delay_s=0.1, workdir=tmp_path / "sandbox")
    try:
        settings = up_settings(sb, tailpod_home)
        ledger = Ledger(settings.state_dir)
        monkeypatch.setattr(cloud_up, "pinned_image", lambda *_a: (VLLM_PINNED, None))

        def disk_full(*_a: Any, **_k: Any) -> None:  # the pod is rented and bills by now
            assert sb.billing_now() != []
            raise OSError(errno.ENOSPC, "No space left on device", FULL)

        monkeypatch.setattr(cloud_up, "await_running", disk_full)
        said: list[str] = []

        @handle_errors
        def up() -> None:
            cloud_up.up_cloud(settings, EngineConfig(engine="vllm", model="org/m"), ledger,
                              said.append, preflight=False)

        with pytest.raises(typer.Exit) as caught:
            up()
        out = capsys.readouterr()
        (record,) = ledger.all()
        assert caught.value.exit_code == 1
        assert "Traceback" not in out.out + out.err
        assert f"error: No space left on device: {FULL}" in out.out + out.err
        assert f"{record.run_tag} was torn down, billing proven stopped" in said
        assert record.status == "terminated"
        assert sb.billing_now() == []
    finally:
        sb.close()
