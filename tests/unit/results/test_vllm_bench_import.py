"""`tailpod import-vllm-bench`: `vllm bench serve --save-result` files as a run directory that
report and compare read. The files here carry the keys vLLM's benchmark writes
(vllm/benchmarks/serve.py: `result` in `benchmark()`, `max_concurrency`, `model_id` and `date`
added by its caller); expected values are worked out from them by hand."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import typer
from typer.testing import CliRunner

from tailpod.results.analysis import analyze
from tailpod.results.io import STAMP, load_run


def _result(conc: int | None, duration: float, out_tokens: int, **extra: Any) -> dict[str, Any]:
    return {"date": "20261201-101500", "backend": "vllm", "model_id": "org/model",
            "max_concurrency": conc, "request_rate": "inf", "duration": duration,
            "completed": 40, "failed": 0, "total_input_tokens": 4000,
            "total_output_tokens": out_tokens, "request_throughput": 40 / duration,
            "output_throughput": out_tokens / duration, "mean_ttft_ms": 22.0,
            "median_ttft_ms": 20.0, "p99_ttft_ms": 60.0, "median_tpot_ms": 5.0,
            "median_e2el_ms": 700.0, "p90_e2el_ms": 800.0, **extra}


def _files(tmp_path: Path, results: list[dict[str, Any]]) -> list[str]:
    paths = []
    for i, r in enumerate(results):
        p = tmp_path / f"bench-{i}.json"
        p.write_text(json.dumps(r))
        paths.append(str(p))
    return paths


def test_each_file_is_a_rep_of_its_concurrency_and_the_run_is_stamped_off_pod(
    app: typer.Typer, tmp_path: Path
) -> None:
    files = _files(tmp_path, [_result(4, 10.0, 5000), _result(4, 10.0, 6000),
                              _result(16, 20.0, 30000)])
    got = CliRunner().invoke(app, ["import-vllm-bench", *files, "--out", str(tmp_path / "run")])
    assert got.exit_code == 0, got.output
    run = load_run(tmp_path / "run")
    assert run.stamp == STAMP  # where the client ran is not recorded: never the pod's own
    an = analyze(run)
    c4 = next(c for c in an["cells"] if c["concurrency"] == 4)
    assert (c4["output_tok_s"]["n"], c4["output_tok_s"]["min"], c4["output_tok_s"]["max"]) == (
        2, 500.0, 600.0)
    assert c4["e2e_p50_s"]["median"] == pytest.approx(0.7)
    c16 = next(c for c in an["cells"] if c["concurrency"] == 16)
    assert c16["output_tok_s"]["median"] == pytest.approx(1500.0)
    # 40 requests: a p99 needs 100, so the file's p99 TTFT is void, not quoted
    assert any(c.void_fields.get("ttft_p99_s") for c in run.cells)


def test_a_speculative_arm_is_unverified_and_keeps_its_acceptance(tmp_path: Path,
                                                                   app: typer.Typer) -> None:
    files = _files(tmp_path, [_result(4, 10.0, 5000, spec_decode_num_drafts=100,
                                      spec_decode_draft_tokens=300,
                                      spec_decode_accepted_tokens=150)])
    got = CliRunner().invoke(app, ["import-vllm-bench", *files, "--arm", "mtp-k3", "--out",
                                   str(tmp_path / "run")])
    assert got.exit_code == 0, got.output
    an = analyze(load_run(tmp_path / "run"))
    assert an["arms"][0]["unverified"].startswith("imported from `vllm bench serve`")
    (cell,) = an["cells"]
    assert cell["acceptance_length"]["median"] == pytest.approx(2.5)  # 1 + 150/100


@pytest.mark.parametrize("bad, says", [
    (_result(None, 10.0, 5000), "no --max-concurrency recorded"),
    ({"completed": 3}, "no --max-concurrency recorded"),
    (_result(4, float("nan"), 5000), "no number under 'duration'"),
    ([1, 2], "not an object"),
])  # fmt: skip
def test_what_does_not_map_exits_2_naming_the_file_and_writes_nothing(
    app: typer.Typer, tmp_path: Path, bad: Any, says: str
) -> None:
    (path,) = _files(tmp_path, [bad])
    got = CliRunner().invoke(app, ["import-vllm-bench", path, "--out", str(tmp_path / "run")])
    assert got.exit_code == 2, got.output
    said = " ".join(got.output.split())  # the console wraps long lines
    assert says in said and "bench-0.json" in said
    assert not (tmp_path / "run").exists()


def test_an_imported_run_compares_against_a_tailpod_run_on_one_page(
    app: typer.Typer, tmp_path: Path
) -> None:
    import shutil

    from tests import paths as test_paths

    baseline = shutil.copytree(test_paths.REPO / "benchmarks/runs/h200_vllm_0.26.0_draft_2026-12-02",
                               tmp_path / "draft")
    files = _files(tmp_path, [_result(4, 10.0, 5000), _result(4, 10.0, 6000)])
    assert CliRunner().invoke(app, ["import-vllm-bench", *files, "--out",
                                    str(tmp_path / "imp")]).exit_code == 0
    got = CliRunner().invoke(app, ["compare", "--html", "--baseline", str(baseline),
                                   str(tmp_path / "imp")])
    assert got.exit_code == 0, got.output
    page = next(Path(baseline).glob("compare-*.html")).read_text()
    assert f'<div class="stamp" role="alert">{STAMP}' in page  # the import is stamped off-pod
    # plain at c=4 in both: the one differences row, the import's 550 [500–600] over 2 reps
    table = page.split('<table class="differences">', 1)[1].split("</table>", 1)[0]
    assert table.count("<tr class=") == 1
    assert "<td>plain</td><td>4</td>" in table and "<td>550 [500–600] n=2</td>" in table
