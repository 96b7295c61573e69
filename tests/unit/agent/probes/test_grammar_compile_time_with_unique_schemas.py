"""The first request's grammar compile time (issue 39 item 2): with `unique_schema`, every
structured request's schema is text the server never saw (a `title` naming a nonce: it annotates,
never constrains), and each cell first times a new schema's first request against its repeat. The
stand-in server delays the first request of each schema text it has not seen by a known time, as
an engine's grammar cache does; the probe's figure must find that time, and the server's own
count of compiled grammars must match one per measured request."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tailpod.agent.probes.load import RunOptions, run_cells
from tailpod.agent.probes.rows import CellPlan
from tailpod.results.analysis import analyze
from tailpod.results.schema import ROW_ADAPTER, CellRow, RequestRow
from tailpod.sandbox.synthetic_server import SyntheticConfig, SyntheticServer
from tests.helpers.run_builder import build_run

COMPILE_S = 0.3
REQUESTS = 3


def _cell(unique: bool) -> tuple[list[dict[str, Any]], SyntheticServer]:
    server = SyntheticServer(SyntheticConfig(rate=4000.0, ttft_s=0.002,
                                             grammar_compile_s=COMPILE_S)).start()
    try:
        opts = RunOptions(base_url=server.base_url, requests_per_cell=REQUESTS, warmup=1,
                          ignore_eos=False, max_tokens=256, unique_schema=unique)
        _, rows = run_cells(opts, [CellPlan("plain", 1, 0, "structured", "cold")])
    finally:
        server.stop()
    return rows, server


def _titles(server: SyntheticServer) -> list[str | None]:
    return [((b.get("response_format") or {}).get("json_schema") or {}).get("schema", {})
            .get("title") for b in server.stats.bodies]


def test_a_new_schemas_first_request_is_timed_against_its_repeat() -> None:
    rows, server = _cell(unique=True)
    (cell,) = [r for r in rows if r["kind"] == "cell"]
    got = cell["structure"]["grammar_compile"]
    assert got["compile_s"] == pytest.approx(COMPILE_S, abs=0.1)
    assert got["first_ttft_s"] - got["repeat_ttft_s"] == pytest.approx(got["compile_s"])
    # the server's own record: the warm-up's class schema, the timed pair's one schema, and one
    # per measured request
    assert server.stats.grammars_compiled == 1 + 1 + REQUESTS
    titles = _titles(server)
    assert titles[0] is None and titles[1] == titles[2] and len(set(titles[3:])) == REQUESTS
    # a title changes no output and no check
    reqs = [r for r in rows if r["kind"] == "request"]
    assert [(r["json_ok"], r["schema_ok"]) for r in reqs] == [(True, True)] * REQUESTS


def test_without_the_mode_nothing_is_timed_and_one_grammar_serves_the_cell() -> None:
    rows, server = _cell(unique=False)
    (cell,) = [r for r in rows if r["kind"] == "cell"]
    assert "grammar_compile" not in cell["structure"]
    assert server.stats.grammars_compiled == 1
    assert set(_titles(server)) == {None}
    assert json.dumps(server.stats.bodies[0]["response_format"]) == json.dumps(
        server.stats.bodies[-1]["response_format"])


def test_the_report_shows_the_compile_time_by_arm_and_class() -> None:
    rows, _ = _cell(unique=True)
    run = build_run({"plain": {1: [100.0]}})
    parsed = [ROW_ADAPTER.validate_python(r) for r in rows]
    run.cells = [r for r in parsed if isinstance(r, CellRow)]
    run.requests = [r for r in parsed if isinstance(r, RequestRow)]
    (row,) = analyze(run)["per_request"]
    compile_s = rows[-1]["structure"]["grammar_compile"]["compile_s"]
    assert row["structure"]["grammar_compile_s"] == pytest.approx(compile_s)
