"""`benchmark --resume-on-preemption`: the replacement pod gets its `Host tailpod-<run_tag>` entry
in `$TAILPOD_HOME/ssh_config` as `up` writes one, and the lost pod's entry is removed as `down`
removes it (newcomer pass: only `up` wrote one, so `ssh tailpod-<new>` found no host)."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from tailpod.cli.main import app
from tailpod.ledger import Ledger
from tailpod.provision.ssh.user_config import ssh_host_alias, write_ssh_config_entry
from tailpod.sandbox import Sandbox

from .test_benchmark_resumes_on_a_new_spot_pod import Pods, _rent_spot_pod


def _hosts(home: Path) -> list[str]:
    path = home / "ssh_config"
    text = path.read_text() if path.is_file() else ""
    return [line.split()[1] for line in text.splitlines() if line.startswith("Host ")]


def test_the_replacement_pod_is_written_to_ssh_config_and_the_lost_one_removed(
        sandbox: Sandbox, tailpod_home: Path, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    key = tmp_path / "id_ed25519"
    key.write_text("not read: only named in the entry\n")
    monkeypatch.setenv("TAILPOD_SSH_KEY", str(key))
    first = _rent_spot_pod(sandbox, tailpod_home, monkeypatch)
    assert first.ssh and first.ssh.get("host")
    # what `up` left for the first pod
    write_ssh_config_entry(tailpod_home, first.run_tag, first.ssh["host"],
                           int(first.ssh["port"]), "root", tailpod_home / "key")
    assert _hosts(tailpod_home) == [f"tailpod-{first.run_tag}"]
    pods = Pods(sandbox, cut_at=2)
    res = pods.benchmark(monkeypatch, first.run_tag)
    assert res.exit_code == 0, res.output
    [new_tag] = pods.steps.rented
    new = Ledger(tailpod_home).get(new_tag)
    assert new is not None and new.ssh
    assert _hosts(tailpod_home) == [ssh_host_alias(new_tag)]
    text = (tailpod_home / "ssh_config").read_text()
    assert f"HostName {new.ssh['host']}" in text and f"Port {new.ssh['port']}" in text
    assert f"IdentityFile {key}" in text
    said = "".join(res.output.split())  # a long path wraps anywhere
    assert f"sshconfigentrywrittento{tailpod_home / 'ssh_config'}(tailpod-{new_tag})" in said
    down = CliRunner().invoke(app, ["down", new_tag])
    assert down.exit_code == 0, down.output
    assert _hosts(tailpod_home) == []
