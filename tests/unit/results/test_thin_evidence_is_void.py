"""A figure computed from too little evidence is void with its reason, in the analysis, report.md,
the export and `compare` (issue 37 item 4, newcomer 2.19): a per-request decode speed from too few
chunks or too short a span, and a percentile of too few requests (docs/results.md, "Void where
evidence is thin"). The crafted rows replay newcomer 2.19: at c=1, three of four requests arrived
in one read (no decode span) and the fourth in two chunks 0.16 ms apart."""

from __future__ import annotations

import csv
import math
from pathlib import Path

from tailpod.results.analysis import analyze
from tailpod.results.compare import compare_analyses
from tailpod.results.io import Run, export_table, load_run, write_run
from tailpod.results.report import render_compare_markdown, write_report
from tailpod.results.schema import CellRow, RequestRow
from tests.helpers.run_builder import build_run

TOKENS = 32
BURST_GAP_S = 0.00016  # newcomer 2.19: the last two chunks 0.16 ms apart
ABSURD = (TOKENS - 1) / BURST_GAP_S  # 193,750 tok/s
SANE_SPAN_S = 0.066  # 31 tokens over 66 ms
SANE = (TOKENS - 1) / SANE_SPAN_S  # 469.7 tok/s


def _request(run_id: str, c: int, i: int, chunks: int, span: float | None) -> RequestRow:
    return RequestRow(
        run_id=run_id, arm="plain", concurrency=c, rep=0, prompt_class="prose",
        cell=f"plain|c{c}|r0|prose", index=i, ok=True, completion_tokens=TOKENS,
        ttft_s=0.05 + 0.01 * i, e2e_s=0.05 + 0.01 * i + (span or 0.0),
        decode_tok_s=None if not span else (TOKENS - 1) / span,
        tpot_s=None if not span else span / (TOKENS - 1), chunks=chunks, t_start=1000.0 + i,
    )  # fmt: skip


def _cell(run_id: str, c: int, decode_p50: float | None) -> CellRow:
    return CellRow(
        run_id=run_id, arm="plain", concurrency=c, rep=0, prompt_class="prose",
        cell=f"plain|c{c}|r0|prose", requests=4, wall_s=1.0, output_tokens=4 * TOKENS,
        output_tok_s=4.0 * TOKENS, ttft_p50_s=0.065, ttft_p90_s=0.077, ttft_p99_s=0.0797,
        e2e_p50_s=0.1, e2e_p90_s=0.12, e2e_p99_s=0.125, decode_tok_s_p50=decode_p50,
        tpot_p50_s=None if decode_p50 is None else 1.0 / decode_p50,
    )  # fmt: skip


def _run(run_id: str, burst_at_c1: bool) -> Run:
    run = build_run({"plain": {1: [1.0], 4: [1.0]}}, run_id=run_id)
    reqs = []
    if burst_at_c1:
        # three in one read (1 chunk, no span), one in two chunks 0.16 ms apart
        reqs += [_request(run_id, 1, i, chunks=1, span=None) for i in range(3)]
        reqs.append(_request(run_id, 1, 3, chunks=2, span=BURST_GAP_S))
        c1 = _cell(run_id, 1, ABSURD)  # what the probe recorded: the p50 of the one value
    else:
        reqs += [_request(run_id, 1, i, chunks=TOKENS, span=SANE_SPAN_S) for i in range(4)]
        c1 = _cell(run_id, 1, SANE)
    reqs += [_request(run_id, 4, i, chunks=TOKENS, span=SANE_SPAN_S) for i in range(4)]
    run.cells, run.requests = [c1, _cell(run_id, 4, SANE)], reqs
    return run


def _loaded(tmp_path: Path, run_id: str, burst: bool) -> Path:
    return write_run(_run(run_id, burst), tmp_path / run_id)


def test_a_decode_speed_from_two_chunks_microseconds_apart_is_void(tmp_path: Path) -> None:
    run = load_run(_loaded(tmp_path, "vast", burst=True))
    c1 = next(c for c in run.cells if c.concurrency == 1)
    assert c1.decode_tok_s_p50 is None and c1.tpot_p50_s is None
    assert "0 of 4 requests" in c1.void_fields["decode_tok_s_p50"]
    burst = next(r for r in run.requests if r.concurrency == 1 and r.chunks == 2)
    assert burst.decode_tok_s is None and "2 chunks" in burst.void_fields["decode_tok_s"]
    # c=4: four requests of 32 chunks over 66 ms each keep their decode speed
    c4 = next(c for c in run.cells if c.concurrency == 4)
    assert c4.decode_tok_s_p50 is not None and math.isclose(c4.decode_tok_s_p50, SANE)


def test_a_percentile_of_a_handful_of_requests_is_void(tmp_path: Path) -> None:
    run = load_run(_loaded(tmp_path, "vast", burst=True))
    c4 = next(c for c in run.cells if c.concurrency == 4)
    # a p90 needs 10 requests (one at least above it), a p99 100; a p50 needs 2
    assert c4.ttft_p90_s is None and c4.e2e_p99_s is None
    assert c4.void_fields["ttft_p90_s"] == "p90 of 4 requests; a p90 needs at least 10"
    assert c4.ttft_p50_s == 0.065


def test_medians_over_reps_never_use_a_void_value_and_say_why(tmp_path: Path) -> None:
    an = analyze(load_run(_loaded(tmp_path, "vast", burst=True)))
    c1 = next(e for e in an["cells"] if e["concurrency"] == 1)
    assert c1["decode_tok_s_p50"] is None
    assert "0 of 4 requests" in c1["void_metrics"]["decode_tok_s_p50"]


def test_report_export_and_compare_show_void_not_the_absurd_number(tmp_path: Path) -> None:
    base = _loaded(tmp_path, "runpod", burst=False)
    vast = _loaded(tmp_path, "vast", burst=True)
    report = write_report([vast]).read_text()
    assert "193,750" not in report and "193750" not in report
    decode_row = next(line for line in report.splitlines() if line.startswith("| plain")
                      and "void" in line)
    assert "0 of 4 requests" in decode_row
    out = export_table(load_run(vast), "csv", tmp_path / "cells.csv")
    rows = list(csv.DictReader(out.open()))
    c1 = next(r for r in rows if r["concurrency"] == "1")
    assert c1["decode_tok_s_p50"] == "" and "decode_tok_s_p50" in c1["void_fields"]
    md = render_compare_markdown(compare_analyses([analyze(load_run(p)) for p in (base, vast)]))
    # 193750 / 469.7 = 412.5x was printed as a ratio
    assert f"{ABSURD / SANE:.2f}" not in md and "412" not in md
    decode = md[md.index("## Per-request decode speed"):]
    assert f"| plain | 1 | {SANE:.1f} | void" in decode, decode[:600]


def test_the_evidence_rules_at_their_edges() -> None:
    from tailpod.results.stats import percentile_min_n, thin_decode, thin_percentile

    # one value at least at or above the percentile: ceil(100 / (100 - q))
    assert [percentile_min_n(q) for q in (50, 90, 99)] == [2, 10, 100]
    assert thin_percentile(90, 10) is None and thin_percentile(90, 9) is not None
    assert thin_percentile(50, 2) is None and thin_percentile(50, 1) is not None
    # 9 tokens: a decode speed of 8 / span; 3 chunks over 1 ms stands, 2 chunks or 0.9 ms do not
    assert thin_decode(3, 9, 8 / 0.0010) is None
    assert thin_decode(2, 9, 8 / 0.0010) is not None
    assert thin_decode(3, 9, 8 / 0.0009) is not None
