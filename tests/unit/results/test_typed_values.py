"""The serve tax, SLO and fingerprint values are TypedDicts (sections/serve_tax.py, results/slo.py,
results/fingerprint.py) whose keys are the JSON's: the key lists below are what `tailpod report
--json` and run.json carried before the values were typed (commit 6c0fc34), and each type declares
exactly them, in that order."""

from __future__ import annotations

import json
from typing import Any, get_type_hints

import pytest

from tailpod.results import fingerprint as fp_mod
from tailpod.results import slo as slo_mod
from tailpod.results.analysis import analyze
from tailpod.results.compare import compare_analyses
from tailpod.results.io import load_run
from tailpod.results.schema import CellRow
from tailpod.results.sections import serve_tax as tax_mod
from tests import paths
from tests.helpers.run_builder import build_run
from tests.unit.results.test_serve_tax import taxed_run

OPEN_LOOP = paths.REPO / "benchmarks/runs/h200_vllm_0.26.0_openloop_2026-12-02"
MTP = paths.REPO / "benchmarks/runs/h200_vllm_0.26.0_mtp_2026-12-02"

FIGURES = ["slo_attainment", "goodput_rps", "goodput_tok_s", "achieved_rate_rps", "output_tok_s",
           "ttft_sched_p90_s", "schedule_lag_max_s"]  # fmt: skip
RATE_POINT = ["arm", "rate", "reps", "void", *FIGURES, "slo_met"]
TRACE_POINT = ["arm", "reps", "void", "format", "speed", "requests", "offered_rate_rps", *FIGURES,
               "slo_met"]  # fmt: skip
SLO_ARM = ["arm", "void", "max_rate_under_slo", "goodput_rps_at_max", "usd_per_mtok_at_max",
           "bracket_above"]  # fmt: skip
TAX_ROW = ["arm", "k", "concurrency", "void", "bare_tok_s", "served_tok_s", "served_over_bare",
           "served_vs_bare_pct", "tool"]  # fmt: skip
FINGERPRINT = ["version", "run_id", "model", "engine", "engine_version", "provider", "gpu", "arms"]
ARM_FINGERPRINT = ["arm", "method", "k", "model", "draft_model", "checkpoints", "drafter", "facts",
                   "void", "ladder"]  # fmt: skip
CHECK = ["arm", "prompt_class", "runs", "gpu", "provider", "acceptance_length", "rep_range",
         "allowed", "status", "causes"]  # fmt: skip


def _declared(typed: Any) -> list[str]:
    return list(get_type_hints(typed))


@pytest.mark.parametrize(
    ("typed", "keys"),
    [
        (slo_mod.RatePoint, RATE_POINT), (slo_mod.TracePoint, TRACE_POINT),
        (slo_mod.SloArm, SLO_ARM),
        (slo_mod.SloSection, ["slo", "slo_percentile", "points", "arms", "trace", "search"]),
        (tax_mod.ServeTaxRow, TAX_ROW), (tax_mod.ServeTax, ["rows", "best_k", "notes"]),
        (tax_mod.ServeTaxBestK, ["concurrency", "served", "bare", "moved"]),
        (fp_mod.Fingerprint, FINGERPRINT), (fp_mod.ArmFingerprint, ARM_FINGERPRINT),
        (fp_mod.LadderStep, ["reps", "acceptance_length", "acceptance_rate"]),
        (fp_mod.Drafter, ["loaded", "evidence"]),
        (fp_mod.FingerprintCheck, CHECK), (fp_mod.FingerprintChecks, ["checks", "flags"]),
    ],
    ids=lambda v: getattr(v, "__name__", ""),
)  # fmt: skip
def test_each_type_declares_the_keys_the_json_had(typed: Any, keys: list[str]) -> None:
    assert _declared(typed) == keys


def test_the_open_loop_run_writes_the_typed_keys() -> None:
    section = analyze(load_run(OPEN_LOOP))["slo"]
    assert list(section) == ["slo", "slo_percentile", "points", "arms"]
    assert {tuple(p) for p in section["points"]} == {tuple(RATE_POINT)}
    assert {tuple(a) for a in section["arms"]} == {tuple(SLO_ARM)}


def _trace_cell(rep: int, attainment: float) -> CellRow:
    return CellRow(
        run_id="run-a", arm="plain", concurrency=0, rep=rep, prompt_class="prose",
        cell=f"plain|trace|r{rep}|prose", requests=50, wall_s=10.0, output_tokens=1000,
        output_tok_s=100.0,
        arrival={"process": "trace", "trace": {"format": "mooncake", "speed": 2.0}},
        offered_rate_rps=5.0, achieved_rate_rps=4.5 + rep, slo={"ttft_ms": 500.0},
        slo_percentile=90.0, slo_attainment=attainment, goodput_rps=4.0, goodput_tok_s=90.0,
        ttft_sched_p90_s=0.25, schedule_lag_max_s=0.002,
    )  # fmt: skip


def test_a_trace_replay_and_a_rate_search_keep_their_keys_and_values() -> None:
    run = build_run({"plain": {1: [100.0]}})
    run.cells += [_trace_cell(0, 0.96), _trace_cell(1, 0.92)]
    search = {"low": 1.0, "high": 8.0, "tol": 0.1, "reps": 1, "arms": {}}
    run.meta.max_rate_search = search
    section = slo_mod.compute(run)
    assert section is not None
    assert list(section) == ["slo", "slo_percentile", "points", "arms", "trace", "search"]
    (point,) = section["trace"]
    assert list(point) == TRACE_POINT
    # two reps: medians of (0.96, 0.92) and (4.5, 5.5); 94 % >= the 90 % target
    assert point["reps"] == 2 and point["format"] == "mooncake" and point["speed"] == 2.0
    assert point["slo_attainment"] == pytest.approx(0.94)
    assert point["achieved_rate_rps"] == pytest.approx(5.0)
    assert point["slo_met"] is True
    assert section["search"] == search and section["points"] == []


def test_the_serve_tax_writes_the_typed_keys() -> None:
    tax = analyze(taxed_run())["serve_tax"]
    assert list(tax) == ["rows", "best_k", "notes"]
    assert {tuple(r) for r in tax["rows"]} == {tuple(TAX_ROW)}


def test_the_fingerprint_and_its_check_write_the_typed_keys() -> None:
    recorded = json.loads((MTP / "run.json").read_text())["fingerprint"]
    an = analyze(load_run(MTP))
    assert an["fingerprint"] == recorded  # the recorded one, as run.json holds it
    assert list(an["fingerprint"]) == FINGERPRINT
    assert {tuple(a) for a in an["fingerprint"]["arms"]} == {tuple(ARM_FINGERPRINT)}
    checks = compare_analyses([an, analyze(load_run(MTP))])["fingerprint"]
    assert list(checks) == ["checks", "flags"] and checks["checks"]
    assert {tuple(c) for c in checks["checks"]} == {tuple(CHECK)}
    assert {c["status"] for c in checks["checks"]} == {"agrees"} and checks["flags"] == []
