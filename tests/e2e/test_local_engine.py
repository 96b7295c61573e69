"""The walking skeleton on the real CPU vLLM engine: up → status → benchmark (gated arms, with the
serve tax) → down.

One engine for the whole module: `up` starts it, the sweeps relaunch it per arm, `down` ends it.
The tests run in file order and each builds on the pod the previous one left. The gated benchmark
also measures the serve tax (`--serve-tax`: each arm's bare offline decode beside its served
cells), so its arms pay the bare engine start and nothing more: no second pod, no second sweep.
"""

from __future__ import annotations

import json
import socket
import urllib.request
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from tailpod.cli.main import app
from tailpod.config import load_settings
from tailpod.engines.base import EngineConfig, SpecArm
from tailpod.ledger import Ledger
from tailpod.measure.hosts import LocalSweepHost
from tailpod.measure.plan import Arm, SweepPlan
from tailpod.measure.sweep import RunContext, RunDirectory, run_sweep
from tailpod.results.io import load_run
from tailpod.sandbox.podhost import free_port

pytestmark = pytest.mark.engine
runner = CliRunner()


def invoke(*args: str) -> Any:
    result = runner.invoke(app, list(args), catch_exceptions=False)
    return result


def rows(run_dir: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (run_dir / "rows.jsonl").read_text().splitlines()]


@pytest.fixture(scope="module")
def pod(
    engine_env: dict[str, str], tiny_models: dict[str, Path], leftover_engines: Any
) -> dict[str, Any]:
    # `leftover_engines` is requested first so it notes the engines that ran before this module.
    port = free_port()
    result = invoke(
        "up",
        "--provider",
        "local",
        "--model",
        str(tiny_models["target"]),
        "--port",
        str(port),
        "--json",
    )
    assert result.exit_code == 0, result.output
    record = json.loads(result.stdout)
    return {
        "record": record,
        "port": port,
        "home": Path(engine_env["TAILPOD_HOME"]),
        "results": Path(engine_env["TAILPOD_RESULTS_DIR"]),
    }


def test_up_records_a_serving_engine_and_its_startup_facts(pod: dict[str, Any]) -> None:
    record = pod["record"]
    assert record["status"] == "running" and record["provider"] == "local"
    startup = record["extra"]["startup"]
    assert startup["facts"]["kv_tokens"] > 0  # parsed from the real `CPU KV cache size: N tokens`
    assert any("KV cache size" in line for line in startup["lines"])
    with urllib.request.urlopen(f"http://127.0.0.1:{pod['port']}/v1/models", timeout=10) as resp:
        assert json.load(resp)["data"][0]["id"] == "tailpod"


def test_status_reports_health_and_endpoint(pod: dict[str, Any]) -> None:
    result = invoke("status", "--json")
    assert result.exit_code == 0, result.output
    (row,) = json.loads(result.stdout)["pods"]
    assert row["healthy"] is True
    assert row["endpoint"] == f"http://127.0.0.1:{pod['port']}"
    assert row["engine"] == "vllm" and row["arm"] == "plain"


def test_a_second_up_on_the_same_port_is_refused(
    pod: dict[str, Any], tiny_models: dict[str, Path]
) -> None:
    result = runner.invoke(
        app, ["up", "--model", str(tiny_models["target"]), "--port", str(pod["port"])]
    )
    assert result.exit_code == 2
    assert "already in use" in result.output
    assert len(Ledger(pod["home"]).active()) == 1


def test_benchmark_plain_vs_ngram_is_gated_and_counts_tokens_from_usage(
    pod: dict[str, Any],
) -> None:
    result = invoke(
        "benchmark", "--spec-k", "0,2", "--spec-method", "ngram", "--concurrency", "1,2",
        "--reps", "1", "--max-tokens", "24", "--no-extend-k", "--serve-tax",
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    run_dir = pod["results"] / pod["record"]["run_tag"]
    run = json.loads((run_dir / "run.json").read_text())
    arms = {a["label"]: a for a in run["arms"]}
    assert set(arms) == {"plain", "ngram-k2"}
    pod["benchmark_output"] = result.output
    assert arms["ngram-k2"]["gate"]["status"] == "pass"
    assert arms["ngram-k2"]["gate"]["method"] == "token_ids"
    assert not arms["ngram-k2"]["void"]
    for arm in arms.values():
        assert arm["startup"]["facts"]["kv_tokens"] > 0 and arm["startup"]["lines"]
    spec_line = " ".join(arms["ngram-k2"]["argv"])
    assert '"method":"ngram"' in spec_line and '"num_speculative_tokens":2' in spec_line
    assert run["measured_from"] == "pod" and run["finished_at"]
    assert run["engine"]["version"] == "0.32.0"  # the engine's own /version, not a guess
    assert run["pod"]["machine"]["cpu_count"] and run["pod"]["machine"]["gpus"] == []
    all_rows = rows(run_dir)
    requests = [r for r in all_rows if r["kind"] == "request"]
    cells = [r for r in all_rows if r["kind"] == "cell"]
    assert {(c["arm"], c["concurrency"]) for c in cells} == {
        ("plain", 1),
        ("plain", 2),
        ("ngram-k2", 1),
        ("ngram-k2", 2),
    }
    assert requests and all(r["ok"] and r["completion_tokens"] == 24 for r in requests)
    assert all(c["failed"] == 0 and c["output_tok_s"] > 0 for c in cells)
    for cell in cells:
        if cell["arm"] == "plain":
            assert cell["acceptance"] is None
        else:
            acc = cell["acceptance"]
            assert acc["drafts"] > 0 and acc["accepted"] > 0
            assert 1.0 <= acc["acceptance_length"] <= 3.0
            assert 0.0 < acc["acceptance_rate"] <= 1.0
    # The engine's own counters saw at least what the per-cell deltas add up to.
    with urllib.request.urlopen(f"http://127.0.0.1:{pod['port']}/metrics", timeout=10) as resp:
        metrics = resp.read().decode()
    engine_accepted = sum(
        float(line.rsplit(" ", 1)[1]) for line in metrics.splitlines()
        if line.startswith("vllm:spec_decode_num_accepted_tokens_total")
    )  # fmt: skip
    ours = sum(c["acceptance"]["accepted"] for c in cells if c["acceptance"])
    assert 0 < ours <= engine_accepted


def test_serve_tax_is_measured_per_arm(pod: dict[str, Any]) -> None:
    """The gated benchmark's --serve-tax: each arm's bare offline decode beside its served cells."""
    assert "one more engine start per arm" in pod["benchmark_output"]  # the plan says so first
    run_dir = pod["results"] / pod["record"]["run_tag"]
    run = json.loads((run_dir / "run.json").read_text())
    assert run["plan"]["serve_tax"] is True
    assert {a["label"] for a in run["arms"]} == {"plain", "ngram-k2"}
    for arm in run["arms"]:
        tax = arm["serve_tax"]
        assert tax["status"] == "measured", tax
        # one bare row per concurrency level of the plan, each as many requests as its cell (4)
        assert sorted(row["concurrency"] for row in tax["rows"]) == [1, 2]
        for row in tax["rows"]:
            assert row["output_tokens"] == 4 * 24
            assert row["output_tok_s"] > 0 and row["tool"] == "vllm offline LLM.chat"


def test_up_relaunch_switches_the_running_engine_to_another_arm(pod: dict[str, Any]) -> None:
    tag = pod["record"]["run_tag"]
    result = invoke("up", "--relaunch", tag, "--spec-k", "1", "--spec-method", "ngram", "--json")
    assert result.exit_code == 0, result.output
    record = json.loads(result.stdout)
    assert record["run_tag"] == tag and record["engine"]["spec"]["k"] == 1
    arm = record["extra"]["arms"]["ngram-k1"]
    assert arm["startup"]["facts"]["kv_tokens"] > 0
    assert '"method":"ngram"' in " ".join(arm["argv"])
    status = json.loads(invoke("status", "--json").stdout)["pods"][0]
    assert status["healthy"] and status["arm"] == "ngram-k1"


def test_draft_model_arm_passes_and_a_planted_divergence_is_void(
    pod: dict[str, Any], tiny_models: dict[str, Path]
) -> None:
    settings = load_settings()
    ledger = Ledger(settings.home)
    record = ledger.resolve(None)
    base = replace(EngineConfig.from_json(record.engine), spec=SpecArm())
    draft = replace(
        base, spec=SpecArm(k=2, method="draft_model", draft_model=str(tiny_models["draft"]))
    )
    # A different checkpoint posing as a speculative arm: its greedy tokens cannot match plain.
    imposter = replace(base, model=str(tiny_models["draft"]), spec=SpecArm(k=1, method="ngram"))
    plan = SweepPlan(
        arms=[Arm("plain", base), Arm("draft_model-k2", draft), Arm("imposter-k1", imposter)],
        concurrency=[1], reps=1, max_tokens=16, extend_k=False,
    )  # fmt: skip
    run_dir = RunDirectory(settings.results_dir / "divergence")
    ctx = RunContext(run_id="divergence", provider="local", model=base.model, engine="vllm")
    run = run_sweep(
        plan, run_dir, LocalSweepHost(settings, ledger, record), ctx, log=lambda *_: None
    )
    arms = {a["label"]: a for a in run["arms"]}
    assert arms["draft_model-k2"]["gate"]["status"] == "pass" and not arms["draft_model-k2"]["void"]
    assert arms["imposter-k1"]["gate"]["status"] == "fail"
    assert arms["imposter-k1"]["void"] and "token" in arms["imposter-k1"]["void_reason"]
    assert arms["imposter-k1"]["gate"]["first_mismatch"]["position"] is not None
    imposter_rows = [r for r in run_dir.read_rows() if r["arm"] == "imposter-k1"]
    assert imposter_rows and all(r["void"] for r in imposter_rows)  # kept, and marked


def test_mtp_head_of_a_mimo_checkpoint(pod: dict[str, Any], tiny_models: dict[str, Path]) -> None:
    settings = load_settings()
    ledger = Ledger(settings.home)
    record = ledger.resolve(None)
    base = replace(
        EngineConfig.from_json(record.engine), model=str(tiny_models["mimo"]), spec=SpecArm()
    )
    mtp = replace(base, spec=SpecArm(k=1, method="mtp"))
    plan = SweepPlan(arms=[Arm("plain", base), Arm("mtp-k1", mtp)], concurrency=[1], reps=1,
                     max_tokens=16, extend_k=False)  # fmt: skip
    run_dir = RunDirectory(settings.results_dir / "mtp")
    ctx = RunContext(run_id="mtp", provider="local", model=base.model, engine="vllm")
    run = run_sweep(
        plan, run_dir, LocalSweepHost(settings, ledger, record), ctx, log=lambda *_: None
    )
    arms = {a["label"]: a for a in run["arms"]}
    assert arms["mtp-k1"]["gate"]["status"] == "pass"
    assert '"method":"mtp"' in " ".join(arms["mtp-k1"]["argv"])
    (cell,) = [r for r in run_dir.read_rows() if r["kind"] == "cell" and r["arm"] == "mtp-k1"]
    assert cell["acceptance"] is not None and cell["acceptance"]["drafts"] > 0
    # Speculation shares the memory budget with the target: the pool is smaller, as on a GPU.
    plain_kv = arms["plain"]["startup"]["facts"]["kv_tokens"]
    assert 0 < arms["mtp-k1"]["startup"]["facts"]["kv_tokens"] < plain_kv


def test_report_on_the_real_run(pod: dict[str, Any]) -> None:
    run_dir = pod["results"] / pod["record"]["run_tag"]
    result = invoke("report", str(run_dir))
    assert result.exit_code == 0, result.output
    report = (run_dir / "report.md").read_text()
    assert "ngram-k2" in report and "plain" in report
    assert list(run_dir.glob("*.png"))
    assert "## Serve tax (bare engine vs served endpoint)" in report
    table = report[report.index("## Serve tax") :].split("\n## ")[0]
    assert "| plain | 1 |" in table and "| ngram-k2 | 1 |" in table
    assert "best K served K=" in table and ", bare K=" in table
    analysis = json.loads(invoke("report", str(run_dir), "--json").stdout)
    assert {a["label"] for a in analysis["arms"]} == {"plain", "ngram-k2"}


def test_the_structured_class_reads_per_request_acceptance_and_validity(
    pod: dict[str, Any],
) -> None:
    """Issue 39: on the real engine, the speculative arm starts with per-request metrics; every
    structured request row says how it ended and whether it parsed and validated; the requests'
    own acceptance sums to the cell's /metrics delta. (The tools class is not run here: vLLM
    0.32 refuses a forced tool_choice without --tool-call-parser, docs/probe.md.)"""
    result = invoke(
        "benchmark", "--spec-k", "0,2", "--spec-method", "ngram", "--concurrency", "1",
        "--reps", "1", "--max-tokens", "48", "--no-extend-k", "--prompt-classes", "structured",
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    # a second benchmark on the pod writes a run directory of its own beside the first
    run_dir = max(pod["results"].glob(pod["record"]["run_tag"] + "*"),
                  key=lambda p: (p / "run.json").stat().st_mtime)
    run = json.loads((run_dir / "run.json").read_text())
    arms = {a["label"]: a for a in run["arms"]}
    argv = arms["ngram-k2"]["argv"]
    assert argv[argv.index("--per-request-spec-decode-metrics") + 1] == "summary"
    assert "--per-request-spec-decode-metrics" not in arms["plain"]["argv"]
    all_rows = rows(run_dir)
    requests = [r for r in all_rows if r["kind"] == "request"]
    assert all(r["ok"] for r in requests)
    assert {(r["arm"], r["prompt_class"]) for r in requests} == {
        ("plain", "structured"), ("ngram-k2", "structured")}
    for r in requests:
        assert r["finish_reason"] in ("stop", "length"), r
        assert isinstance(r["json_ok"], bool) and "schema_ok" in r
        if r["arm"] == "ngram-k2":
            assert r["spec_acceptance"]["source"] == "vllm_response"
    for cell in (r for r in all_rows if r["kind"] == "cell"):
        assert cell["structure"]["requests"] == cell["requests"] - cell["failed"]
        if cell["arm"] == "ngram-k2":
            per_request = cell["acceptance_per_request"]
            assert per_request["steps"] == cell["acceptance"]["drafts"]
            assert per_request["accepted"] == cell["acceptance"]["accepted"]
            assert "per_request_acceptance_mismatch" not in cell["flags"]
    # greedy ngram decodes what plain decodes: the structure gate leaves it standing
    loaded = load_run(run_dir)
    ngram = loaded.meta.arm("ngram-k2")
    assert ngram is not None and not ngram.is_void, ngram.void_text() if ngram else None


def test_down_stops_everything_and_proves_it(
    pod: dict[str, Any], tiny_models: dict[str, Path], leftover_engines: Any
) -> None:
    result = invoke("down", "--json")
    assert result.exit_code == 0, result.output
    proof = json.loads(result.stdout)
    assert proof["proven"] is True
    port = pod["port"]
    with socket.socket() as s:
        assert s.connect_ex(("127.0.0.1", port)) != 0
    # API server, EngineCore and workers all gone
    assert leftover_engines(str(tiny_models["target"].parent)) == set()
    again = runner.invoke(app, ["down"])
    assert again.exit_code == 2 and "nothing is running" in again.output
    assert Ledger(pod["home"]).active() == []
