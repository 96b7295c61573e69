"""Void where evidence is thin (docs/results.md): the rows of a run as read, with every figure that
rests on too little evidence set to null and the reason beside it. `io.load_run` applies it, so
the analysis, report, export, `compare` and `decide` all read the same void figures; rows.jsonl on
disk keeps what the probe wrote."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from typing import Any

from tailpod.agent.probes.metrics import percentile
from tailpod.results.schema import CellRow, RequestRow
from tailpod.results.stats import thin_decode, thin_percentile

# Every percentile a cell row quotes, with its q: void when the cell has too few requests for it.
CELL_PERCENTILES: dict[str, float] = {
    "ttft_p50_s": 50, "ttft_p90_s": 90, "ttft_p99_s": 99, "e2e_p50_s": 50, "e2e_p90_s": 90,
    "e2e_p99_s": 99, "decode_tok_s_p50": 50, "tpot_p50_s": 50,
    "ttft_sched_p90_s": 90,  # open-loop cells (agent/probes/rows.py)
}  # fmt: skip
DECODE_FIELDS = {"decode_tok_s_p50": "decode_tok_s", "tpot_p50_s": "tpot_s"}


def void_thin_evidence(cells: Sequence[CellRow], requests: Sequence[RequestRow]
                       ) -> tuple[list[CellRow], list[RequestRow]]:
    """The rows with every figure that rests on too little evidence set to null, and why, in the
    row's `void_fields` (docs/results.md, "Void where evidence is thin"): a request's decode speed
    (and TPOT) read from too few chunks or too short a span (stats.thin_decode); a cell's
    percentile of too few requests (stats.thin_percentile), its decode p50 and TPOT p50 taken
    again from the requests whose own speed stands. A request's reason keeps its recorded value;
    a cell's does not, so that no report quotes it."""
    out_reqs: list[RequestRow] = []
    voided_in: set[tuple[str, str]] = set()
    for r in requests:
        why = thin_decode(r.chunks, r.completion_tokens, r.decode_tok_s) \
            if r.ok and r.decode_tok_s is not None else None
        if why is None:
            out_reqs.append(r)
            continue
        voided_in.add((r.cell, r.cache))
        out_reqs.append(r.model_copy(update={
            "decode_tok_s": None, "tpot_s": None,
            "void_fields": {**r.void_fields, "decode_tok_s": why, "tpot_s": why}}))
    by_cell: dict[tuple[str, str], list[RequestRow]] = defaultdict(list)
    for r in out_reqs:
        if r.ok:
            by_cell[(r.cell, r.cache)].append(r)
    out_cells: list[CellRow] = []
    for c in cells:
        n_ok = c.requests - c.failed
        update: dict[str, Any] = {}
        void: dict[str, str] = {}
        reqs = by_cell.get((c.cell, c.cache), [])
        judged = any(r.chunks > 0 for r in reqs)  # rows that say how their decode was read
        for field_name, per_request in DECODE_FIELDS.items():
            vals = [v for r in reqs if (v := getattr(r, per_request)) is not None]
            if not judged or ((c.cell, c.cache) not in voided_in and len(vals) >= 2):
                continue
            if getattr(c, field_name) is None:
                continue
            if (thin := thin_percentile(50, len(vals))) is None:
                update[field_name] = percentile(vals, 50)
            else:
                update[field_name] = None
                void[field_name] = (f"{len(vals)} of {n_ok} requests have a decode speed that "
                                    f"stands; {thin.split('; ')[1]}")
        for field_name, q in CELL_PERCENTILES.items():
            if field_name in void or getattr(c, field_name, None) is None:
                continue
            if (thin := thin_percentile(q, n_ok)) is not None:
                update[field_name], void[field_name] = None, thin
        if not update:
            out_cells.append(c)
            continue
        if void:
            update["void_fields"] = {**c.void_fields, **void}
        out_cells.append(c.model_copy(update=update))
    return out_cells, out_reqs
