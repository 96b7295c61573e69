"""Acceptance per prompt length band (issue 39 item 4) in the per-request section, with hand-worked
numbers: token-weighted accepted drafts per verify step per band, and the collapse rule (a band
below half of the shortest band's drafts per step; docs/results.md "Acceptance by context
length")."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tailpod.results.analysis import analyze
from tailpod.results.io import load_run, write_run
from tailpod.results.report import render_run_markdown
from tailpod.results.schema import RequestRow
from tests.helpers.run_builder import build_run

ARM = "mtp-k2"


def _req(index: int, prompt_tokens: int | None, steps: int, accepted: int,
         ok: bool = True) -> RequestRow:
    return RequestRow(run_id="run-a", arm=ARM, concurrency=1, rep=0, prompt_class="prose",
                      cell=f"{ARM}|c1|r0|prose", index=index, ok=ok, t_start=0.0,
                      prompt_tokens=prompt_tokens, completion_tokens=1 + steps + accepted,
                      spec_acceptance={"source": "vllm_response", "steps": steps,
                                       "accepted": accepted,
                                       "acceptance_length": 1 + accepted / steps})


def _analyze(tmp_path: Path, requests: list[RequestRow]) -> dict[str, Any]:
    run = build_run({"plain": {1: [1.0]}, ARM: {1: [1.0]}}, acceptance={ARM: (60, 120, 50)})
    for cell in run.cells:
        if cell.arm == ARM:
            cell.acceptance_per_request = {"requests": len(requests)}
    run.requests = requests
    return analyze(load_run(write_run(run, tmp_path / "run")))


def test_bands_token_weighted_and_a_collapse_flagged(tmp_path: Path) -> None:
    an = _analyze(tmp_path, [
        _req(0, 200, 10, 15), _req(1, 900, 10, 13),  # <1k: 28 accepted / 20 steps = 1.4
        _req(2, 1024, 20, 16),  # 1024 opens 1k-4k: 0.8 >= 0.5 x 1.4 = 0.7, no collapse
        _req(3, 20000, 10, 6),  # >16k: 0.6 < 0.7, a collapse (its length 1.6 is above 2.4 / 2)
        _req(4, None, 10, 0),  # no prompt length: in no band
        _req(5, 30000, 10, 0, ok=False),  # failed: left out
    ])
    (row,) = [r for r in an["per_request"] if r["arm"] == ARM]
    assert row["bands"] == [
        {"band": "<1k", "requests": 2, "steps": 20, "accepted_per_step": 1.4,
         "acceptance_length": 2.4, "collapse": False},
        {"band": "1k-4k", "requests": 1, "steps": 20, "accepted_per_step": 0.8,
         "acceptance_length": 1.8, "collapse": False},
        {"band": ">16k", "requests": 1, "steps": 10, "accepted_per_step": 0.6,
         "acceptance_length": 1.6, "collapse": True},
    ]
    md = render_run_markdown(an)
    assert "## Acceptance by context length" in md
    (line,) = [ln for ln in md.splitlines() if "| >16k |" in ln]
    assert "**COLLAPSE**" in line
    assert not any("**COLLAPSE**" in ln for ln in md.splitlines() if "| 1k-4k |" in ln)


def test_nothing_to_fall_from_flags_nothing(tmp_path: Path) -> None:
    # the shortest band with a step is the reference; at zero acceptance no band can fall below it
    an = _analyze(tmp_path, [_req(0, 5000, 10, 0), _req(1, 17000, 10, 0)])
    (row,) = [r for r in an["per_request"] if r["arm"] == ARM]
    assert [(b["band"], b["accepted_per_step"], b["collapse"]) for b in row["bands"]] == [
        ("4k-16k", 0.0, False), (">16k", 0.0, False)]
