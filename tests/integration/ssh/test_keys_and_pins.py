"""Key loading errors, settings wiring, the pin file, and the user-facing ssh conveniences."""

from __future__ import annotations

import shlex
from collections.abc import Callable
from pathlib import Path

import paramiko
import pytest

from tailpod.config import load_settings
from tailpod.errors import ConfigError
from tailpod.provision.ssh import (
    HostKeyChanged,
    KnownHosts,
    fingerprint,
    host_key_entry,
    load_private_key,
    openai_base_url,
    public_key_line,
    remove_ssh_config_entry,
    resolve_key_path,
    ssh_command,
    write_ssh_config_entry,
)
from tailpod.secrets import Secret


def test_key_errors_are_one_clear_line(tmp_path: Path, new_key: Callable[..., Path]) -> None:
    with pytest.raises(ConfigError, match="does not exist"):
        load_private_key(tmp_path / "absent")
    plain = new_key(tmp_path / "plain")
    with pytest.raises(ConfigError, match="not a private key file"):
        load_private_key(Path(str(plain) + ".pub"))
    garbage = tmp_path / "garbage"
    garbage.write_text("-----BEGIN OPENSSH PRIVATE KEY-----\nnot base64 at all\n")
    with pytest.raises(ConfigError, match="not a usable private key"):
        load_private_key(garbage)

    locked = new_key(tmp_path / "locked", passphrase="correct horse")
    with pytest.raises(ConfigError, match="protected by a passphrase") as needs:
        load_private_key(locked)
    assert "TAILPOD_SSH_KEY_PASSPHRASE" in str(needs.value)
    with pytest.raises(ConfigError, match="wrong passphrase") as wrong:
        load_private_key(locked, Secret("battery staple"))
    assert "battery" not in str(wrong.value)
    assert isinstance(load_private_key(locked, Secret("correct horse")), paramiko.PKey)
    # a passphrase set for an unencrypted key is simply not needed
    assert isinstance(load_private_key(plain, Secret("unused-passphrase")), paramiko.PKey)


def test_rsa_pem_key_with_passphrase(tmp_path: Path, new_key: Callable[..., Path]) -> None:
    pem = new_key(tmp_path / "rsa", passphrase="pem-passphrase", kind="rsa")
    with pytest.raises(ConfigError, match="wrong passphrase"):
        load_private_key(pem, "nope-nope")
    key = load_private_key(pem, "pem-passphrase")
    assert public_key_line(key).startswith("ssh-rsa AAAA")


def test_passphrase_comes_from_settings_and_stays_masked(tmp_path: Path) -> None:
    settings = load_settings(
        env={"TAILPOD_SSH_KEY": str(tmp_path / "k"), "TAILPOD_SSH_KEY_PASSPHRASE": "s3cret-phrase"},
        dotenv_path=tmp_path / "absent.env",
    )
    assert isinstance(settings.ssh_key_passphrase, Secret)
    assert settings.ssh_key_passphrase.reveal() == "s3cret-phrase"
    assert "s3cret-phrase" not in repr(settings) and "s3cret-phrase" not in str(
        settings.public_view()
    )


def test_key_path_defaults_to_ssh_dir(tmp_path: Path, new_key: Callable[..., Path]) -> None:
    with pytest.raises(ConfigError, match="no SSH key"):
        resolve_key_path(None, tmp_path)
    new_key(tmp_path / "id_rsa", kind="rsa")
    assert resolve_key_path(None, tmp_path) == tmp_path / "id_rsa"
    new_key(tmp_path / "id_ed25519")
    assert resolve_key_path(None, tmp_path) == tmp_path / "id_ed25519"
    assert resolve_key_path(tmp_path / "mine", tmp_path) == tmp_path / "mine"


def test_known_hosts_pin_refuse_and_forget(
    tmp_path: Path, new_key: Callable[..., Path]
) -> None:
    pins = KnownHosts(tmp_path / "known_hosts")
    key_a = paramiko.PKey.from_path(str(new_key(tmp_path / "host_a")), None)
    key_b = paramiko.PKey.from_path(str(new_key(tmp_path / "host_b")), None)
    entry = host_key_entry("tailpod-tp-1.example.ts.net", 22)
    assert entry == "tailpod-tp-1.example.ts.net"
    assert host_key_entry("127.0.0.1", 2222) == "[127.0.0.1]:2222"

    assert pins.pin(entry, key_a) is True
    assert pins.pin(entry, key_a) is False  # same key again: nothing to do
    with pytest.raises(HostKeyChanged) as caught:
        pins.pin(entry, key_b)
    assert fingerprint(key_a) in str(caught.value) and fingerprint(key_b) in str(caught.value)
    assert pins.pin("[127.0.0.1]:2222", key_b) is True
    assert pins.forget(entry) == 1
    assert pins.lookup(entry) == {}
    assert pins.lookup("[127.0.0.1]:2222")  # the other pin is untouched
    assert pins.pin(entry, key_b) is True


def test_ssh_config_entries_live_in_tailpods_own_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HOME", str(tmp_path / "user-home"))
    home = tmp_path / "tailpod home"
    key = tmp_path / "id_ed25519"
    path, include = write_ssh_config_entry(home, "tp-1", "100.64.0.2", 22, "root", key)
    write_ssh_config_entry(home, "tp-2", "127.0.0.1", 2201, "root", key)
    path2, _ = write_ssh_config_entry(home, "tp-1", "100.64.0.9", 22, "root", key)
    assert path == path2 == home / "ssh_config"
    assert include == f'Include "{path.resolve()}"'  # quoted: the path has a space
    text = path.read_text()
    assert text.count("Host tailpod-tp-1\n") == 1
    assert "100.64.0.9" in text and "100.64.0.2" not in text
    assert "HostKeyAlias [127.0.0.1]:2201" in text and "StrictHostKeyChecking yes" in text
    assert f'UserKnownHostsFile "{home / "known_hosts"}"' in text
    assert not (tmp_path / "user-home" / ".ssh").exists()

    assert remove_ssh_config_entry(home, "tp-1") is True
    assert remove_ssh_config_entry(home, "tp-1") is False
    assert "tailpod-tp-1" not in path.read_text() and "Host tailpod-tp-2" in path.read_text()


def test_ssh_command_and_base_url(tmp_path: Path) -> None:
    argv = ssh_command("100.64.0.2", 22, "root", tmp_path / "k", tmp_path / "kh", "pod.ts.net")
    joined = shlex.join(argv)
    assert "StrictHostKeyChecking=yes" in joined
    assert f"UserKnownHostsFile={tmp_path / 'kh'}" in joined
    assert "HostKeyAlias=pod.ts.net" in joined and argv[-1] == "root@100.64.0.2"
    assert "StrictHostKeyChecking=no" not in joined
    assert openai_base_url("tailpod-tp-1", 8000) == "http://tailpod-tp-1:8000/v1"
    assert openai_base_url("fd7a:115c:a1e0::5", 8000) == "http://[fd7a:115c:a1e0::5]:8000/v1"
