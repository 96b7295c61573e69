"""`benchmark … --request-rate 2,8 --slo ttft_ms=200` on a terminal prints its open-loop summary
rendered, never as raw Markdown (newcomer 2.11: `## Open loop…`, `![SLO attainment …](rate.png)`
and a 10-column pipe table wrapped at 100 columns). Replayed through `benchmark` itself;
test_markdown_on_the_terminal.py pins the renderer alone."""

from __future__ import annotations

import io
import re
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console
from typer.testing import CliRunner

from tailpod.cli import benchmark as benchmark_cli
from tailpod.cli.main import app
from tailpod.config import load_settings
from tailpod.engines.base import EngineConfig
from tailpod.ledger import Ledger, PodRecord
from tailpod.measure.plan import Arm, Cell, SweepPlan
from tests.unit.measure.test_sweep import ScriptedHost

TAG = "tp-open-loop"
WIDTH = 100


class OpenLoopRows(ScriptedHost):
    """Cell rows of an open-loop cell: its arrival, the SLO it was measured under, attainment."""

    def run_cells(self, arm: Arm, cells: list[Cell], plan: SweepPlan,
                  run_id: str) -> list[dict[str, Any]]:
        return [{"kind": "cell", "schema_version": 1, "run_id": run_id, "arm": arm.label,
                 "cell": c.cell_id, "concurrency": c.concurrency, "rep": c.rep,
                 "prompt_class": c.prompt_class, "requests": 8, "failed": 0, "wall_s": 4.0,
                 "output_tokens": 240, "output_tok_s": 60.0, "achieved_rate_rps": 1.8,
                 "slo": {"ttft_ms": 200.0}, "slo_percentile": 90.0,
                 "arrival": {"process": "poisson", "rate": c.rate, "burstiness": 1.0,
                             "seed": 0, "requests": 8},
                 "slo_attainment": 0.95, "goodput_rps": 1.7, "goodput_tok_s": 57.0,
                 "ttft_sched_p90_s": 0.2, "schedule_lag_max_s": 0.001} for c in cells]


@pytest.fixture()
def pod(tailpod_home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TAILPOD_RESULTS_DIR", str(tmp_path / "results"))
    settings = load_settings()
    Ledger(settings.state_dir).put(PodRecord(
        run_tag=TAG, provider="local", status="running", pod_id=f"local:{TAG}",
        engine=EngineConfig(engine="vllm", model="/m").to_json()))
    monkeypatch.setattr("tailpod.measure.hosts.sweep_host",
                        lambda *_a, **_k: OpenLoopRows({0: 10.0}))


def test_the_open_loop_summary_of_benchmark_is_rendered_on_a_terminal(
        pod: None, monkeypatch: pytest.MonkeyPatch) -> None:
    buf = io.StringIO()
    monkeypatch.setattr(benchmark_cli, "console",
                        Console(file=buf, force_terminal=True, width=WIDTH, color_system=None))
    result = CliRunner().invoke(app, ["benchmark", TAG, "--request-rate", "2,8", "--slo",
                                      "ttft_ms=200", "--reps", "1", "--run-id", "ol"])
    assert result.exit_code == 0, result.output
    out = buf.getvalue()
    assert "Open loop" in out, out
    assert not re.search(r"^\s*#", out, re.M), out  # headings rendered, not `##`
    assert "![" not in out and "|---" not in out and "**" not in out, out
    assert "plot: " in out and "rate.png" in out, out
    assert max(len(line) for line in out.splitlines()) <= WIDTH
