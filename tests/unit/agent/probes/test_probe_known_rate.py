"""Throughput held against the synthetic server's known schedule (issue 26): a cell's wall time
can never be shorter than the server needs to emit its tokens, so its output tok/s can never
exceed the server's rate. Pins the mutant that ended the wall time at the first stream (it
reported 5,383 tok/s for a 1,000 tok/s server)."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from tailpod.sandbox.synthetic_server import SyntheticConfig, SyntheticServer
from tests.unit.agent.probes.conftest import probe_run, sweep_cells

RATE, TTFT, TOKENS, REQUESTS = 1000.0, 0.005, 49, 6


@pytest.mark.parametrize("concurrency", [1, 3])
@pytest.mark.parametrize("transport", ["asyncio", "threads"])
def test_a_cells_wall_time_covers_the_servers_schedule(
        tmp_path: Path, concurrency: int, transport: str) -> None:
    server = SyntheticServer(SyntheticConfig(rate=RATE, ttft_s=TTFT)).start()
    try:
        rows = probe_run({"base_url": server.base_url, "run_id": "rid", "transport": transport,
                          "requests_per_cell": REQUESTS, "max_tokens": TOKENS, "warmup": 0},
                         sweep_cells("plain", [concurrency], ["prose"]), tmp_path / "rows.jsonl")
    finally:
        server.stop()
    (cell,) = [r for r in rows if r["kind"] == "cell"]
    assert cell["failed"] == 0 and cell["output_tokens"] == REQUESTS * TOKENS
    # Each stream: its first token at arrival + ttft, then one token per 1/rate s (the server's
    # absolute schedule), so a wave of `concurrency` streams lasts at least this long.
    per_stream = TTFT + (TOKENS - 1) / RATE
    waves = math.ceil(REQUESTS / concurrency)
    assert cell["wall_s"] >= 0.98 * waves * per_stream  # a lower bound on time only
    ceiling = concurrency * TOKENS / per_stream  # tok/s the server can give at most
    assert cell["output_tok_s"] <= 1.02 * ceiling, (cell["output_tok_s"], ceiling)
