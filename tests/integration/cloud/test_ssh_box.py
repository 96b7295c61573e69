"""`--provider ssh` (your own box) without an engine: the address, bad input before the ledger, and
an unreachable box that `down` refuses to call stopped. The whole path with the real engine is
tests/e2e/test_ssh_box.py."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tailpod.cli.main import app
from tailpod.errors import ConfigError
from tailpod.ledger import Ledger, PodRecord
from tailpod.provision.ssh_box import BoxAddress

from .conftest import ssh_box_shell

runner = CliRunner()


@pytest.mark.parametrize(("text", "want"), [
    ("ubuntu@gpu-box", ("ubuntu", "gpu-box", 22)),
    ("root@10.0.0.7:2222", ("root", "10.0.0.7", 2222)),
    ("me@box.tail1234.ts.net:65535", ("me", "box.tail1234.ts.net", 65535)),
])
def test_a_box_address_reads_user_host_and_port(text: str, want: tuple[str, str, int]) -> None:
    box = BoxAddress.parse(text)
    assert (box.user, box.host, box.port) == want
    assert BoxAddress.from_pod_id(box.pod_id("tp-x")) == (box, "tp-x")


@pytest.mark.parametrize("text", ["", "root@box:0", "root@box:65536", "a b@box", "root@", "@box"])
def test_a_bad_box_address_is_refused(text: str) -> None:
    with pytest.raises(ConfigError):
        BoxAddress.parse(text)


def test_up_without_a_box_is_refused_before_the_ledger(tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TAILPOD_HOME", str(tmp_path))
    monkeypatch.setenv("TAILPOD_ENV_FILE", os.devnull)
    monkeypatch.delenv("TAILPOD_SSH_HOST", raising=False)
    result = runner.invoke(app, ["up", "--provider", "ssh", "--model", "some/model"])
    assert result.exit_code == 2 and "--host" in result.output
    assert Ledger(tmp_path).all() == []


def test_down_of_an_unreachable_box_is_not_proven_and_says_how_to_stop_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Port 1 on loopback refuses SSH: nothing can be asked, so nothing is called stopped."""
    ssh_box_shell(tmp_path, monkeypatch, home=tmp_path)
    pod_id = "ssh://root@127.0.0.1:1/tp-box"
    Ledger(tmp_path).put(PodRecord(run_tag="tp-box", provider="ssh", status="running",
                                   pod_id=pod_id, ssh={"host": "127.0.0.1", "port": 1}))
    result = runner.invoke(app, ["down", "tp-box", "--timeout", "5"])
    assert result.exit_code == 3, result.output
    flat = " ".join(result.output.split())
    assert "ssh -p 1 root@127.0.0.1" in flat and "kill -TERM -PGID" in flat
    proof = json.loads((tmp_path / "results" / "tp-box" / "billing-proof.json").read_text())
    assert proof["proven"] is False
    failed = [c["name"] for c in proof["checks"] if not c["passed"]]
    assert failed, proof["checks"]
