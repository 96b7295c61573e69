"""The agent's `probe run` end to end against the synthetic server: counting, failures, cache,
stamps, and the cells it is given measured as given."""

from __future__ import annotations

import json
import statistics
from collections.abc import Callable
from pathlib import Path

import pytest

from tailpod.agent import OFF_POD_FLAG
from tailpod.agent.probes import basics, transport
from tailpod.engines.base import EngineConfig
from tailpod.measure.hosts import probe_cells
from tailpod.measure.plan import Arm, Cell
from tailpod.sandbox.synthetic_server import SyntheticServer

from .conftest import call_agent, probe_run, sweep_cells

REQUEST_KEYS = {
    "kind", "schema_version", "run_id", "arm", "concurrency", "rep", "prompt_class", "cell",
    "index", "ok", "error", "cache", "prompt_tokens", "completion_tokens", "ttft_s", "e2e_s",
    "decode_tok_s", "tpot_s", "chunks", "chunk_gap_p50_s", "chunk_gap_max_s", "t_start",
    "measured_from",
}
CELL_KEYS = {
    "kind", "schema_version", "run_id", "arm", "concurrency", "rep", "prompt_class", "cell",
    "requests", "failed", "wall_s", "output_tokens", "output_tok_s", "ttft_p50_s", "ttft_p90_s",
    "ttft_p99_s", "e2e_p50_s", "e2e_p90_s", "e2e_p99_s", "decode_tok_s_p50", "tpot_p50_s",
    "client_cpu_s", "loop_lag_max_s", "client_bound", "acceptance", "flags", "void",
    "measured_from",
}
# Additive keys beyond results format v1 (documented in docs/probe.md).
EXTRA_REQUEST_KEYS = {"flags", "finish_reason"}
EXTRA_CELL_KEYS = {"cache"}


def run(server: SyntheticServer, out: Path, classes: list[str], concurrency: tuple[int, ...] = (1,),
        caches: tuple[str, ...] = ("cold",), **options: object) -> list[dict]:
    """`probe run` of the sweep's cells for arm "plain"; the rows it returned, which must be the
    rows it also appended to `out`."""
    rows = probe_run({"base_url": server.base_url, "run_id": "rid", **options},
                     sweep_cells("plain", list(concurrency), classes, caches=caches), out)
    assert [json.loads(line) for line in out.read_text().splitlines()] == rows
    return rows


@pytest.mark.parametrize("transport", ["asyncio", "threads"])
def test_rows_follow_the_format_and_count_from_usage(
    synthetic: Callable[..., SyntheticServer], tmp_path: Path, transport: str
) -> None:
    server = synthetic(rate=1000.0, ttft_s=0.005, tokens_per_chunk=(4,))
    rows = run(server, tmp_path / "rows.jsonl", ["prose", "code"], (1, 3), transport=transport,
               requests_per_cell=6, max_tokens=49)
    cells = [r for r in rows if r["kind"] == "cell"]
    reqs = [r for r in rows if r["kind"] == "request"]
    assert [c["cell"] for c in cells] == ["plain|c1|r0|prose", "plain|c1|r0|code",
                                         "plain|c3|r0|prose", "plain|c3|r0|code"]
    assert len(reqs) == 24
    for r in reqs:
        assert set(r) == REQUEST_KEYS | EXTRA_REQUEST_KEYS
        assert r["ok"] and r["completion_tokens"] == 49  # usage, although chunks carry 4
        assert r["chunks"] == 13  # 1 prefill chunk + 12 chunks of 4 tokens
        assert r["measured_from"] == "pod" and r["run_id"] == "rid"
        # decode rate is (usage tokens - 1) over the client's first-to-last chunk span, never
        # the chunk count (13) over it; how closely that span agrees with the server's own
        # clock is a measurement, printed by benchmarks/probe_capacity.py ("decode err")
        span = r["e2e_s"] - r["ttft_s"]
        if span > 0:
            assert r["tpot_s"] == pytest.approx(span / 48)
            assert r["decode_tok_s"] == pytest.approx(48 / span)
        else:  # the whole stream came in one read (a loaded machine): nothing to time
            assert r["tpot_s"] is None and r["decode_tok_s"] is None
    assert any(r["decode_tok_s"] is not None for r in reqs)
    # The cell's p50 is the plain median of its requests' rates (nulls left out), taken with the
    # standard library rather than the probe's own percentile.
    rates = [r["decode_tok_s"] for r in reqs[:6] if r["decode_tok_s"] is not None]
    assert cells[0]["decode_tok_s_p50"] == pytest.approx(statistics.median(rates))
    for c in cells:
        assert set(c) == CELL_KEYS | EXTRA_CELL_KEYS
        assert c["output_tokens"] == 6 * 49 and c["failed"] == 0  # 6 requests of max_tokens
        # The wall time covers the server's own schedule (ttft, then 48 tokens at 1000/s per
        # stream, in ceil(6 / c) waves): a lower bound on time, from the server's settings.
        waves = -(-6 // c["concurrency"])
        assert c["wall_s"] >= 0.98 * waves * (0.005 + 48 / 1000.0)
        assert c["output_tok_s"] == pytest.approx(6 * 49 / c["wall_s"])
        assert c["client_cpu_s"] >= 0 and c["loop_lag_max_s"] is not None
        # No flag but the two a loaded machine raises, and loop_lag exactly when the lag passed
        # the probe's threshold (50 ms, docs/probe.md): CI saw one at load 8.
        assert set(c["flags"]) <= {"loop_lag", "client_bound"} and c["void"] is False
        assert ("loop_lag" in c["flags"]) == (c["loop_lag_max_s"] > 0.05)


def test_failures_are_counted_flagged_and_kept_out_of_latency(
    synthetic: Callable[..., SyntheticServer], tmp_path: Path,
    prompt_dir: Callable[..., Path],
) -> None:
    server = synthetic()
    prompts = prompt_dir("fine", "boom [[FAIL500]]", "cut [[DROP:3]]", "also fine")
    rows = run(server, tmp_path / "rows.jsonl", ["t"], (2,), prompts_dir=str(prompts),
               requests_per_cell=8, warmup=0)
    reqs = [r for r in rows if r["kind"] == "request"]
    cell = rows[-1]
    failed = [r for r in reqs if not r["ok"]]
    assert len(failed) == 4 and cell["failed"] == 4 and cell["requests"] == 8
    assert "failures" in cell["flags"]
    assert {r["error"].split(":")[0] for r in failed} == {"HTTP 500", "ConnectionResetError"}
    assert all(r["completion_tokens"] is None for r in failed)
    ok = [r for r in reqs if r["ok"]]
    assert cell["ttft_p50_s"] == pytest.approx(statistics.median([r["ttft_s"] for r in ok]))
    assert cell["output_tokens"] == sum(r["completion_tokens"] for r in ok)


def test_missing_usage_is_null_and_flagged_never_estimated(
    synthetic: Callable[..., SyntheticServer], tmp_path: Path
) -> None:
    server = synthetic(usage=False, tokens_per_chunk=(3,))
    rows = run(server, tmp_path / "rows.jsonl", ["prose"], requests_per_cell=3)
    for r in rows[:-1]:
        assert r["ok"] and r["completion_tokens"] is None and r["flags"] == ["no_usage"]
        assert r["decode_tok_s"] is None and r["tpot_s"] is None and r["chunks"] > 0
        assert r["ttft_s"] is not None
    assert "no_usage" in rows[-1]["flags"] and rows[-1]["output_tokens"] == 0


def test_cold_requests_carry_distinct_salts_and_warm_ones_none(
    synthetic: Callable[..., SyntheticServer], tmp_path: Path
) -> None:
    server = synthetic()
    rows = run(server, tmp_path / "rows.jsonl", ["code"], (2,), ("cold", "warm"),
               requests_per_cell=6, warmup=1)
    bodies = server.stats.bodies
    cold, warm = bodies[:7], bodies[7:]  # 1 warm-up + 6 cold, then 4 priming + 6 warm
    salts = [b.get("cache_salt") for b in cold]
    assert all(salts) and len(set(salts)) == len(salts)
    assert len(warm) == 4 + 6 and all("cache_salt" not in b for b in warm)
    for b in bodies:
        assert b["stream"] is True and b["stream_options"] == {"include_usage": True}
        assert b["temperature"] == 0 and b["ignore_eos"] is True
    cells = [r for r in rows if r["kind"] == "cell"]
    assert [c["cell"] for c in cells] == ["plain|c2|r0|code", "plain|c2|r0|code|warm"]
    assert [c["cache"] for c in cells] == ["cold", "warm"]
    assert {r["cache"] for r in rows if r["cell"].endswith("warm")} == {"warm"}


def test_structured_class_sends_its_json_schema(
    synthetic: Callable[..., SyntheticServer], tmp_path: Path
) -> None:
    server = synthetic()
    run(server, tmp_path / "rows.jsonl", ["structured"], requests_per_cell=2, warmup=0)
    for body in server.stats.bodies:
        assert body["response_format"]["type"] == "json_schema"
        assert body["ignore_eos"] is False  # a finished grammar must be allowed to stop


def test_off_pod_rows_are_stamped(
    synthetic: Callable[..., SyntheticServer], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    server = synthetic()
    monkeypatch.setattr(transport, "is_loopback_host", lambda host: False)
    rows = run(server, tmp_path / "rows.jsonl", ["prose"], requests_per_cell=2)
    assert {r["measured_from"] for r in rows} == {"off-pod"}
    assert OFF_POD_FLAG in rows[-1]["flags"]


@pytest.mark.parametrize(
    ("host", "loopback"),
    [("127.0.0.1", True), ("127.3.4.5", True), ("::1", True), ("[::1]", True),
     ("localhost", True), ("LOCALHOST", True), ("10.0.0.7", False), ("100.64.1.2", False),
     ("fd7a:115c:a1e0::1", False), ("pod.invalid", False)],
)
def test_loopback_detection(host: str, loopback: bool) -> None:
    assert transport.is_loopback_host(host) is loopback


def test_measured_from_reads_the_url() -> None:
    assert transport.measured_from("http://127.0.0.1:8000") == "pod"
    assert transport.measured_from("http://[::1]:8000/") == "pod"
    assert transport.measured_from("http://100.101.102.103:8000") == "off-pod"


def test_the_cells_given_are_measured_as_given(
    synthetic: Callable[..., SyntheticServer], tmp_path: Path
) -> None:
    """The laptop's sweep decides rep and cell id; the pod writes them as given (no renumbering
    afterwards), in the order given."""
    server = synthetic()
    cells = [{"arm": "spec", "concurrency": 2, "rep": 3, "prompt_class": "prose",
              "cell": "spec|c2|r3|prose"},
             {"arm": "spec", "concurrency": 1, "rep": 0, "prompt_class": "code", "cache": "warm"}]
    rows = probe_run({"base_url": server.base_url, "requests_per_cell": 2, "max_tokens": 5},
                     cells)
    cell_rows = [r for r in rows if r["kind"] == "cell"]
    assert [(c["cell"], c["rep"], c["cache"]) for c in cell_rows] == [
        ("spec|c2|r3|prose", 3, "cold"), ("spec|c1|r0|code|warm", 0, "warm")]
    assert {r["rep"] for r in rows if r["cell"] == "spec|c2|r3|prose"} == {3}
    assert all(r["completion_tokens"] == 5 for r in rows if r["kind"] == "request")


def test_benchmark_cache_both_measures_each_cell_cold_then_warm(
    synthetic: Callable[..., SyntheticServer]
) -> None:
    """`tailpod benchmark --cache both` reaches the agent as a cold and a warm cell per sweep cell
    (the agent itself takes only cold or warm)."""
    server = synthetic()
    arm = Arm(label="plain", config=EngineConfig(engine="vllm", model="m"))
    cell = Cell(arm="plain", concurrency=1, rep=2, prompt_class="prose")
    rows = probe_run({"base_url": server.base_url, "requests_per_cell": 2, "max_tokens": 5},
                     probe_cells(arm, [cell], "both"))
    cell_rows = [r for r in rows if r["kind"] == "cell"]
    assert [(c["cell"], c["cache"], c["rep"]) for c in cell_rows] == [
        (cell.cell_id, "cold", 2), (cell.cell_id + "|warm", "warm", 2)]


def test_a_typo_in_options_or_cells_is_a_usage_error(
    synthetic: Callable[..., SyntheticServer]
) -> None:
    server = synthetic()
    cell = sweep_cells("plain", [1], ["prose"])
    code, envelope = call_agent("probe run", {"options": {"concurency": [2]}, "cells": cell})
    assert code == 2 and envelope["error"]["kind"] == "usage"
    assert "concurency" in envelope["error"]["message"]
    code, envelope = call_agent("probe run", {"options": {"base_url": server.base_url},
                                              "cells": [{**cell[0], "reps": 2}]})
    assert code == 2 and "reps" in envelope["error"]["message"]
    assert server.stats.bodies == []  # nothing was measured


def test_unreachable_server_is_a_clear_error() -> None:
    code, envelope = call_agent("probe run", {"options": {"base_url": "http://127.0.0.1:9"},
                                              "cells": sweep_cells("plain", [1], ["prose"])})
    assert code == 1 and not envelope["ok"]
    assert envelope["error"]["kind"] == "probe" and "cannot reach" in envelope["error"]["message"]


def test_api_key_is_sent_but_never_written(
    synthetic: Callable[..., SyntheticServer], tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture, prompt_dir: Callable[..., Path],
) -> None:
    secret = "sk-test-" + "9" * 24
    monkeypatch.setenv(basics.API_KEY_ENV, secret)
    server = synthetic()
    prompts = prompt_dir("fine", "boom [[FAIL500]]")
    out = tmp_path / "rows.jsonl"
    rows = run(server, out, ["t"], prompts_dir=str(prompts), requests_per_cell=2)
    assert rows[-1]["failed"] == 1
    assert secret not in out.read_text() and secret not in json.dumps(rows)
    captured = capsys.readouterr()
    assert secret not in captured.err and secret not in captured.out
