"""The Decision section's newer lines (results/decide.py `render`), from hand-built decisions,
every line written out here: the per-prompt-class block (which arm or lanes serve each class,
"no arm", the arms a gate voided there; shown when there are several classes or any voided arm,
not for one class alone), the note that crossover and knee were not measured for bands that
offered rates or replayed a trace, and a band that compared no arm."""

from __future__ import annotations

from typing import Any

from tailpod.results.decide import render

HEAD = ("Per prompt class (each class's own bands, a session replay a class of its own; an arm "
        "the structure or session gate voided in a class takes no part there):")


def _dec(by_class: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {
        "objective": "throughput", "lower_is_better": False, "unit": "tok/s",
        "bands": [{"axis": "concurrency", "load": 1, "prompt_class": "*", "arm": "plain",
                   "median": 100.0, "tied": [], "tie_resolved": False,
                   "compared": ["plain"], "not_measured": []}],
        "deployment": {"kind": "static", "arm": "plain", "reason": "wins every band"},
        "by_class": by_class, **extra}


def _block(lines: list[str]) -> list[str]:
    """The per-class block: its heading and the lines after it, up to the next blank line."""
    if HEAD not in lines:
        return []
    at = lines.index(HEAD)
    assert lines[at - 1] == ""
    end = lines.index("", at)
    return lines[at:end]


def test_each_class_says_who_serves_it_and_who_is_void_there() -> None:
    by_class = {
        "prose": {"kind": "lanes", "arm": None, "reason": "r", "lanes": ["mtp-k2", "plain"],
                  "admission_limit": 6},
        "structured": {"kind": "static", "arm": "plain", "reason": "wins every band",
                       "excluded": {"mtp-k2": "structure gate failed on structured: a",
                                    "ngram-k3": "structure gate failed on structured: b"}},
        "session": {"kind": "none", "arm": None, "reason": "no arm meets the SLO"},
    }
    lines = render(_dec(by_class))
    # the block follows the deployment line; what came before it stays
    assert lines[:2] == ["## Decision", ""]
    assert lines[lines.index(HEAD) - 2] == "**Deployment: static plain** (wins every band)."
    assert _block(lines) == [
        HEAD,
        "- prose → lanes: mtp-k2 up to 6 in flight, then plain",
        "- structured → plain (mtp-k2 void here: structure gate failed on structured: a; "
        "ngram-k3 void here: structure gate failed on structured: b)",
        "- session → no arm",
    ]


def test_two_classes_without_a_void_arm_are_listed() -> None:
    by_class = {"prose": {"kind": "static", "arm": "mtp-k2", "reason": "x"},
                "code": {"kind": "static", "arm": "plain", "reason": "y"}}
    assert _block(render(_dec(by_class))) == [HEAD, "- prose → mtp-k2", "- code → plain"]


def test_one_class_is_listed_only_when_an_arm_is_void_there() -> None:
    alone = {"prose": {"kind": "static", "arm": "plain", "reason": "x"}}
    assert _block(render(_dec(alone))) == []
    voided = {"prose": {"kind": "static", "arm": "plain", "reason": "x",
                        "excluded": {"mtp-k2": "session gate failed on prose: s"}}}
    assert _block(render(_dec(voided))) == [
        HEAD, "- prose → plain (mtp-k2 void here: session gate failed on prose: s)"]


def test_crossover_and_knee_of_bands_without_concurrency_are_said_not_measured() -> None:
    dec = _dec({}, crossover=[{"arm": "ngram-k2", "baseline": "plain", "detail": "d"}],
               knee=[{"arm": "plain", "detail": "k"}])
    dec["bands"][0] |= {"axis": "trace", "load": 0.0}
    lines = render(dec)
    assert ("- Crossover and knee: not measured (both are found over --concurrency; these bands "
            "offered request rates or replayed a trace)") in lines


def test_a_band_that_compared_no_arm_says_so_with_a_dash() -> None:
    dec = _dec({})
    dec["bands"][0] |= {"arm": None, "verdict": "no arm meets the SLO", "median": None,
                        "compared": []}
    assert "| c=1 | all (pooled) | no arm meets the SLO | - | - | - | - |" in render(dec)
