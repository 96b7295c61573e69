"""report.md is the frame plus the registered sections and nothing else: Decision and "KL vs
reference" are sections like the others (results/sections/decision.py, kl_reference.py), and the
reports of results directories written before they were read byte for byte the same
(tests/fixtures/report-before-sections/README.md)."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest

from tailpod.results import report
from tailpod.results.report import write_report
from tailpod.results.section import RenderContext
from tailpod.results.sections import in_report
from tests import paths

GOLDEN = paths.FIXTURES / "report-before-sections"
V1 = paths.FIXTURES / "results-v1-probe-py"
RUNS = paths.REPO / "benchmarks/runs"
# The headings the frame writes itself (render_run_markdown): everything else is a section's.
FRAME_HEADINGS = {"## Warnings", "## Plots"}


def _copy(src: Path, tmp: Path, kl: bool = False) -> Path:
    dst = tmp / src.name
    shutil.copytree(src, dst, ignore=shutil.ignore_patterns("*.png"))
    if kl:
        shutil.copy(GOLDEN / "kl.json", dst / "kl.json")
    return dst


def _no_plots(monkeypatch: pytest.MonkeyPatch) -> None:
    # report.md is what these tests read; the PNGs are test_report.py's business.
    monkeypatch.setattr(report, "write_plots", lambda _an, _path: None)


@pytest.mark.parametrize(
    "run",
    ["h200_vllm_0.26.0_draft_2026-12-02", "h200_vllm_0.26.0_openloop_2026-12-02"],
)
def test_a_committed_report_with_a_decision_is_rewritten_byte_for_byte(
    run: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """These two report.md were written by write_report with its Decision section (the draft run's
    from its decision.json, the open-loop run's computed)."""
    _no_plots(monkeypatch)
    src = RUNS / run
    out = write_report([_copy(src, tmp_path)])
    assert "## Decision" in out.read_text()
    assert out.read_text() == (src / "report.md").read_text()


@pytest.mark.parametrize(
    ("src", "name"),
    [(V1, "v1-fixture"), (RUNS / "h200_vllm_0.26.0_mtp_2026-12-02", "h200-mtp")],
)
def test_a_report_written_before_the_decision_gains_the_same_decision(
    src: Path, name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The committed report.md predates the Decision section; write_report at 6c0fc34 appended
    the golden tail to it."""
    _no_plots(monkeypatch)
    expected = (src / "report.md").read_text() + (GOLDEN / f"{name}.decision.md").read_text()
    assert write_report([_copy(src, tmp_path)]).read_text() == expected


def test_a_run_with_kl_json_ends_with_the_kl_section(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _no_plots(monkeypatch)
    expected = "".join(
        [
            (V1 / "report.md").read_text(),
            (GOLDEN / "v1-fixture.decision.md").read_text(),
            (GOLDEN / "v1-fixture.kl.md").read_text(),
        ]
    )
    assert write_report([_copy(V1, tmp_path, kl=True)]).read_text() == expected


def test_a_kl_evaluation_only_reads_the_same(tmp_path: Path) -> None:
    run_dir = tmp_path / "kl-only"
    run_dir.mkdir()
    shutil.copy(V1 / "run.json", run_dir)
    (run_dir / "rows.jsonl").write_text("")
    shutil.copy(GOLDEN / "kl.json", run_dir)
    assert write_report([run_dir]).read_text() == (GOLDEN / "kl-only.report.md").read_text()
    assert not list(run_dir.glob("*.png"))  # no throughput, nothing plotted


def _headings(text: str) -> list[str]:
    return re.findall(r"^## .*$", text, flags=re.MULTILINE)


@pytest.mark.parametrize(
    ("src", "kl"),
    [(V1, True), (RUNS / "h200_vllm_0.26.0_draft_2026-12-02", True),
     (RUNS / "h200_vllm_0.26.0_openloop_2026-12-02", False)],
    ids=["v1-fixture+kl", "h200-draft+kl", "h200-openloop"],
)  # fmt: skip
def test_every_heading_of_report_md_is_the_frame_or_a_registered_section(
    src: Path, kl: bool, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A section appended by hand (in write_report or render_run_markdown) has a heading no
    registered section's render() writes, and fails here."""
    _no_plots(monkeypatch)
    from tailpod.results.analysis import analyze_for_report
    from tailpod.results.io import load_run

    run_dir = _copy(src, tmp_path, kl=kl)
    text = write_report([run_dir]).read_text()
    an = analyze_for_report(load_run(run_dir))
    values = {**an.analysis, **an.report_only}
    rc = RenderContext(analysis=an.analysis, stamp=an.analysis.get("stamp"), void={})
    by_sections = []
    for section in in_report():
        assert section.render is not None
        by_sections += _headings("\n".join(section.render(values.get(section.key), rc)))
    found = _headings(text)
    assert [h for h in found if h not in FRAME_HEADINGS] == by_sections
    assert "## Decision" in by_sections and ("## KL vs reference" in by_sections) == kl
