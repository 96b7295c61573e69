"""report.md + PNGs on constructed run directories; tables checked against the analysis JSON."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import matplotlib.image as mpimg
import pytest

from tailpod.results.analysis import analyze
from tailpod.results.io import STAMP, load_run, write_run
from tailpod.results.plots import PLOT_FILES
from tailpod.results.report import (
    STAMP_LINE,
    render_run_markdown,
    scrub_argv,
    write_report,
)
from tailpod.results.schema import Gate
from tailpod.secrets import Secret
from tests.unit.results.conftest import build_run

VOID_REASON = "token-identity gate failed (prompt 1, position 17)"


def sweep_run(tmp_path: Path, name: str = "sweep", measured_from: str = "pod", **kw: Any) -> Path:
    run = build_run(
        {
            "plain": {
                1: [60.0, 61.0, 59.0],
                2: [118.0, 119.0, 117.0],
                4: [230.0, 232.0, 229.0],
                8: [420.6, 421.0, 419.0],
                16: [425.0, 426.0, 424.0],
            },
            "mtp-k2": {
                1: [100.0, 101.0, 99.0],
                2: [140.0, 141.0, 139.0],
                4: [220.0, 221.0, 219.0],
                8: [380.0, 381.0, 379.0],
                16: [380.0, 382.0, 378.0],
            },
            "mtp-k3": {
                1: [110.0, 111.0, 109.0],
                2: [150.0, 151.0, 149.0],
                4: [215.0, 216.0, 214.0],
                8: [370.0, 371.0, 369.0],
                16: [372.0, 373.0, 371.0],
            },
        },
        latency={
            a: {16: [2.0, 2.0, 2.0]} | {c: [1.0, 1.0, 1.0] for c in (1, 2, 4, 8)}
            for a in ("plain", "mtp-k2", "mtp-k3")
        },
        ttft={
            "plain": {"cold": [0.3, 0.4], "warm": [0.1, 0.12]},
            "mtp-k2": {"cold": [0.35], "warm": [0.11]},
        },
        facts={
            "plain": {"kv_tokens": 700000, "max_running_requests": 175},
            "mtp-k2": {"kv_tokens": 420000, "max_running_requests": 48},
        },
        void={"mtp-k3": VOID_REASON},
        acceptance={"mtp-k2": (1000, 2000, 1300), "mtp-k3": (1000, 3000, 1500)},
        run_id=name,
        measured_from=measured_from,
        **kw,
    )
    return write_run(run, tmp_path / name)


def md_tables(text: str) -> list[tuple[str, list[list[str]]]]:
    """Every markdown table with the nearest heading above it."""
    tables, heading, current = [], "", None
    for line in text.splitlines():
        if line.startswith("#"):
            heading = line.lstrip("# ").strip()
        if line.startswith("|"):
            cells = [c.strip() for c in re.split(r"(?<!\\)\|", line.strip())[1:-1]]
            if current is None:
                current = []
                tables.append((heading, current))
            if not all(set(c) <= {"-"} for c in cells):
                current.append(cells)
        else:
            current = None
    return tables


def table_under(text: str, heading: str, index: int = 0) -> list[list[str]]:
    return [t for h, t in md_tables(text) if h == heading][index]


def plain_label(cell: str) -> str:
    m = re.match(r"~~(.+?)~~", cell)
    return m.group(1) if m else cell


@pytest.fixture()
def text_only(monkeypatch: pytest.MonkeyPatch) -> None:
    """write_report without its per-run PNGs, for tests that read report.md only (the plots are
    checked by the tests that decode them)."""
    from tailpod.results import report

    monkeypatch.setattr(report, "write_plots", lambda _an, _path: None)


@pytest.fixture(scope="module")
def on_pod_report(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The sweep run's report, rendered once for the tests that only read it (plots are slow)."""
    run_dir = sweep_run(tmp_path_factory.mktemp("report"), "onpod")
    path = write_report([run_dir])
    assert path == run_dir / "report.md"
    return run_dir


def test_report_files_exist_and_images_decode(on_pod_report: Path) -> None:
    run_dir = on_pod_report
    path = run_dir / "report.md"
    assert path.is_file()
    for name in PLOT_FILES.values():
        img = mpimg.imread(run_dir / name)
        assert img.ndim == 3 and img.shape[0] > 200 and img.shape[1] > 300, name
        assert img.std() > 0.01, f"{name} is blank"
    text = path.read_text()
    for name in PLOT_FILES.values():
        assert f"]({name})" in text


def test_tables_show_the_figures_worked_out_by_hand(on_pod_report: Path) -> None:
    # Expected cells are written out from sweep_run's data, not by the report's formatters:
    # median [min–max] of the three reps; speedup = median(spec)/median(plain)
    # [min(spec)/max(plain)–max(spec)/min(plain)], e.g. c=1: 100/60, 99/61, 101/59;
    # cost per 1k tokens = $2/h / 3600 / tok/s × 1000, e.g. plain c=1: 2/3600/60*1000.
    run_dir = on_pod_report
    text = (run_dir / "report.md").read_text()
    void_k3 = f"~~mtp-k3~~ (VOID: {VOID_REASON})"
    head = ["arm", "c=1", "c=2", "c=4", "c=8", "c=16"]
    assert table_under(text, "Throughput", 0) == [
        head,
        ["plain", "60 [59–61]", "118 [117–119]", "230 [229–232]", "420.6 [419–421]",
         "425 [424–426]"],
        ["mtp-k2", "100 [99–101]", "140 [139–141]", "220 [219–221]", "380 [379–381]",
         "380 [378–382]"],
        [void_k3, "110 [109–111]", "150 [149–151]", "215 [214–216]", "370 [369–371]",
         "372 [371–373]"],
    ]
    assert table_under(text, "Speedup over plain", 0) == [
        head,
        ["mtp-k2", "1.67× [1.62–1.71]", "1.19× [1.17–1.21]", "0.96× [0.94–0.97]",
         "0.90× [0.90–0.91]", "0.89× [0.89–0.90]"],
        [void_k3] + ["VOID"] * 5,
    ]
    assert table_under(text, "Cost", 0) == [
        head,
        ["plain", "$0.009259 ($9.259)", "$0.004708 ($4.708)", "$0.002415 ($2.415)",
         "$0.001321 ($1.321)", "$0.001307 ($1.307)"],
        ["mtp-k2", "$0.005556 ($5.556)", "$0.003968 ($3.968)", "$0.002525 ($2.525)",
         "$0.001462 ($1.462)", "$0.001462 ($1.462)"],
        [void_k3] + ["VOID"] * 5,
    ]
    # Crossover by hand: the speedup of the medians falls through 1 between c=2 (140/118) and
    # c=4 (220/230); linear in log2(c): t = (s2 - 1) / (s2 - s4), c = 2 ** (1 + t) = 3.51.
    s2, s4 = 140 / 118, 220 / 230
    by_hand = 2 ** (1 + (s2 - 1) / (s2 - s4))
    assert f"{by_hand:.2f}" == "3.51"
    cross = table_under(text, "Crossover and knee", 0)
    mtp = next(r for r in cross if r[0] == "mtp-k2")
    assert mtp[1] == "crossover"
    assert mtp[2] == "3.51"
    cx = next(c for c in analyze(load_run(run_dir))["crossover"] if c["arm"] == "mtp-k2")
    assert cx["bracket"] == [2, 4] and cx["concurrency"] == pytest.approx(by_hand)
    knee = table_under(text, "Crossover and knee", 1)
    plain_knee = next(r for r in knee if r[0] == "plain")
    assert plain_knee[1:4] == ["knee", "8", "420.6"]

    cap = table_under(text, "Capacity", 0)
    row = next(r for r in cap if r[0] == "mtp-k2")
    assert row[2] == "420,000" and row[3] == "48"
    assert "slots 175 → 48" in row[5]


def test_void_arm_is_struck_out_with_its_reason(on_pod_report: Path) -> None:
    text = (on_pod_report / "report.md").read_text()
    assert f"~~mtp-k3~~ (VOID: {VOID_REASON})" in text
    speed = table_under(text, "Speedup over plain", 0)
    void_row = next(r for r in speed if r[0].startswith("~~mtp-k3~~"))
    assert set(void_row[1:]) == {"VOID"}
    assert "Excluded (void): ~~mtp-k3~~" in text


def test_off_pod_report_stamps_every_table_and_plot(tmp_path: Path,
                                                   on_pod_report: Path) -> None:
    run_dir = sweep_run(tmp_path, "offpod", measured_from="off-pod")
    text = write_report([run_dir]).read_text()
    lines = text.splitlines()
    table_starts = [
        i
        for i, line in enumerate(lines)
        if line.startswith("|") and (i == 0 or not lines[i - 1].startswith("|"))
    ]
    assert len(table_starts) > 10
    for i in table_starts:
        assert lines[i - 2] == STAMP_LINE, lines[i]
    assert lines[2] == f"> {STAMP_LINE}"
    on_pod = (on_pod_report / "report.md").read_text()
    assert STAMP not in on_pod
    # The stamp is drawn, so off-pod PNGs differ from the same data measured on-pod.
    for name in PLOT_FILES.values():
        assert mpimg.imread(run_dir / name).shape == mpimg.imread(on_pod_report / name).shape
        assert (mpimg.imread(run_dir / name) != mpimg.imread(on_pod_report / name)).any()


def test_unknown_price_reads_unknown_not_zero(tmp_path: Path, text_only: None) -> None:
    text = write_report([sweep_run(tmp_path, price=None)]).read_text()
    assert "cost is **unknown** (not zero)" in text
    cost = table_under(text, "Cost", 0)
    assert {c for row in cost[1:] if not row[0].startswith("~~") for c in row[1:]} == {"unknown"}
    assert "$0" not in text


def test_several_runs_compare_side_by_side_with_provenance_warnings(tmp_path: Path) -> None:
    a = sweep_run(tmp_path, "gpu-a")
    b = write_run(
        build_run(
            {"plain": {1: [120.0], 8: [841.2]}}, run_id="gpu-b", engine_version="0.33.0", price=4.0
        ),
        tmp_path / "gpu-b",
    )
    path = write_report([a, b])
    assert path.parent == a and path.name == "compare-gpu-a-vs-gpu-b.md"
    assert mpimg.imread(path.with_suffix(".png")).ndim == 3
    assert (b / "report.md").is_file()
    text = path.read_text()
    assert "engine version differs: gpu-a=0.32.0, gpu-b=0.33.0" in text
    tput = table_under(text, "Throughput (median output tok/s)")
    assert tput[0] == ["arm", "c", "gpu-a", "gpu-b", "gpu-b / gpu-a"]
    row = next(r for r in tput if r[0] == "plain" and r[1] == "8")
    assert row[2:] == ["420.6", "841.2", "2.00×"]
    void_row = next(r for r in tput if r[0].startswith("~~mtp-k3~~") and r[1] == "1")
    assert void_row[-1] == "—"


def test_secrets_never_reach_the_report(tmp_path: Path, text_only: None) -> None:
    secret = Secret("hf_verysecretvalue123")
    run_dir = sweep_run(
        tmp_path,
        argv={
            "plain": [
                "vllm",
                "serve",
                "--hf-token",
                secret.reveal(),
                f"--api-key={secret.reveal()}x",
            ]
        },
    )
    text = write_report([run_dir]).read_text()
    assert secret.reveal() not in text
    assert scrub_argv(
        ["--max-num-seqs", "8", "--hf-token", "abc", "HF_TOKEN=zzz", "hf_abcdef"]
    ) == ["--max-num-seqs", "8", "--hf-token", "***", "***", "***"]


@pytest.mark.parametrize("multi", [False, True])
def test_report_accepts_a_migrated_v0_run(tmp_path: Path, multi: bool) -> None:
    from tests.unit.results.test_schema import CELL_V0, REQUEST_V0, RUN_V0, _write_dir

    old = _write_dir(tmp_path / "old", RUN_V0, [REQUEST_V0, CELL_V0])
    dirs = [old, sweep_run(tmp_path)] if multi else [old]
    assert write_report(dirs).is_file()
    assert STAMP in (old / "report.md").read_text()


def test_a_run_without_cells_still_reports(tmp_path: Path) -> None:
    run = build_run({"plain": {1: [1.0]}, "mtp-k2": {1: [2.0]}})
    run.cells, run.requests = [], []
    path = write_report([write_run(run, tmp_path / "empty")])
    assert "arm plain: no cell rows" in path.read_text()
    assert all((tmp_path / "empty" / name).is_file() for name in PLOT_FILES.values())


def test_speedups_the_gate_did_not_verify_are_never_printed_bare() -> None:
    # plain 10 tok/s, k1 15, k2 18 at c=1 and c=2 (×c): speedups 1.50 and 1.80 everywhere.
    run = build_run({"plain": {1: [10.0], 2: [20.0]}, "mtp-k1": {1: [15.0], 2: [30.0]},
                     "mtp-k2": {1: [18.0], 2: [36.0]}})
    by_label = {a.label: a for a in run.meta.arms}
    by_label["mtp-k2"].gate = Gate(status="pass", method="text", prompts=6)
    an = analyze(run)
    md = render_run_markdown(an)
    speedup = md.split("## Speedup over plain", 1)[1].split("## Crossover", 1)[0]
    k2_rows = [line for line in speedup.splitlines() if line.startswith("| mtp-k2")]
    k1_rows = [line for line in speedup.splitlines() if line.startswith("| mtp-k1 ")]
    assert len(k2_rows) == 2 and len(k1_rows) == 2  # throughput and decode tables
    assert k2_rows[0].rstrip(" |").split(" | ")[1:] == ["1.80× (no spread: 1 rep) UNVERIFIED"] * 2, k2_rows[0]
    assert k1_rows[0].rstrip(" |").split(" | ")[1:] == ["1.50× (no spread: 1 rep)"] * 2, k1_rows[0]
    arms = md.split("## Arms", 1)[1].split("## Throughput", 1)[0]
    assert "pass — UNVERIFIED: gate compared text only, not token ids" in arms
    assert "mtp-k2: speedup UNVERIFIED (gate compared text only" in md  # the warnings list


def test_a_skipped_gate_marks_the_arm_unverified() -> None:
    run = build_run({"plain": {1: [10.0]}, "mtp-k1": {1: [15.0]}})
    run.meta.arms[1].gate = Gate(status="skipped", prompts=0)
    md = render_run_markdown(analyze(run))
    throughput = md.split("## Throughput", 1)[1].split("## Speedup", 1)[0]
    assert "| mtp-k1 (UNVERIFIED: token-identity gate skipped" in throughput
    speedup = md.split("## Speedup over plain", 1)[1].split("## Crossover", 1)[0]
    assert "| 1.50× (no spread: 1 rep) UNVERIFIED |" in speedup, speedup
