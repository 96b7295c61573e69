from __future__ import annotations

import shutil
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tailpod.agent_client.driver import PodAgent, SshTransport
from tailpod.config import Settings
from tailpod.provision.ssh import SshTarget, open_ssh
from tailpod.sandbox.sshd import SshdHost, sshd_available, start_sshd_host
from tailpod.sandbox.tailscale import serve


def make_key(path: Path, passphrase: str = "", kind: str = "ed25519") -> Path:
    if shutil.which("ssh-keygen") is None:
        pytest.skip("ssh-keygen (OpenSSH client) is not installed")
    subprocess.run(
        ["ssh-keygen", "-q", "-t", kind, "-N", passphrase, "-C", "test", "-f", str(path)],
        check=True,
        capture_output=True,
        timeout=30,
    )
    return path


@pytest.fixture()
def new_key() -> Callable[..., Path]:
    """ssh-keygen a key: new_key(path, passphrase="", kind="ed25519")."""
    return make_key


@pytest.fixture()
def user_key(tmp_path: Path) -> Path:
    return make_key(tmp_path / "id_user")


@pytest.fixture()
def need_sshd() -> None:
    if not sshd_available():
        pytest.skip("OpenSSH sshd is not installed (apt-get install -y openssh-server)")


@pytest.fixture()
def sshd_host(need_sshd: None, tmp_path: Path, user_key: Path) -> Iterator[SshdHost]:
    pub = (user_key.parent / (user_key.name + ".pub")).read_text()
    host = start_sshd_host(tmp_path / "pod-a", pub)
    try:
        yield host
    finally:
        host.stop()


@pytest.fixture()
def agent_pod(need_sshd: None, tmp_path: Path, user_key: Path) -> Iterator[tuple[SshdHost, Path]]:
    """A pod for the agent: sshd whose sessions keep their tailpod state under the test's
    directory, with that state directory (TAILPOD_POD_HOME/.tailpod)."""
    pub = (user_key.parent / (user_key.name + ".pub")).read_text()
    home = tmp_path / "pod-home"
    home.mkdir()
    host = start_sshd_host(tmp_path / "pod", pub, session_env={"TAILPOD_POD_HOME": str(home)})
    try:
        yield host, home / ".tailpod"
    finally:
        host.stop()


def open_agent(settings: Settings, host: SshdHost) -> PodAgent:
    """The pod agent on `host`, through one SSH session opened as `settings` say."""
    session = open_ssh(settings, SshTarget(host.host, host.port, host.user), wait_s=10)
    return PodAgent(SshTransport(session))


@pytest.fixture()
def tailscale() -> Iterator[tuple[object, str]]:
    server, url = serve("127.0.0.1", 0)
    try:
        yield server.emulator, url  # type: ignore[attr-defined]
    finally:
        server.shutdown()
        server.server_close()
