"""A speculative cell whose requests all failed (the tools class on a vLLM started without a
tool-call parser: every request answered HTTP 400) drafted nothing, and the probe writes its
acceptance figures as null rather than 1.0 (nothing was measured). Reading the run must accept
that, not stop the benchmark with a validation error (seen on the CPU engine, issue 39)."""

from __future__ import annotations

from pathlib import Path

from tailpod.agent.probes.metrics import acceptance_from_vllm
from tailpod.results.io import load_run, write_run
from tailpod.results.schema import ROW_ADAPTER, CellRow
from tests.helpers.run_builder import build_run


def test_a_cell_with_no_drafts_loads_with_null_acceptance(tmp_path: Path) -> None:
    counters = {"drafts": 10.0, "draft_tokens": 20.0, "accepted": 7.0, "per_pos": {},
                "generation_tokens": 100.0}
    acceptance, flags = acceptance_from_vllm(counters, dict(counters))
    assert flags == ["no_drafts"] and acceptance is not None
    assert acceptance["acceptance_length"] is None and acceptance["acceptance_rate"] is None
    run = build_run({"plain": {1: [1.0]}, "ngram-k2": {1: [1.0]}})
    spec_cell = next(c for c in run.cells if c.arm == "ngram-k2")
    data = {**spec_cell.model_dump(), "requests": 4, "failed": 4, "output_tokens": 0,
            "acceptance": acceptance, "flags": ["failures", "no_drafts"]}
    run.cells = [c for c in run.cells if c is not spec_cell] + [ROW_ADAPTER.validate_python(data)]
    loaded = load_run(write_run(run, tmp_path / "run"))
    cell = next(c for c in loaded.cells if isinstance(c, CellRow) and c.arm == "ngram-k2")
    assert cell.acceptance is not None and cell.acceptance.acceptance_length is None
