"""`tailpod demo --lanes`: the sweep on a sandbox pod with the CPU engine, decide, the two lanes
behind HAProxy on the pod measured beside the static arms, and a proven down; the run directory
holds decision.json and lanes.json, and the report says what a CPU does and does not show."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from tailpod.agent.bootstrap import haproxy
from tailpod.cli.main import app
from tailpod.sandbox.podhost import free_port
from tailpod.sandbox.sshd import sshd_available

pytestmark = [
    pytest.mark.engine,
    pytest.mark.slow,  # five engine starts: 136 s on a quiet 2-core box, 476 s under load
    pytest.mark.skipif(not sshd_available(), reason="OpenSSH sshd is not installed"),
    pytest.mark.skipif(haproxy.find_haproxy() is None, reason="haproxy is not installed"),
]


def test_demo_lanes_decides_deploys_measures_and_leaves_nothing(
        engine_env: dict[str, str], leftover_engines: Any) -> None:
    port = free_port()
    res = CliRunner().invoke(app, ["demo", "--lanes", "--port", str(port), "--spec-k", "0,2",
                                   "--concurrency", "1,2", "--max-tokens", "16"],
                             catch_exceptions=False)
    out = res.output
    assert res.exit_code == 0, out[-3000:]
    assert "0 resources billing" in out and "demo done" in out
    results = Path(engine_env["TAILPOD_RESULTS_DIR"])
    (run_dir,) = [d for d in results.iterdir() if (d / "billing-proof.json").exists()]
    assert json.loads((run_dir / "billing-proof.json").read_text())["proven"] is True
    decision = json.loads((run_dir / "decision.json").read_text())
    forced = run_dir / "lanes-deployment.json"
    deployment = (json.loads(forced.read_text()) if forced.exists()
                  else decision["deployment"])
    assert deployment["kind"] == "lanes"
    lanes = json.loads((run_dir / "lanes.json").read_text())
    assert lanes["admission_limit"] == deployment["admission_limit"]
    assert lanes["counts_final"] is True and lanes["gate"]["status"] == "pass"
    run = json.loads((run_dir / "run.json").read_text())
    entry = next(a for a in run["arms"] if a["label"] == "deploy-lanes")
    assert entry["gate"]["status"] == "pass"
    rows = [json.loads(line) for line in (run_dir / "rows.jsonl").read_text().splitlines()]
    cells = [r for r in rows if r.get("kind") == "cell" and r["arm"] == "deploy-lanes"]
    assert sorted(c["concurrency"] for c in cells) == [1, 2]
    # lanes.json's final counts are HAProxy's after the last deploy-lanes cell
    last = cells[-1]["lane_counts"]
    assert {n: row["requests"] for n, row in lanes["lanes"].items()} == {
        n: c["stot"] for n, c in last.items()}
    assert lanes["lanes"]["spec"]["requests"] > 0
    assert lanes["lanes"]["spec"]["max_in_flight"] <= deployment["admission_limit"]
    # the deployment was compared with the per-band best in the decision over the whole run
    gaps = decision["deployment_gap"]
    assert {g["arm"] for g in gaps} >= {"deploy-lanes"}, gaps
    print(f"demo --lanes: deployment {'forced by the demo' if forced.exists() else 'decided'}"
          f" ({decision['deployment'].get('kind')} decided), admission limit "
          f"{deployment['admission_limit']}; lanes.json requests "
          f"{ {n: row['requests'] for n, row in lanes['lanes'].items()} }; starts "
          f"{ {a['label']: [s.get('startup_s') for s in a['starts']] for a in run['arms']} }")
    report = (run_dir / "report.md").read_text()
    assert "what these numbers do and do not show" in report
    assert leftover_engines(str(Path(engine_env["TAILPOD_HOME"]))) == set()
