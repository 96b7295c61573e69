"""The report's open-loop section (results/slo.py `render`) from hand-built sections: every line
written out here by hand (number formats, void arms, the plot link, the arms and bisection tables,
the trace replay), so a changed word, format or blank line shows (issue 37 item 10)."""

from __future__ import annotations

from typing import Any

from tailpod.results.slo import render

TITLE = ["## Open loop: SLO attainment and goodput against request rate", ""]
POINTS_HEAD = ["| arm | rate req/s | reps | achieved req/s | attainment | goodput req/s | "
               "goodput tok/s | TTFT p90 ms (sched) | lag max ms | SLO |",
               "|---|---|---|---|---|---|---|---|---|---|"]
TRACE_LINES = [
    "### Trace replay", "",
    "The request log replayed at its own arrival times (over its speed); prompts built to the "
    "logged input lengths (approximately, in words), outputs held to the logged lengths.", "",
    "| arm | format | speed | reps | offered req/s | achieved req/s | attainment | goodput req/s "
    "| goodput tok/s | TTFT p90 ms (sched) | lag max ms | SLO |",
    "|---|---|---|---|---|---|---|---|---|---|---|---|",
    "| plain | mooncake | 2 | 2 | 9.75 | 9.70 | 91.0% | 8.83 | 91.0 | 1000 | 100.0 | met |",
    "| ~~mtp-k2~~ VOID | - | - | 1 | - | - | - | - | - | - | - | - |",
    "| ngram-k3 | tailpod | 0.5 | 1 | 4.00 | 3.00 | 50.0% | 1.50 | 20.0 | 2500 | 0.5 | missed |",
    "",
]
NONE_OF = {k: None for k in ("achieved_rate_rps", "slo_attainment", "goodput_rps",
                             "goodput_tok_s", "ttft_sched_p90_s", "schedule_lag_max_s")}


def _trace() -> list[dict[str, Any]]:
    return [
        {"arm": "plain", "reps": 2, "void": False, "format": "mooncake", "speed": 2.0,
         "requests": 40, "offered_rate_rps": 9.754, "achieved_rate_rps": 9.7,
         "slo_attainment": 0.91, "goodput_rps": 8.83, "goodput_tok_s": 91.0,
         "ttft_sched_p90_s": 1.0, "schedule_lag_max_s": 0.1, "slo_met": True},
        {"arm": "mtp-k2", "reps": 1, "void": True, "format": None, "speed": None,
         "requests": None, "offered_rate_rps": None, **NONE_OF, "slo_met": None},
        {"arm": "ngram-k3", "reps": 1, "void": False, "format": "tailpod", "speed": 0.5,
         "requests": 10, "offered_rate_rps": 4.0, "achieved_rate_rps": 3.0,
         "slo_attainment": 0.5, "goodput_rps": 1.5, "goodput_tok_s": 20.0,
         "ttft_sched_p90_s": 2.5, "schedule_lag_max_s": 0.0005, "slo_met": False},
    ]


def _full() -> dict[str, Any]:
    return {
        "slo": {"ttft_ms": 500.0, "e2el_ms": 2000.0}, "slo_percentile": 90.0,
        "trace": _trace(),
        "points": [
            {"arm": "plain", "rate": 2.0, "reps": 3, "void": False, "achieved_rate_rps": 1.98765,
             "slo_attainment": 0.9234, "goodput_rps": 1.8312, "goodput_tok_s": 123.456,
             "ttft_sched_p90_s": 0.2346, "schedule_lag_max_s": 0.00123, "slo_met": True},
            {"arm": "plain", "rate": 4.0, "reps": 3, "void": False, "achieved_rate_rps": 3.9,
             "slo_attainment": 0.5, "goodput_rps": 2.0, "goodput_tok_s": 50.0,
             "ttft_sched_p90_s": 1.5, "schedule_lag_max_s": 0.02, "slo_met": False},
            {"arm": "mtp-k2", "rate": float("inf"), "reps": 1, "void": True, **NONE_OF,
             "output_tok_s": None, "slo_met": None},
        ],
        "arms": [
            {"arm": "plain", "void": False, "max_rate_under_slo": 2.0,
             "goodput_rps_at_max": 1.8312, "usd_per_mtok_at_max": 1.23456, "bracket_above": 4.0},
            {"arm": "mtp-k2", "void": True, "max_rate_under_slo": None,
             "goodput_rps_at_max": None, "usd_per_mtok_at_max": None, "bracket_above": None},
        ],
        "search": {"low": 1.0, "high": 16.0, "reps": 2, "tol": 0.05, "arms": {
            "plain": {"max_rate": 5.21875, "bracket": [5.21875, 5.453125], "status": "found",
                      "probed": [1.0, 16.0, 8.5]},
            "b-arm": {"max_rate": None, "bracket": None, "status": "none met", "probed": []}}},
    }  # fmt: skip


def test_a_full_section_renders_every_line() -> None:
    assert render(_full(), stamp="OFF-POD: measured from the laptop") == [
        *TITLE,
        "SLO: ttft_ms 500, e2el_ms 2000; a rate passes when at least 90% of its requests meet "
        "every target (latency from the scheduled send).", "",
        "**OFF-POD: measured from the laptop**", "",
        *TRACE_LINES,
        "![SLO attainment and TTFT p90 against request rate](rate.png)", "",
        *POINTS_HEAD,
        "| plain | 2 | 3 | 1.99 | 92.3% | 1.83 | 123.5 | 235 | 1.2 | met |",
        "| plain | 4 | 3 | 3.90 | 50.0% | 2.00 | 50.0 | 1500 | 20.0 | missed |",
        "| ~~mtp-k2~~ VOID | inf | 1 | - | - | - | - | - | - | - |",
        "",
        "| arm | max rate under SLO | goodput there req/s | $/Mtok there | first failing rate |",
        "|---|---|---|---|---|",
        "| plain | 2 | 1.83 | 1.235 | 4 |",
        "| ~~mtp-k2~~ VOID | - | - | - | - |",
        "",
        "### Max rate under SLO, by bisection (`--find-max-rate`)", "",
        "Between 1 and 16 req/s, 2 rep(s) at each probed rate, stopped at high/low - 1 <= 0.05.",
        "",
        "| arm | max rate under SLO | bracket | status | probed rates |", "|---|---|---|---|---|",
        "| b-arm | - | - | none met |  |",
        "| plain | 5.21875 | [5.21875, 5.45312) | found | 1, 16, 8.5 |",
        "",
    ]


def test_without_an_slo_only_the_rates_show_and_no_plot_without_a_finite_rate() -> None:
    section = {"slo": None, "slo_percentile": None, "arms": [], "points": [
        {"arm": "plain", "rate": float("inf"), "reps": 2, "void": False, **NONE_OF,
         "achieved_rate_rps": 40.0, "ttft_sched_p90_s": 0.5, "schedule_lag_max_s": 0.1,
         "slo_met": None}]}
    assert render(section) == [
        *TITLE, "No SLO was given (`--slo`): attainment and goodput are not measured.", "",
        *POINTS_HEAD, "| plain | inf | 2 | 40.00 | - | - | - | 500 | 100.0 | - |", ""]


def test_a_trace_replay_alone_ends_after_its_table() -> None:
    section = {"slo": {"ttft_ms": 250.0}, "slo_percentile": 95.0, "points": [], "arms": [],
               "trace": _trace(), "search": {"low": 1.0}}
    assert render(section) == [
        *TITLE,
        "SLO: ttft_ms 250; a rate passes when at least 95% of its requests meet every target "
        "(latency from the scheduled send).", "",
        *TRACE_LINES]


def test_no_section_renders_nothing() -> None:
    assert render(None) == [] and render({}) == []  # type: ignore[typeddict-item]


def test_tiny_figures_keep_pythons_lowercase_exponent() -> None:
    tiny = 1e-05  # `format(1e-05, "g")` is "1e-05"
    section = {
        "slo": {"ttft_ms": 500.0}, "slo_percentile": 90.0,
        "trace": [_trace()[0] | {"speed": tiny}],
        "points": [{"arm": "plain", "rate": tiny, "reps": 1, "void": False, **NONE_OF,
                    "slo_met": None}],
        "arms": [{"arm": "plain", "void": False, "max_rate_under_slo": tiny,
                  "goodput_rps_at_max": None, "usd_per_mtok_at_max": None,
                  "bracket_above": tiny}],
        "search": {"low": tiny, "high": tiny, "reps": 1, "tol": tiny, "arms": {
            "plain": {"max_rate": tiny, "bracket": [tiny, tiny], "status": "found",
                      "probed": [tiny]}}},
    }  # fmt: skip
    lines = render(section)
    assert lines[10].startswith("| plain | mooncake | 1e-05 | 2 |")
    # a rate above 0 and below 1 request a second is on the rate plot's axis
    assert "![SLO attainment and TTFT p90 against request rate](rate.png)" in lines
    assert "| plain | 1e-05 | 1 | - | - | - | - | - | - | - |" in lines
    assert "| plain | 1e-05 | - | - | 1e-05 |" in lines
    assert "Between 1e-05 and 1e-05 req/s, 1 rep(s) at each probed rate, stopped at high/low - 1 " \
        "<= 1e-05." in lines
    assert "| plain | 1e-05 | [1e-05, 1e-05) | found | 1e-05 |" in lines
