"""What `up` prints for a user to copy stays one line at any width: the image with its digest,
the `Include` line for ~/.ssh/config and its path. At e816682 rich folded stdout at the
terminal's width, so the digest and the `Include …` path each landed on a line of their own and
a copy-paste broke (newcomer 2.4)."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
from rich.console import Console

from tailpod.cli import pods as pods_cli
from tailpod.config import load_settings
from tailpod.ledger import PodRecord

TAG = "tp-20261206-124116-fefc93"
IMAGE = "vllm/vllm-openai@sha256:" + "9ad9" * 16
INCLUDE = f"Include /home/someone/.tailpod/ssh/{TAG}.conf"


def test_the_rental_lines_are_whole_at_80_columns(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    buf = io.StringIO()
    monkeypatch.setattr(pods_cli, "console", Console(file=buf, width=80, color_system=None))
    monkeypatch.setattr("tailpod.provision.tailnet.steps.remember_pod_ssh",
                        lambda *_a: (tmp_path / "ssh" / f"{TAG}.conf", INCLUDE))
    record = PodRecord(run_tag=TAG, provider="runpod", status="running", gpu="NVIDIA A40",
                       price_per_hr=0.4, image=IMAGE, ssh={"host": "h", "port": 22})
    settings = load_settings(env={"TAILPOD_HOME": str(tmp_path / "home")},
                             dotenv_path=tmp_path / "absent.env")
    pods_cli.print_cloud_up(settings, record)
    assert buf.getvalue().splitlines() == [
        f"up {TAG} on runpod: NVIDIA A40 at $0.400/hr, image {IMAGE}",
        f"  ssh: tailpod ssh {TAG}   (or add to ~/.ssh/config: {INCLUDE})",
        f"  ssh config entry written to {tmp_path / 'ssh' / f'{TAG}.conf'}",
    ]
