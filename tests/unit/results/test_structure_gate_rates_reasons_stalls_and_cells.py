"""The structure gate (tailpod/results/structure_gate.py) on rows written by hand: which rows it
counts, the three rate checks, a finish_reason plain never ends with, the stall bound and its
two-request minimum, which cells are compared with which plain rows, and how a verdict voids an
arm. Every expected reason is written out from the rows in the test, not read from the code."""

from __future__ import annotations

from typing import Any

from tailpod.results.schema import RequestRow
from tailpod.results.structure_gate import (
    structure_failures,
    structure_verdicts,
    structure_voids,
    void_arms,
)
from tests.helpers.run_builder import build_run


def _row(arm: str = "mtp-k2", *, pclass: str = "structured", conc: int = 1, cache: str = "cold",
         ok: bool = True, **kw: Any) -> RequestRow:
    kw.setdefault("json_ok", True)
    kw.setdefault("finish_reason", "stop")
    return RequestRow(run_id="run-a", arm=arm, concurrency=conc, rep=0, prompt_class=pclass,
                      cell=f"{arm}|c{conc}|r0|{pclass}", index=0, ok=ok, t_start=0.0, cache=cache,
                      **kw)


def _plain(n: int = 2, **kw: Any) -> list[RequestRow]:
    return [_row("plain", **kw) for _ in range(n)]


# --- structure_failures: the rates ---------------------------------------------------------------

def test_each_rate_below_plains_is_named_with_both_counts() -> None:
    plain = [_row("plain", json_ok=True, schema_ok=True, tool_call_ok=True),
             _row("plain", json_ok=True, schema_ok=False, tool_call_ok=True)]
    spec = [_row(json_ok=True, schema_ok=False, tool_call_ok=False),
            _row(json_ok=False, schema_ok=False, tool_call_ok=True),
            _row(json_ok=True, schema_ok=None, tool_call_ok=None)]
    # json 2/3 < 2/2; schema 0/2 < 1/2; tool call 1/2 < 2/2
    assert structure_failures(plain, spec) == [
        "outputs parse as JSON less often than plain (2/3 vs 2/2)",
        "outputs validate less often than plain (0/2 vs 1/2)",
        "outputs make a whole tool call less often than plain (1/2 vs 2/2)",
    ]


def test_an_equal_or_better_rate_is_no_failure() -> None:
    plain = [_row("plain", json_ok=True), _row("plain", json_ok=False)]
    assert structure_failures(plain, [_row(json_ok=True), _row(json_ok=False)]) == []  # 1/2 = 1/2
    assert structure_failures(plain, [_row(json_ok=True), _row(json_ok=True)]) == []  # 2/2 > 1/2


def test_a_rate_nobody_checked_on_one_side_is_not_compared() -> None:
    # plain validated nothing (schema_ok None): the spec arm's 0/2 has nothing to fall short of
    plain = _plain(2)
    assert structure_failures(plain, [_row(schema_ok=False), _row(schema_ok=False)]) == []
    # and the spec arm's unchecked rows are not a rate of 0 against plain's 2/2
    plain = _plain(2, schema_ok=True)
    assert structure_failures(plain, [_row(schema_ok=None), _row(schema_ok=None)]) == []


def test_a_rate_of_zero_checked_on_plains_side_is_not_a_share_of_zero() -> None:
    # plain's tool calls were all unchecked (None) while the spec arm's one failed
    plain = [_row("plain", tool_call_ok=None)]
    assert structure_failures(plain, [_row(tool_call_ok=False)]) == []


# --- structure_failures: finish reasons ----------------------------------------------------------

def test_finish_reasons_plain_never_ends_with_are_counted_and_sorted() -> None:
    plain = [_row("plain", finish_reason="tool_calls"), _row("plain", finish_reason="stop")]
    spec = [_row(finish_reason="stop"), _row(finish_reason="length"), _row(finish_reason="abort"),
            _row(finish_reason="length")]
    assert structure_failures(plain, spec) == [
        "3 request(s) end with finish_reason abort, length, which plain never ends with "
        "(stop, tool_calls)"]


def test_a_missing_finish_reason_is_one_plain_never_ends_with() -> None:
    plain = [_row("plain", finish_reason="stop")]
    spec = [_row(finish_reason=None), _row(finish_reason="stop")]
    assert structure_failures(plain, spec) == [
        "1 request(s) end with finish_reason None, which plain never ends with (stop)"]


def test_the_same_finish_reasons_are_no_failure() -> None:
    plain = [_row("plain", finish_reason="stop"), _row("plain", finish_reason="length")]
    assert structure_failures(plain, [_row(finish_reason="length")]) == []


# --- structure_failures: stalls ------------------------------------------------------------------

def test_the_stall_bound_is_four_times_plains_largest_gap_when_that_passes_the_floor() -> None:
    plain = [_row("plain", chunk_gap_max_s=0.2), _row("plain", chunk_gap_max_s=0.25),
             _row("plain", chunk_gap_max_s=None)]
    # bound = max(0.5, 4 x 0.25) = 1.0 s: 1.0 itself is not beyond it, 1.2 and 1.5 are
    spec = [_row(chunk_gap_max_s=1.0), _row(chunk_gap_max_s=1.5), _row(chunk_gap_max_s=1.2),
            _row(chunk_gap_max_s=None)]
    assert structure_failures(plain, spec) == [
        "2 request(s) stall 1.50 s between chunks, beyond 1.00 s (plain's largest gap 0.250 s)"]
    # 1.1 s is within 1.25 s (a factor of 5) but beyond 1.0 s: the factor is 4
    spec = [_row(chunk_gap_max_s=1.1), _row(chunk_gap_max_s=1.1)]
    assert structure_failures(plain, spec) == [
        "2 request(s) stall 1.10 s between chunks, beyond 1.00 s (plain's largest gap 0.250 s)"]


def test_the_stall_floor_holds_over_a_fast_plain_arm_and_one_without_gaps() -> None:
    spec = [_row(chunk_gap_max_s=0.5), _row(chunk_gap_max_s=0.51), _row(chunk_gap_max_s=0.6)]
    plain = [_row("plain", chunk_gap_max_s=0.01)]
    assert structure_failures(plain, spec) == [
        "2 request(s) stall 0.60 s between chunks, beyond 0.50 s (plain's largest gap 0.010 s)"]
    # plain recorded no gaps: its largest is taken as 0, and the floor is the bound
    plain = [_row("plain", chunk_gap_max_s=None)]
    assert structure_failures(plain, spec) == [
        "2 request(s) stall 0.60 s between chunks, beyond 0.50 s (plain's largest gap 0.000 s)"]


def test_one_stalled_request_is_not_an_arms_stall() -> None:
    plain = [_row("plain", chunk_gap_max_s=0.01)]
    assert structure_failures(plain, [_row(chunk_gap_max_s=3.0), _row(chunk_gap_max_s=0.4)]) == []


# --- structure_voids: which rows, which cells ----------------------------------------------------

def test_failed_requests_and_rows_without_structure_are_not_judged() -> None:
    run = build_run({"plain": {1: [1.0]}, "mtp-k2": {1: [1.0]}})
    rows = [*_plain(2), _row(), _row(),
            _row(ok=False, json_ok=False, finish_reason="abort"),  # a failed request
            _row(json_ok=None, finish_reason="length")]  # a prose request: no structure checked
    assert structure_voids(run.meta, rows) == {}


def test_each_cell_is_compared_with_plain_at_its_own_concurrency_and_cache() -> None:
    run = build_run({"plain": {1: [1.0]}, "mtp-k2": {1: [1.0]}})
    bad = [_row(conc=2, json_ok=False), _row(conc=2, json_ok=False)]
    # plain ran at concurrency 1 only: the concurrency-2 cell has nothing to be compared with
    assert structure_voids(run.meta, [*_plain(2), *bad]) == {}
    warm = [_row(cache="warm", json_ok=False), _row(cache="warm", json_ok=False)]
    assert structure_voids(run.meta, [*_plain(2), *warm]) == {}
    # and plain's warm rows are the reference for the warm cell
    assert structure_voids(run.meta, [*_plain(2), *_plain(2, cache="warm"), *warm]) == {
        "mtp-k2": {"structured": "structure gate failed on structured: outputs parse as JSON "
                                 "less often than plain (0/2 vs 2/2)"}}


def test_the_first_failing_cell_of_a_class_gives_its_reason_and_reasons_join() -> None:
    run = build_run({"plain": {1: [1.0]}, "mtp-k2": {1: [1.0]}})
    rows = [*_plain(2, conc=1), *_plain(2, conc=2),
            # concurrency 1 fails two ways, concurrency 2 one other way
            _row(conc=1, json_ok=False, finish_reason="length"), _row(conc=1),
            _row(conc=2, finish_reason="abort"), _row(conc=2)]
    assert structure_voids(run.meta, rows) == {"mtp-k2": {"structured": (
        "structure gate failed on structured: outputs parse as JSON less often than plain "
        "(1/2 vs 2/2); 1 request(s) end with finish_reason length, which plain never ends with "
        "(stop)")}}


def test_every_plain_arm_is_the_reference_and_none_is_judged() -> None:
    # two arms at k = 0: their rows pool (1 of 2 parse), so the spec arm's 1 of 2 is no worse
    run = build_run({"plain": {1: [1.0]}, "base": {1: [1.0]}, "mtp-k2": {1: [1.0]}})
    rows = [_row("plain", json_ok=True), _row("base", json_ok=False),
            _row(json_ok=True), _row(json_ok=False)]
    assert structure_voids(run.meta, rows) == {}


def test_without_a_k0_arm_in_run_json_the_plain_label_is_the_reference() -> None:
    run = build_run({"mtp-k2": {1: [1.0]}})
    rows = [*_plain(2), _row(json_ok=False), _row()]
    assert structure_voids(run.meta, rows) == {"mtp-k2": {"structured": (
        "structure gate failed on structured: outputs parse as JSON less often than plain "
        "(1/2 vs 2/2)")}}
    # a k = 0 arm recorded under another label takes the place of "plain"
    run = build_run({"base": {1: [1.0]}, "mtp-k2": {1: [1.0]}})
    assert structure_voids(run.meta, rows) == {}


def test_every_class_an_arm_fails_is_kept_and_the_verdict_names_the_first_by_name() -> None:
    run = build_run({"plain": {1: [1.0]}, "mtp-k2": {1: [1.0]}})
    rows = [*_plain(1, pclass="tools"), *_plain(1, pclass="structured"),
            _row(pclass="tools", json_ok=False), _row(pclass="structured", schema_ok=False)]
    rows[1] = rows[1].model_copy(update={"schema_ok": True})
    tools = ("structure gate failed on tools: outputs parse as JSON less often than plain "
             "(0/1 vs 1/1)")
    structured = ("structure gate failed on structured: outputs validate less often than plain "
                  "(0/1 vs 1/1)")
    assert structure_voids(run.meta, rows) == {
        "mtp-k2": {"tools": tools, "structured": structured}}
    assert structure_verdicts(run.meta, rows) == {"mtp-k2": structured}


# --- void_arms ------------------------------------------------------------------------------------

def test_a_verdict_voids_its_arm_and_leaves_the_others_and_the_callers_dict_alone() -> None:
    meta = build_run({"plain": {1: [1.0]}, "mtp-k2": {1: [1.0]}, "mtp-k3": {1: [1.0]}}).meta
    verdicts = {"mtp-k2": "structure gate failed on tools: why"}
    out = void_arms(meta, verdicts)
    assert verdicts == {"mtp-k2": "structure gate failed on tools: why"}
    assert [(a.label, a.void, a.void_reason) for a in out.arms] == [
        ("plain", False, None), ("mtp-k2", True, "structure gate failed on tools: why"),
        ("mtp-k3", False, None)]
    assert out.arms[0] == meta.arms[0] and out.arms[2] == meta.arms[2]
    assert out.arms[1].gate == meta.arms[1].gate  # the rest of the record is kept
    assert void_arms(meta, {}) is meta


def test_an_arm_already_void_keeps_its_own_reason() -> None:
    meta = build_run({"plain": {1: [1.0]}, "mtp-k2": {1: [1.0]}},
                     void={"mtp-k2": "token-identity gate failed (prompt 1, position 17)"}).meta
    out = void_arms(meta, {"mtp-k2": "structure gate failed on tools: why"})
    assert out.arms[1].void_reason == "token-identity gate failed (prompt 1, position 17)"
    assert out.arms == meta.arms


def test_an_arm_only_the_rows_name_is_added_void() -> None:
    meta = build_run({"plain": {1: [1.0]}}).meta
    out = void_arms(meta, {"ngram-k3": "session gate failed on prose: why"})
    assert [(a.label, a.void, a.void_reason) for a in out.arms] == [
        ("plain", False, None), ("ngram-k3", True, "session gate failed on prose: why")]
    assert out.arms[1].gate is None and out.arms[1].engine_config == {}


def test_every_arm_and_class_is_judged_whatever_sorts_before_it() -> None:
    # "spec-k2" sorts after "plain", and its structured class fails at two concurrencies before
    # its tools class is reached; a cell without plain rows (concurrency 4) comes first
    run = build_run({"plain": {1: [1.0]}, "spec-k2": {1: [1.0]}})
    rows = [*_plain(1, conc=1), *_plain(1, conc=2), *_plain(1, pclass="tools", conc=1),
            _row("spec-k2", conc=1, json_ok=False), _row("spec-k2", conc=2, json_ok=False),
            _row("spec-k2", pclass="tools", conc=1, json_ok=False)]
    why = "outputs parse as JSON less often than plain (0/1 vs 1/1)"
    assert structure_voids(run.meta, rows) == {"spec-k2": {
        "structured": f"structure gate failed on structured: {why}",
        "tools": f"structure gate failed on tools: {why}"}}
    early = [_row("spec-k2", pclass="code", conc=4, json_ok=False)]
    assert structure_voids(run.meta, [*early, *rows]) == structure_voids(run.meta, rows)
