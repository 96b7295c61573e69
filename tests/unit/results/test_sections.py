"""The report sections as modules (results/section.py, results/sections/): the registry is the
folder, a new module is a new section in the analysis, report.md and the comparison, and results
directories written before sections were modules read the same."""

from __future__ import annotations

import json
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

import tailpod.results.sections as sections_pkg
from tailpod.results.analysis import analyze
from tailpod.results.compare import compare_analyses
from tailpod.results.io import load_run
from tailpod.results.report import render_compare_markdown, render_run_markdown
from tailpod.results.sections import in_compare, in_report, registered
from tests import paths

REPO = paths.REPO
V1_FIXTURE = REPO / "tests/fixtures/results-v1-probe-py"
H200_RUN = REPO / "benchmarks/runs/h200_vllm_0.26.0_mtp_2026-12-02"
SECTIONS_DIR = REPO / "tailpod/results/sections"


def test_every_module_in_the_folder_is_a_registered_section() -> None:
    modules = sorted(p.stem for p in SECTIONS_DIR.glob("*.py") if p.stem != "__init__")
    owners = sorted(s.compute.__module__.rsplit(".", 1)[1] for s in registered())
    assert owners == modules


def test_no_two_sections_share_a_place_in_any_output() -> None:
    for rank_of in (
        lambda s: s.rank,
        lambda s: s.report_rank,
        lambda s: s.compare_rank,
    ):
        placed = [rank_of(s) for s in registered() if rank_of(s) is not None]
        assert len(placed) == len(set(placed))
    assert all(s.report_rank is not None for s in in_report())
    assert all(s.compare_rank is not None for s in in_compare())


def test_the_analysis_keys_keep_their_order() -> None:
    # The order `tailpod report --json` printed before sections were modules (commit c4d5cf6),
    # with the keys added since: provider_facts (issue 25) and cold_start (issue 29), after the
    # hardware.
    expected = [
        "analysis_version", "schema_version", "run_id", "run_dir", "model", "engine",
        "engine_version", "image_digest", "image_ref", "provider", "gpu", "gpu_count",
        "price_per_hr", "measured_from", "created_at", "plan", "stamp", "hardware",
        "provider_facts", "cold_start", "settings",
        "concurrency", "warnings", "arms", "cells", "speedup", "crossover", "knee", "best_k",
        "capacity", "cost", "ttft_cache", "acceptance", "fingerprint", "serve_tax", "slo",
        "bytes_model",
    ]  # fmt: skip
    assert list(analyze(load_run(V1_FIXTURE))) == expected


@pytest.mark.parametrize(
    "run_dir",
    [V1_FIXTURE, H200_RUN],
    ids=["v1-fixture", "h200-run"],
)
def test_a_results_directory_written_before_reads_the_same(run_dir: Path) -> None:
    """report.md beside each run was rendered before the sections became modules (the H200 run's
    by the sweep at 30308ab, the fixture's by commit c4d5cf6, tests/fixtures/.../README.md)."""
    assert render_run_markdown(analyze(load_run(run_dir))) == (run_dir / "report.md").read_text()


NEW_SECTION = '''
"""A section only this test knows: the number of cell summaries, and its side-by-side."""

from tailpod.results.section import Section


def compute(ctx):
    return {"cells": len(ctx.cells)}


def render(value, rc):
    return ["## Cell count", "", f"{value['cells']} cells", ""]


def compare(cc):
    return {"cell_count": [len(a["cells"]) for a in cc.analyses]}


def render_compare(cmp, rc):
    return ["## Cell count", "", " vs ".join(str(n) for n in cmp["cell_count"]), ""]


SECTION = Section(key="cell_count", rank=25, compute=compute, report_rank=25, render=render,
                  compare_rank=15, compare=compare, render_compare=render_compare)
'''


@pytest.fixture
def extra_section(tmp_path: Path) -> Iterator[None]:
    """One more module in the sections package (from a second folder on its __path__)."""
    (tmp_path / "zz_cell_count.py").write_text(textwrap.dedent(NEW_SECTION))
    sections_pkg.__path__.append(str(tmp_path))
    registered.cache_clear()
    try:
        yield
    finally:
        sections_pkg.__path__.remove(str(tmp_path))
        sys.modules.pop("tailpod.results.sections.zz_cell_count", None)
        registered.cache_clear()


def test_a_new_section_is_one_module(extra_section: None) -> None:
    run = load_run(V1_FIXTURE)
    # The fixture: two arms x concurrency 1 and 2, so four (arm, concurrency) summaries.
    cells = {(c.arm, c.concurrency) for c in run.cells}
    assert len(cells) == 4
    an = analyze(run)
    keys = list(an)
    assert an["cell_count"] == {"cells": 4}
    assert keys.index("cells") < keys.index("cell_count") < keys.index("speedup")  # rank 25

    md = render_run_markdown(an)
    assert "## Cell count\n\n4 cells\n" in md
    assert md.index("## Throughput") < md.index("## Cell count") < md.index("## Speedup")
    before = (V1_FIXTURE / "report.md").read_text()
    assert md.replace("## Cell count\n\n4 cells\n\n", "") == before  # nothing else moved

    cmp = compare_analyses([an, analyze(run)])
    assert cmp["cell_count"] == [4, 4]
    text = render_compare_markdown(cmp)
    assert "## Cell count\n\n4 vs 4\n" in text
    assert text.index("## Cell count") < text.index("## Throughput (median")  # rank 15 < 20
    json.dumps(cmp)  # still a JSON document


def test_without_the_extra_module_the_section_is_gone() -> None:
    assert "cell_count" not in analyze(load_run(V1_FIXTURE))


def test_the_report_only_sections_come_after_the_analysis_and_stay_out_of_it() -> None:
    """Decision and KL vs reference are registered but are not part of `tailpod report --json`:
    they are computed after every analysis section (the Decision reads crossover and knee), are
    never compared, and follow the plots in report.md, as they did when write_report appended them
    by hand."""
    from tailpod.results.section import AFTER_PLOTS

    only = [s for s in registered() if not s.in_analysis]
    assert sorted(s.key for s in only) == ["decision", "kl"]
    top = max(s.rank for s in registered() if s.in_analysis)
    assert all(s.rank > top and s.compare is None for s in only)
    assert [s.key for s in in_report() if (s.report_rank or 0) > AFTER_PLOTS] == ["decision", "kl"]
    an = analyze(load_run(H200_RUN))
    assert "decision" not in an and "kl" not in an
