"""The sandbox's port choice for servers that bind later (pods' engines and sshd): free when
chosen, and outside the kernel's ephemeral range, where bind(0) and outgoing connections would
take it first on a busy machine (tailpod/sandbox/podhost.py free_port)."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from tailpod.sandbox import podhost


def ephemeral_low() -> int:
    return int(podhost.EPHEMERAL_RANGE_FILE.read_text().split()[0])


def test_ports_are_free_and_below_the_ephemeral_range() -> None:
    low = ephemeral_low()
    for _ in range(20):
        port = podhost.free_port()
        assert podhost.LOWEST_CHOSEN_PORT <= port < low
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", port))  # free: this would raise


def test_consecutive_ports_are_all_free() -> None:
    first = podhost.free_port(consecutive=3)
    assert first + 3 <= ephemeral_low()
    socks = [socket.socket() for _ in range(3)]
    try:
        for i, sock in enumerate(socks):
            sock.bind(("127.0.0.1", first + i))
    finally:
        for sock in socks:
            sock.close()


def test_a_port_in_use_is_never_chosen(monkeypatch: pytest.MonkeyPatch) -> None:
    with socket.socket() as held:
        held.bind(("127.0.0.1", podhost.LOWEST_CHOSEN_PORT))
        held.listen()
        monkeypatch.setattr(podhost.random.SystemRandom, "randrange",
                            lambda _self, lo, _hi: lo)  # always offers the held port first
        with pytest.raises(OSError, match="no 2 consecutive free ports"):
            podhost.free_port(consecutive=2)
        assert podhost.free_port() != podhost.LOWEST_CHOSEN_PORT  # single: the kernel's choice


def test_without_the_range_file_the_kernel_chooses(monkeypatch: pytest.MonkeyPatch,
                                                   tmp_path: Path) -> None:
    monkeypatch.setattr(podhost, "EPHEMERAL_RANGE_FILE", tmp_path / "absent")
    port = podhost.free_port()
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", port))
