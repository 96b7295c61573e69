"""A request the server never answers fails with "timeout after N s", N the deadline the probe was
given (agent/probes/transport.py `exchange_recorded`), not a rounding of it: a deadline under a
second used to read "timeout after 0 s"."""

from __future__ import annotations

import asyncio
import socket
import threading
import time
from collections.abc import Iterator

import pytest

from tailpod.agent.probes.stream import RequestSpec
from tailpod.agent.probes.transport import AsyncConnection, Endpoint, exchange_recorded


@pytest.fixture()
def silent_server() -> Iterator[str]:
    """A server on 127.0.0.1 that accepts connections and reads, but never answers."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    held: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        listener.settimeout(0.05)
        while not stop.is_set():
            try:
                conn, _ = listener.accept()
            except OSError:
                continue
            held.append(conn)

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{listener.getsockname()[1]}"
    stop.set()
    thread.join()
    for conn in held:
        conn.close()
    listener.close()


def _one_request(url: str, deadline_s: float) -> tuple[str | None, float]:
    spec = RequestSpec(0, "/v1/chat/completions", b"{}", "cold", "chat")

    async def go() -> tuple[str | None, float]:
        conn = AsyncConnection(Endpoint.parse(url), {})
        t0 = time.perf_counter()
        try:
            result = await exchange_recorded(conn, spec, "chat", deadline_s)
        finally:
            conn.close()
        return result.error, time.perf_counter() - t0

    return asyncio.run(go())


@pytest.mark.parametrize("deadline_s", [0.3, 0.6])
def test_an_unanswered_request_fails_naming_the_deadline_it_was_given(
        silent_server: str, deadline_s: float) -> None:
    error, waited_s = _one_request(silent_server, deadline_s)
    assert error == f"timeout after {deadline_s} s"
    # the deadline is what was waited: not cut short, and not waited twice over
    assert deadline_s <= waited_s < deadline_s + 0.5
