"""The acceptance fingerprint on constructed runs: what agrees, what is flagged, and why."""

from __future__ import annotations

from typing import Any

from typer.testing import CliRunner

from tailpod.cli.main import app
from tailpod.results.analysis import analyze
from tailpod.results.compare import compare_analyses
from tailpod.results.fingerprint import check_fingerprints, run_fingerprint
from tailpod.results.io import Run, write_run
from tailpod.results.report import render_compare_markdown
from tests.helpers.run_builder import build_run

SPEC_FACTS = {"spec": True, "spec_decided": True, "spec_evidence": ["drafter load"]}


def pair_run(
    run_id: str,
    accepted: list[int],
    *,
    draft_rev: str = "sha256:aaaa",
    facts: dict[str, Any] | None = None,
    engine_version: str = "0.32.0",
    model: str = "org/target",
) -> Run:
    """plain + draft_model-k2, one cell per rep at c=1: 100 drafts of 2 tokens, `accepted[rep]`."""
    run = build_run(
        {"plain": {1: [100.0] * len(accepted)}, "draft_model-k2": {1: [150.0] * len(accepted)}},
        run_id=run_id,
        acceptance={"draft_model-k2": (100, 200, 0)},
        facts={"draft_model-k2": facts if facts is not None else SPEC_FACTS},
        engine_version=engine_version,
        model=model,
    )
    arm = run.meta.arm("draft_model-k2")
    assert arm is not None
    arm.engine_config["spec"] = {"k": 2, "method": "draft_model", "draft_model": "org/draft"}
    arm.checkpoints = {  # type: ignore[attr-defined]  # an extra field, as the sweep writes it
        "model": {"ref": model, "source": "hub", "revision": "t1"},
        "draft_model": {"ref": "org/draft", "source": "hub", "revision": draft_rev},
    }
    spec_cells = [c for c in run.cells if c.arm == "draft_model-k2"]
    for cell, acc in zip(sorted(spec_cells, key=lambda c: c.rep), accepted, strict=True):
        assert cell.acceptance is not None
        cell.acceptance.accepted = acc
    return run


def checked(*runs: Run) -> dict[str, Any]:
    return check_fingerprints([run_fingerprint(r) for r in runs])


def test_fingerprint_holds_the_ladder_per_arm_and_prompt_class_with_the_rep_spread() -> None:
    fp = run_fingerprint(pair_run("a", [120, 130, 125]))
    (arm,) = fp["arms"]  # plain has no ladder
    assert arm["arm"] == "draft_model-k2" and arm["k"] == 2 and arm["draft_model"] == "org/draft"
    assert arm["checkpoints"]["draft_model"]["revision"] == "sha256:aaaa"
    length = arm["ladder"]["prose"]["acceptance_length"]
    assert (length["median"], length["min"], length["max"]) == (2.25, 2.2, 2.3)
    assert arm["ladder"]["prose"]["acceptance_rate"]["median"] == 0.625
    assert arm["drafter"]["loaded"] is True
    assert fp["engine_version"] == "0.32.0"


def test_an_honest_repeat_agrees_within_the_reps_spread() -> None:
    result = checked(pair_run("a", [120, 130, 125]), pair_run("b", [128, 122, 129]))
    (check,) = result["checks"]
    assert check["status"] == "agrees" and result["flags"] == []
    assert check["runs"] == ["a", "b"]


def test_a_swapped_draft_checkpoint_is_flagged_with_its_revision() -> None:
    result = checked(pair_run("a", [120, 130]), pair_run("b", [60, 62], draft_rev="sha256:bbbb"))
    (check,) = result["checks"]
    assert check["status"] == "differs"
    assert check["causes"][0].startswith("different draft checkpoint revision: sha256:aaaa")
    (flag,) = result["flags"]
    assert "draft_model-k2" in flag and "sha256:bbbb" in flag


def test_a_drafter_that_did_not_load_is_named() -> None:
    no_spec = {"spec": False, "spec_decided": True, "spec_evidence": []}
    result = checked(pair_run("a", [120, 130]), pair_run("b", [2, 3], facts=no_spec))
    assert result["checks"][0]["causes"][0].startswith("the drafter did not load in b")


def test_a_changed_engine_default_is_named() -> None:
    other = {**SPEC_FACTS, "attention_backend": "FLASHINFER"}
    a = pair_run("a", [120, 130], facts={**SPEC_FACTS, "attention_backend": "FLASH_ATTN"})
    result = checked(a, pair_run("b", [90, 91], facts=other, engine_version="0.33.0"))
    causes = result["checks"][0]["causes"]
    assert causes[0] == "engine version changed: 0.32.0 → 0.33.0 (a default may have changed)"
    assert any("attention_backend: FLASH_ATTN vs FLASHINFER" in c for c in causes)


def test_an_unexplained_change_says_so() -> None:
    result = checked(pair_run("a", [120, 130]), pair_run("b", [90, 91]))
    assert result["checks"][0]["causes"] == ["no startup fact explains it"]


def test_a_different_pair_is_not_compared() -> None:
    result = checked(pair_run("a", [120]), pair_run("b", [60], model="org/other"))
    assert result == {"checks": [], "flags": []}


def test_one_rep_each_allows_one_percent() -> None:
    assert checked(pair_run("a", [120]), pair_run("b", [121]))["flags"] == []  # 2.20 vs 2.21
    assert checked(pair_run("a", [120]), pair_run("b", [125]))["flags"]  # 2.20 vs 2.25


def test_compare_reads_the_recorded_fingerprint_and_reports_the_flag(tmp_path: Any) -> None:
    a, b = pair_run("a", [120, 130]), pair_run("b", [60, 62], draft_rev="sha256:bbbb")
    recorded = run_fingerprint(b)
    b.meta.fingerprint = recorded  # type: ignore[attr-defined]  # what the sweep writes
    b.cells = [c for c in b.cells if c.arm == "plain"]  # the recorded one must be what is read
    cmp = compare_analyses([analyze(a), analyze(b)])
    assert [c["status"] for c in cmp["fingerprint"]["checks"]] == ["differs"]
    text = render_compare_markdown(cmp)
    assert "## Acceptance fingerprint" in text and "**FLAG**" in text
    dirs = []
    for run in (a, pair_run("b", [60, 62], draft_rev="sha256:bbbb")):
        write_run(run, tmp_path / run.meta.run_id)
        dirs.append(str(tmp_path / run.meta.run_id))
    result = CliRunner().invoke(app, ["compare", *dirs])
    assert result.exit_code == 0, result.output
    assert "FLAG: acceptance of draft_model-k2 (prose) differs" in result.output
