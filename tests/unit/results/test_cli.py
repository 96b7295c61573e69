"""`tailpod report | compare | cost | export` through the CLI layer."""

from __future__ import annotations

import csv
import json
import sys
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner, Result

from tailpod.results.io import table_columns, write_run
from tests.unit.results.conftest import build_run
from tests.unit.results.test_cost import sequential_log


def small_run(tmp_path: Path, name: str = "r1", **kw: object) -> Path:
    run = build_run(
        {
            "plain": {1: [100.0, 102.0], 2: [180.0, 182.0]},
            "mtp-k2": {1: [150.0, 151.0], 2: [170.0, 171.0]},
        },
        run_id=name,
        ttft={"plain": {"cold": [0.3], "warm": [0.1]}},
        **kw,
    )  # type: ignore[arg-type]
    return write_run(run, tmp_path / name)


def test_report_json_prints_the_analysis_and_writes_nothing(
    app: typer.Typer, tmp_path: Path
) -> None:
    run_dir = small_run(tmp_path)
    res = CliRunner().invoke(app, ["report", str(run_dir), "--json", "--interpolation", "linear"])
    assert res.exit_code == 0, res.output
    an = json.loads(res.stdout)
    assert an["run_id"] == "r1" and an["settings"]["interpolation"] == "linear"
    cx = an["crossover"][0]
    assert cx["status"] == "crossover"
    assert cx["concurrency"] == pytest.approx(1 + (150.5 / 101 - 1) / (150.5 / 101 - 170.5 / 181))
    assert not (run_dir / "report.md").exists()


def test_report_writes_files_and_resolves_run_ids(
    app: typer.Typer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TAILPOD_RESULTS_DIR", str(tmp_path / "results"))
    run_dir = small_run(tmp_path / "results")
    res = CliRunner().invoke(app, ["report", "r1"])
    assert res.exit_code == 0, res.output
    assert (run_dir / "report.md").is_file() and (run_dir / "throughput.png").is_file()


def test_report_errors_are_one_line(app: typer.Typer, tmp_path: Path) -> None:
    # no such directory, and no run id either (a path): bad input, before anything is read
    res = CliRunner().invoke(app, ["report", str(tmp_path / "nope")])
    assert res.exit_code == 2 and "no run directory" in res.output
    res = CliRunner().invoke(app, ["report", str(small_run(tmp_path)), "--interpolation", "cubic"])
    assert res.exit_code == 2


def test_compare_prints_ratios_and_warns(app: typer.Typer, tmp_path: Path) -> None:
    a = small_run(tmp_path, "a")  # plain at c=1: 100 and 102 tok/s, median 101
    faster = build_run(
        {"plain": {1: [150.0, 153.0], 2: [180.0, 182.0]},
         "mtp-k2": {1: [150.0, 151.0], 2: [85.0, 85.5]}},
        run_id="b", engine_version="0.40.0",
    )
    b = write_run(faster, tmp_path / "b")
    res = CliRunner().invoke(app, ["compare", str(a), str(b), "--json"])
    assert res.exit_code == 0, res.output
    cmp = json.loads(res.stdout)
    assert cmp["baseline_run"] == "a"
    assert any("engine version differs" in w for w in cmp["warnings"])
    ratio = {(r["arm"], r["concurrency"]): r["ratios"] for r in cmp["throughput"]}
    assert ratio[("plain", 1)] == [1.0, pytest.approx(151.5 / 101)]  # medians, b over a
    assert ratio[("plain", 2)] == [1.0, 1.0]
    assert ratio[("mtp-k2", 2)] == [1.0, pytest.approx(85.25 / 170.5)]  # half as fast


def test_export_csv_and_jsonl_are_flat_and_documented(app: typer.Typer, tmp_path: Path) -> None:
    run_dir = small_run(tmp_path)
    res = CliRunner().invoke(app, ["export", str(run_dir), "--format", "csv"])
    assert res.exit_code == 0, res.output
    with (run_dir / "cells.csv").open() as fh:
        rows = list(csv.DictReader(fh))
    assert list(rows[0]) == table_columns("cells") and len(rows) == 8
    first = next(
        r for r in rows if r["arm"] == "mtp-k2" and r["concurrency"] == "1" and r["rep"] == "0"
    )
    assert first["output_tok_s"] == "150.0" and first["k"] == "2" and first["price_per_hr"] == "2.0"
    assert first["stamp"] == "" and first["acc_drafts"] == ""
    out = tmp_path / "req.jsonl"
    res = CliRunner().invoke(
        app, ["export", str(run_dir), "--format", "jsonl", "--table", "requests", "--out", str(out)]
    )
    assert res.exit_code == 0, res.output
    reqs = [json.loads(line) for line in out.read_text().splitlines()]
    assert reqs and set(reqs[0]) == set(table_columns("requests"))
    res = CliRunner().invoke(app, ["export", str(run_dir), "--format", "xlsx"])
    assert res.exit_code == 2  # a malformed flag is a usage error (docs/exit-codes.md)


def test_export_reads_back_with_pandas(app: typer.Typer, tmp_path: Path) -> None:
    pd = pytest.importorskip("pandas")
    run_dir = small_run(tmp_path)
    CliRunner().invoke(app, ["export", str(run_dir)])
    df = pd.read_csv(run_dir / "cells.csv")
    assert df.groupby("arm")["output_tok_s"].median()["plain"] == pytest.approx(141.0)


def test_export_parquet_reads_back_with_pyarrow(app: typer.Typer, tmp_path: Path) -> None:
    import pyarrow.parquet as pq  # a dev dependency: this test runs wherever `make test` does

    run_dir = small_run(tmp_path)
    res = CliRunner().invoke(app, ["export", str(run_dir), "--format", "parquet"])
    assert res.exit_code == 0, res.output
    table = pq.read_table(run_dir / "cells.parquet")
    assert table.column_names == table_columns("cells") and table.num_rows == 8
    rows = table.to_pylist()
    first = next(r for r in rows if r["arm"] == "mtp-k2" and r["concurrency"] == 1
                 and r["rep"] == 0)
    assert first["output_tok_s"] == 150.0 and first["k"] == 2 and first["price_per_hr"] == 2.0


def test_parquet_without_pyarrow_says_so(app: typer.Typer, tmp_path: Path,
                                         monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pyarrow", None)  # `import pyarrow` raises ImportError
    monkeypatch.setitem(sys.modules, "pyarrow.parquet", None)
    run_dir = small_run(tmp_path)
    res = CliRunner().invoke(app, ["export", str(run_dir), "--format", "parquet"])
    assert res.exit_code == 1 and "pyarrow" in res.output
    assert not (run_dir / "cells.parquet").exists()


def _write_log(path: Path, n: int, duration: float, gap: float) -> Path:
    path.write_text(
        "".join(
            json.dumps(
                {"t_start": r.t_start, "t_end": r.t_end, "completion_tokens": r.completion_tokens}
            )
            + "\n"
            for r in sequential_log(n, duration, gap)
        )
    )
    return path


def _pod_or_serverless(app: typer.Typer, log: Path, *more: str) -> Result:
    """`cost --log LOG` of a $2/h pod against $4/h serverless with 30 s cold starts."""
    return CliRunner().invoke(app, ["cost", "--log", str(log), "--pod-usd-hr", "2",
                                    "--serverless-usd-hr", "4", "--cold-start-s", "30", *more])


def test_cost_cli_short_gaps_verdict_pod(app: typer.Typer, tmp_path: Path) -> None:
    log = _write_log(tmp_path / "log.jsonl", 976, 2.198, 4.1)
    res = _pod_or_serverless(app, log, "--idle-timeout-s", "5")
    assert res.exit_code == 0, res.output
    assert "duty cycle 34.9%" in res.output
    assert "VERDICT            POD" in res.output and "nothing scales to zero" in res.output
    assert "pass --run" not in res.output


def test_cost_cli_json_with_concurrency_projection(app: typer.Typer, tmp_path: Path) -> None:
    log = _write_log(tmp_path / "log.jsonl", 20, 10.0, 600.0)
    run_dir = small_run(tmp_path)
    res = _pod_or_serverless(app, log, "--run", str(run_dir), "--json")
    assert res.exit_code == 0, res.output
    out = json.loads(res.stdout)
    assert out["verdict"] == "serverless"
    proj = out["concurrency_projection"]
    assert proj["arm"] == "plain" and [r["concurrency"] for r in proj["rows"]] == [1, 2]
    assert proj["rows"][1]["busy_s"] == pytest.approx(2000 / 181.0)


def test_cost_cli_own_from_a_run(app: typer.Typer, tmp_path: Path) -> None:
    run_dir = small_run(tmp_path)
    res = CliRunner().invoke(
        app,
        [
            "cost",
            "--own",
            "--purchase-usd",
            "30000",
            "--power-w",
            "700",
            "--usd-per-kwh",
            "0.15",
            "--utilization",
            "0.5",
            "--run",
            str(run_dir),
        ],
    )
    assert res.exit_code == 0, res.output
    assert "tok/s (r1 plain c=2 median)" in res.output
    assert "OWNED" in res.output and "RENTED" in res.output and "$2/hr" in res.output
    res = CliRunner().invoke(app, ["cost", "--own", "--purchase-usd", "1"])
    assert res.exit_code == 2 and "--power-w" in res.output
    res = CliRunner().invoke(app, ["cost", "--pod-usd-hr", "1"])
    assert res.exit_code == 2 and "--log" in res.output


def _plant_good_report(run_dir: Path) -> dict[str, bytes]:
    """A previous report and plots, each with content no renderer writes."""
    from tailpod.results.plots import PLOT_FILES

    good = {"report.md": b"GOOD REPORT\n"} | {
        name: f"GOOD {name}".encode() for name in PLOT_FILES.values()}
    for name, data in good.items():
        (run_dir / name).write_bytes(data)
    return good


def _left(run_dir: Path, good: dict[str, bytes]) -> dict[str, bytes]:
    return {name: (run_dir / name).read_bytes() for name in good}


@pytest.mark.parametrize("flags", [
    ["--prompt-class", "prsoe"],  # a typo of the run's one class
    ["--prompt-class", "code"],  # a real class the run never measured
    ["--knee-gain", "-1"],
    ["--knee-gain", "nan"],
    ["--knee-latency", "-0.5"],
])
def test_report_refuses_a_bad_setting_and_keeps_the_good_report(
    app: typer.Typer, tmp_path: Path, flags: list[str]
) -> None:
    run_dir = small_run(tmp_path)
    good = _plant_good_report(run_dir)
    res = CliRunner().invoke(app, ["report", str(run_dir), *flags])
    assert res.exit_code == 2, res.output
    assert flags[0].lstrip("-").split("-")[0] in res.output.replace("--", "")
    assert _left(run_dir, good) == good
    res = CliRunner().invoke(app, ["report", str(run_dir), "--json", *flags])
    assert res.exit_code == 2, res.output
    # the class the run holds is accepted, and that report does replace the planted one
    res = CliRunner().invoke(app, ["report", str(run_dir), "--prompt-class", "prose"])
    assert res.exit_code == 0, res.output
    now = _left(run_dir, good)
    assert all(now[name] != good[name] for name in good)
    assert now["throughput.png"].startswith(b"\x89PNG")


def test_a_report_that_fails_midway_leaves_the_previous_one_whole(
    app: typer.Typer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The plots are drawn before the markdown; a failure in the markdown must not leave new
    plots beside the old report (nor touch the old report), nor a staging directory."""
    import tailpod.results.report as report_mod

    run_dir = small_run(tmp_path)
    good = _plant_good_report(run_dir)

    def broken(_an: object, _report_only: object = None) -> str:
        raise RuntimeError("renderer broke")

    monkeypatch.setattr(report_mod, "render_run_markdown", broken)
    with pytest.raises(RuntimeError, match="renderer broke"):
        report_mod.write_report([run_dir])
    assert _left(run_dir, good) == good
    assert sorted(p.name for p in run_dir.iterdir() if p.name.startswith(".")) == []


def test_a_multi_run_report_checks_every_run_before_writing_any(
    app: typer.Typer, tmp_path: Path
) -> None:
    a = small_run(tmp_path, "a")
    other = build_run({"plain": {1: [100.0, 101.0]}}, run_id="b")
    for cell in other.cells:
        cell.prompt_class = "code"
    other.meta.plan.prompt_classes = ["code"]
    b = write_run(other, tmp_path / "b")
    good_a = _plant_good_report(a)
    res = CliRunner().invoke(app, ["report", str(a), str(b), "--prompt-class", "prose"])
    assert res.exit_code == 2, res.output
    assert "run b has no prompt class 'prose'" in res.output.replace("\n", " ")
    assert _left(a, good_a) == good_a
