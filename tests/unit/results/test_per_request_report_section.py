"""The report's per-request section: each arm's and class's distribution of the requests' own
acceptance beside the /metrics figure, and the structure checks, from rows the probe wrote."""

from __future__ import annotations

import statistics
from pathlib import Path
from typing import Any

import pytest

from tailpod.agent.probes.load import RunOptions, run_cells
from tailpod.agent.probes.rows import CellPlan
from tailpod.results.analysis import analyze
from tailpod.results.io import load_run, write_run
from tailpod.results.report import render_run_markdown
from tailpod.results.schema import ROW_ADAPTER, CellRow, RequestRow
from tailpod.sandbox.synthetic_server import SyntheticConfig, SyntheticServer
from tests.helpers.run_builder import build_run


def _probe(arm: str, **config: Any) -> list[Any]:
    base: dict[str, Any] = {"rate": 4000.0, "ttft_s": 0.002, "tokens_per_chunk": (3, 1, 2)}
    server = SyntheticServer(SyntheticConfig(**{**base, **config})).start()
    try:
        opts = RunOptions(base_url=server.base_url, requests_per_cell=4, warmup=0,
                          ignore_eos=False, max_tokens=256, engine="vllm")
        _, rows = run_cells(opts, [CellPlan(arm, 1, 0, "structured", "cold")])
    finally:
        server.stop()
    return [ROW_ADAPTER.validate_python(r) for r in rows]


def test_the_section_reports_per_request_acceptance_and_structure(tmp_path: Path) -> None:
    rows = [*_probe("plain"), *_probe("mtp-k2", spec_k=2, per_request_spec="vllm")]
    run = build_run({"plain": {1: [1.0]}, "mtp-k2": {1: [1.0]}})
    run.cells = [r for r in rows if isinstance(r, CellRow)]
    run.requests = [r for r in rows if isinstance(r, RequestRow)]
    an = analyze(load_run(write_run(run, tmp_path / "run")))
    got = {(r["arm"], r["prompt_class"]): r for r in an["per_request"]}
    spec = got[("mtp-k2", "structured")]
    lengths = [r.spec_acceptance["acceptance_length"] for r in run.requests  # type: ignore[attr-defined]
               if r.arm == "mtp-k2"]
    assert len(lengths) == 4
    assert spec["acceptance"]["p50"] == pytest.approx(statistics.median(lengths))
    assert spec["acceptance"]["request_mean"] == pytest.approx(statistics.fmean(lengths))
    # the stand-in's counters and its per-request figures describe the same steps
    assert spec["acceptance"]["token_weighted"] == pytest.approx(spec["acceptance"]["metrics"])
    assert spec["structure"] == {"requests": 4, "json_ok": 4, "schema_ok": 4,
                                 "tool_call_ok": None, "finish_reasons": {"stop": 4},
                                 "chunk_gap_max_s": spec["structure"]["chunk_gap_max_s"]}
    assert got[("plain", "structured")]["acceptance"] is None
    md = render_run_markdown(an)
    assert "## Acceptance per request" in md and "## Structured output and tool calls" in md


def test_a_run_without_per_request_rows_has_no_section(tmp_path: Path) -> None:
    run = build_run({"plain": {1: [1.0]}, "mtp-k2": {1: [1.0]}})
    an = analyze(load_run(write_run(run, tmp_path / "run")))
    assert "per_request" not in an
    assert "Acceptance per request" not in render_run_markdown(an)
