"""Open-loop load end to end on a sandbox pod (vast.ai emulated, real sshd, the real CPU engine):
`benchmark --request-rate … --slo … --load-workers 2` and `benchmark --trace …` measured by the
pod's agent, then `report`, whose SLO section must show attainment, goodput, the max rate under
the SLO and its $/Mtok, each checked against a figure computed here from the request rows and
the pod's price; then `down`, proven.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from tailpod.cli.main import app
from tailpod.sandbox.sshd import sshd_available
from tests.e2e.sandbox_world import rented_pod, tiny_vast_cloud

pytestmark = [
    pytest.mark.engine,
    pytest.mark.skipif(not sshd_available(), reason="OpenSSH sshd is not installed"),
]
runner = CliRunner()
TTFT_MS = 20000.0  # loose enough for the CPU engine at these rates: the figures, not a verdict
RATES = (0.5, 2.0)
# A Mooncake trace (timestamp in ms, input/output lengths): four requests 200 ms apart.
TRACE = [{"timestamp": 1000 + 200 * i, "input_length": 12, "output_length": 4, "hash_ids": [i]}
         for i in range(4)]


@pytest.fixture(scope="module")
def cloud(engine_env: dict[str, str], tiny_models: dict[str, Path]) -> Iterator[dict[str, Any]]:
    with tiny_vast_cloud(engine_env, tiny_models) as world:
        yield world


def _rows(run_dir: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (run_dir / "rows.jsonl").read_text().splitlines()]


def _attained(requests: list[dict[str, Any]]) -> float:
    """Share of a cell's requests that ended and met the TTFT target from the schedule."""
    met = [r for r in requests if r["ok"] and r["ttft_sched_s"] is not None
           and r["ttft_sched_s"] * 1000.0 <= TTFT_MS]
    return len(met) / len(requests)


def test_rate_ladder_and_trace_on_a_sandbox_pod(cloud: dict[str, Any], tmp_path: Path,
                                                leftover_engines: Any) -> None:
    with rented_pod(cloud, leftover_engines, context_length=1024):
        common = ["--spec-k", "0", "--reps", "1", "--max-tokens", "8",
                  "--slo", f"ttft_ms={TTFT_MS:g}"]
        ladder = runner.invoke(app, ["benchmark", *common, "--request-rate",
                                     ",".join(f"{r:g}" for r in RATES), "--requests-per-cell",
                                     "4", "--load-workers", "2", "--run-id", "ladder"])
        assert ladder.exit_code == 0, ladder.output
        trace = tmp_path / "mooncake.jsonl"
        trace.write_text("".join(json.dumps(r) + "\n" for r in TRACE))
        traced = runner.invoke(app, ["benchmark", *common, "--trace", str(trace),
                                     "--trace-format", "mooncake", "--run-id", "traced"])
        assert traced.exit_code == 0, traced.output

    # The ladder: one cell per rate, measured on the pod by two load processes.
    results = cloud["home"] / "results"
    run = json.loads((results / "ladder" / "run.json").read_text())
    assert run["measured_from"] == "pod" and run["provider"] == "vastai"
    price = run["pod"]["price_per_hr"]
    assert price > 0
    rows = _rows(results / "ladder")
    cells = {c["arrival"]["rate"]: c for c in rows if c["kind"] == "cell"}
    assert sorted(cells) == list(RATES)
    best = None  # the highest rate that passes with every lower one passing too
    failed_below = False
    for rate, cell in sorted(cells.items()):
        reqs = [r for r in rows if r["kind"] == "request" and r["cell"] == cell["cell"]]
        assert len(reqs) == 4 and cell["load_workers"] == 2 and cell["measured_from"] == "pod"
        assert cell["slo_attainment"] == pytest.approx(_attained(reqs))
        good = [r for r in reqs if r["ok"] and r["ttft_sched_s"] * 1000.0 <= TTFT_MS]
        assert cell["goodput_rps"] == pytest.approx(len(good) / cell["wall_s"])
        failed_below = failed_below or _attained(reqs) * 100.0 < 90.0
        best = best if failed_below else rate

    report = runner.invoke(app, ["report", str(results / "ladder")])
    assert report.exit_code == 0, report.output
    md = (results / "ladder" / "report.md").read_text()
    assert "## Open loop: SLO attainment and goodput against request rate" in md
    for rate, cell in cells.items():
        assert f"| plain | {rate:g} | 1 | {cell['achieved_rate_rps']:.2f} | " \
               f"{100.0 * cell['slo_attainment']:.1f}% | {cell['goodput_rps']:.2f} |" in md
    if best is None:
        assert "| plain | - | - | - |" in md
    else:
        # $/Mtok at the max rate: the pod's hourly price over the tokens it served there
        usd = price / (cells[best]["output_tok_s"] * 3600.0) * 1e6
        assert f"| plain | {best:g} | {cells[best]['goodput_rps']:.2f} | {usd:.3f} |" in md

    # The trace: its four requests at its own times, held to the logged output length.
    trows = _rows(results / "traced")
    (tcell,) = [c for c in trows if c["kind"] == "cell"]
    treqs = [r for r in trows if r["kind"] == "request"]
    assert tcell["arrival"]["process"] == "trace" and len(treqs) == 4
    assert [r["completion_tokens"] for r in treqs if r["ok"]] == [4] * sum(r["ok"] for r in treqs)
    gaps = [b["scheduled_at"] - a["scheduled_at"] for a, b in zip(treqs, treqs[1:], strict=False)]
    assert gaps == pytest.approx([0.2] * 3, abs=0.02)
    assert tcell["offered_rate_rps"] == pytest.approx(3 / 0.6)
    assert tcell["slo_attainment"] == pytest.approx(_attained(treqs))
    report = runner.invoke(app, ["report", str(results / "traced")])
    assert report.exit_code == 0, report.output
    tmd = (results / "traced" / "report.md").read_text()
    assert "### Trace replay" in tmd
    assert f"| plain | mooncake | 1 | 1 | {3 / 0.6:.2f} | {tcell['achieved_rate_rps']:.2f} | " \
           f"{100.0 * tcell['slo_attainment']:.1f}% |" in tmd
