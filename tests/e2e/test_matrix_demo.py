"""`tailpod demo --matrix`: two sandbox cards on both emulated clouds, a real CPU engine on each pod,
in parallel, ending with the matrix report and every pod proven down.

One engine start per pod (plain arm only) keeps it as cheap as a parallel run can be; the gated
arms and the faults are tested without an engine in tests/integration/cloud/test_matrix_faults.py.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from tailpod.cli.main import app
from tailpod.ledger import Ledger
from tailpod.sandbox.podhost import free_port
from tailpod.sandbox.sshd import sshd_available

pytestmark = pytest.mark.engine


@pytest.mark.skipif(not sshd_available(), reason="OpenSSH sshd is not installed")
def test_demo_matrix_rents_in_parallel_ranks_the_cards_and_leaves_nothing(
    engine_env: dict[str, str], leftover_engines: Any
) -> None:
    port = free_port(consecutive=2)  # one engine port per pod
    result = CliRunner().invoke(
        app,
        ["demo", "--matrix", "--port", str(port), "--spec-k", "0", "--concurrency", "1,2",
         "--max-tokens", "16"],
        catch_exceptions=False,
    )
    out = result.output
    assert result.exit_code == 0, out
    assert "pod lifetimes overlapped in the ledger: yes" in out
    assert "0 resources billing" in out
    assert "demo done" in out
    results = Path(engine_env["TAILPOD_RESULTS_DIR"])
    (matrix_dir,) = [d for d in results.iterdir() if d.name.startswith("mx-")]
    report = json.loads((matrix_dir / "matrix-report.json").read_text())
    # the runs' own hardware check: emulated providers, the engine ran on this machine's CPU
    assert report["stamp"].startswith("EMULATED PROVIDERS: the engines ran on ")
    assert {c["hardware"] for c in report["cards"]} == {"emulated"}
    assert {c["status"] for c in report["cards"]} == {"done"}
    assert {c["card"] for c in report["cards"]} == {"runpod:NVIDIA A40", "vastai:RTX 4090"}
    # ranked by $/Mtok at each concurrency, both cards priced
    for table in report["tables"]:
        assert sorted(table["ranking"]) == ["runpod:NVIDIA A40", "vastai:RTX 4090"]
        costs = [r["usd_per_mtok"] for r in table["rows"] if r["usd_per_mtok"] is not None]
        assert costs == sorted(costs)
    assert report["stamp"] in (matrix_dir / "matrix.md").read_text()
    state = json.loads((matrix_dir / "matrix.json").read_text())
    ledger = Ledger(Path(engine_env["TAILPOD_HOME"]))
    for entry in state["cards"].values():
        for tag in entry["pods"]:
            proof = json.loads((results / tag / "billing-proof.json").read_text())
            assert proof["proven"] is True
            record = ledger.get(tag)
            assert record is not None and record.status == "terminated"
        run = json.loads((Path(entry["run_dir"]) / "run.json").read_text())
        assert run["measured_from"] == "pod"
        assert run["image"]["digest"] == state["image"]["digest"]
    home = Path(engine_env["TAILPOD_HOME"])
    assert leftover_engines(str(home / "models")) == set()
