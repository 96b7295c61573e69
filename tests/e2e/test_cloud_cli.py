"""`tailpod up --provider vastai` → status → benchmark → down, through the CLI, on the sandbox cloud.

Real sshd per pod, the Tailscale emulator standing in for tailscaled, the stand-in registry for the
digest, and the real CPU engine started over SSH by the on-pod runner. The on-pod benchmark also
measures the serve tax (`--serve-tax`): bare.py runs on the pod over SSH with the pod's engine
Python, after the served engine stops, and the served arm starts again for its cells; one pod and
one sweep carry both.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from tailpod.cli.main import app
from tailpod.sandbox.server import Sandbox
from tailpod.sandbox.sshd import sshd_available
from tailpod.sandbox.tailscale import DEFAULT_API_TOKEN, DEFAULT_AUTH_KEY
from tests.e2e.sandbox_world import tiny_vast_cloud

pytestmark = [
    pytest.mark.engine,
    pytest.mark.skipif(not sshd_available(), reason="OpenSSH sshd is not installed"),
]
runner = CliRunner()


@pytest.fixture(scope="module")
def cloud(engine_env: dict[str, str], tiny_models: dict[str, Path]) -> Iterator[dict[str, Any]]:
    with tiny_vast_cloud(engine_env, tiny_models) as world:
        yield world


def test_up_status_benchmark_down(cloud: dict[str, Any], leftover_engines: Any) -> None:
    sandbox: Sandbox = cloud["sandbox"]
    up = runner.invoke(app, ["up", "--context-length", "1024", "--enforce-eager", "--json"])
    assert up.exit_code == 0, up.output
    record = json.loads(up.stdout)
    tag = record["run_tag"]
    assert record["provider"] == "vastai" and record["status"] == "running"
    assert record["image"].startswith("vllm/vllm-openai@sha256:")
    assert record["endpoint"].startswith(
        "http://tailpod-" + tag
    )  # the tailnet name, not a public port
    assert record["extra"]["startup"]["facts"]["kv_tokens"] > 0
    assert record["extra"]["deadman"]["pid"]
    assert len(sandbox.billing_now()) == 1

    status = runner.invoke(app, ["status", "--json"])
    assert status.exit_code == 0, status.output
    (row,) = json.loads(status.stdout)["pods"]
    assert row["deadman"]["state"] == "armed" and row["price_per_hr"] > 0

    small = ["--spec-k", "0", "--concurrency", "1", "--reps", "1", "--max-tokens", "16"]
    refused = runner.invoke(app, ["benchmark", "--serve-tax", "--from-here"])
    assert refused.exit_code == 2 and "--from-here" in refused.output  # refused before it runs
    bench = runner.invoke(app, ["benchmark", *small, "--serve-tax", "--run-id", "on-pod"])
    assert bench.exit_code == 0, bench.output
    results = cloud["home"] / "results" / "on-pod"
    run = json.loads((results / "run.json").read_text())
    assert run["measured_from"] == "pod" and run["provider"] == "vastai"
    # What the start billed: to serving during `up`, then to the first measured token (issue 29)
    cold = run["cold_start"]
    assert 0 < cold["billed_s_to_ready"] < cold["billed_s_to_first_token"]
    assert cold["usd_to_first_token"] == round(
        cold["billed_s_to_first_token"] * cold["price_per_hr"] / 3600.0, 6)
    rows_text = (results / "rows.jsonl").read_text()
    cells = [json.loads(line) for line in rows_text.splitlines()]
    assert any(c["kind"] == "cell" and c["output_tok_s"] > 0 for c in cells)
    # The serve tax: the bare decode ran on the pod, and the served engine came back after it.
    (arm,) = run["arms"]
    assert arm["serve_tax"]["status"] == "measured", arm["serve_tax"]
    (bare,) = arm["serve_tax"]["rows"]
    assert bare["output_tokens"] == 4 * 16 and bare["output_tok_s"] > 0
    (cell,) = [c for c in cells if c["kind"] == "cell"]
    assert cell["failed"] == 0 and cell["output_tok_s"] > 0
    assert len(arm["starts"]) == 1 and arm["startup"]["facts"]["ready"]

    # --run-id resumes: every cell of this run is done, so nothing is measured again.
    resumed = runner.invoke(app, ["benchmark", *small, "--serve-tax", "--run-id", "on-pod"])
    assert resumed.exit_code == 0, resumed.output
    assert (results / "rows.jsonl").read_text() == rows_text

    # --from-here measures over the tailnet from this machine and says so on every row.
    here = runner.invoke(app, ["benchmark", *small, "--run-id", "from-here", "--from-here"])
    assert here.exit_code == 0, here.output
    here_dir = cloud["home"] / "results" / "from-here"
    assert json.loads((here_dir / "run.json").read_text())["measured_from"] == "off-pod"
    here_cells = [r for r in map(json.loads, (here_dir / "rows.jsonl").read_text().splitlines())
                  if r["kind"] == "cell"]
    assert here_cells and all(c["measured_from"] == "off-pod" for c in here_cells)
    assert "DO NOT QUOTE AGGREGATE" in here.output

    down = runner.invoke(app, ["down", tag, "--json"])
    assert down.exit_code == 0, down.output
    proof = json.loads(down.stdout)
    assert proof["proven"] is True
    assert {c["name"] for c in proof["checks"]} >= {"tailnet device removed", "gone-from-provider"}
    assert sandbox.billing_now() == []
    assert leftover_engines(str(Path(cloud["env"]["TAILPOD_MODEL"]).parent)) == set()
    again = runner.invoke(app, ["down", tag])
    assert again.exit_code == 0 and "terminated in the ledger; asking" in again.output  # re-proven

    # No key reaches an output, the ledger, the state files or the results.
    secrets = [sandbox.vast_key, DEFAULT_API_TOKEN, DEFAULT_AUTH_KEY]
    outputs = [up, status, refused, bench, resumed, here, down, again]
    for secret in secrets:
        assert not any(secret in r.output for r in outputs)
    written = [p for p in cloud["home"].rglob("*") if p.is_file()
               and (cloud["home"] / "sandbox") not in p.parents]  # the emulator's own files
    assert any(p.name == "ledger.json" for p in written) and any(p.suffix == ".jsonl"
                                                                  for p in written)
    for path in written:
        data = path.read_bytes()
        for secret in secrets:
            assert secret.encode() not in data, path
