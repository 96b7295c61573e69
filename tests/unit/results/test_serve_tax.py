"""The serve-tax table on constructed runs: bare vs served per arm and concurrency, best K both ways."""

from __future__ import annotations

from typing import Any

from tailpod.results.analysis import analyze
from tailpod.results.io import Run
from tailpod.results.report import render_run_markdown
from tests.helpers.run_builder import build_run


def bare_rows(arm: str, per_c: dict[int, list[float]]) -> list[dict[str, Any]]:
    """One class per rep; wall 10 s, so tokens = 10 × tok/s."""
    return [
        {"kind": "bare", "arm": arm, "concurrency": c, "rep": rep, "prompt_class": "prose",
         "output_tokens": round(v * 10), "wall_s": 10.0, "tool": "vllm offline LLM.chat"}
        for c, values in per_c.items() for rep, v in enumerate(values)
    ]  # fmt: skip


def taxed_run() -> Run:
    # The reference's shape: plain 86.8 bare / 75.9 served; served K=5 beats K=3, bare K=3 wins.
    run = build_run(
        {"plain": {1: [75.9, 76.1]}, "mtp-k3": {1: [170.5, 170.1]}, "mtp-k5": {1: [172.0, 171.8]}}
    )
    bare = {"plain": [86.8, 86.6], "mtp-k3": [186.7, 186.5], "mtp-k5": [180.0, 180.2]}
    for arm in run.meta.arms:
        arm.serve_tax = {  # type: ignore[attr-defined]  # an extra field, as the sweep writes it
            "status": "measured", "tool": "vllm offline LLM.chat",
            "rows": bare_rows(arm.label, {1: bare[arm.label]}),
        }  # fmt: skip
    return run


def test_served_over_bare_per_arm_and_the_best_k_both_ways() -> None:
    tax = analyze(taxed_run())["serve_tax"]
    rows = {r["arm"]: r for r in tax["rows"]}
    assert abs(rows["plain"]["bare_tok_s"]["median"] - 86.7) < 1e-9
    assert abs(rows["plain"]["served_tok_s"]["median"] - 76.0) < 1e-9
    assert abs(rows["plain"]["served_over_bare"] - 76.0 / 86.7) < 1e-9
    assert rows["plain"]["served_vs_bare_pct"] == -12.3
    (best,) = tax["best_k"]
    assert best["served"] == {"arm": "mtp-k5", "k": 5} and best["bare"] == {"arm": "mtp-k3", "k": 3}
    assert best["moved"] is True


def test_report_shows_the_table_and_the_moved_best_k() -> None:
    text = render_run_markdown(analyze(taxed_run()))
    assert "## Serve tax (bare engine vs served endpoint)" in text
    assert "| plain | 1 | 86.70 [86.60–86.80] | 76 [75.90–76.10] | 0.877 | -12.3 % |" in text
    assert "best K served K=5 (mtp-k5), bare K=3 (mtp-k3) (serving moved it)" in text


def test_a_failed_bare_decode_is_a_note_and_no_run_without_it_has_a_table() -> None:
    run = build_run({"plain": {1: [75.9]}})
    assert analyze(run)["serve_tax"] is None
    assert "Serve tax" not in render_run_markdown(analyze(run))
    run.meta.arms[0].serve_tax = {"status": "failed", "error": ["boom"]}  # type: ignore[attr-defined]
    tax = analyze(run)["serve_tax"]
    assert tax["rows"] == [] and tax["notes"] == ["plain: bare decode failed: boom"]
