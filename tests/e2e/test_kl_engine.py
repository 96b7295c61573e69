"""The KL evaluation on the real CPU vLLM engine: one `up`, one relaunch per candidate, one `down`.

Candidates are copies of a tiny checkpoint: an identical one, and two whose weights were rounded to
a 6-bit and a 3-bit grid. The identical copy must score KL 0 and full agreement, the rounded ones
KL > 0, growing with the rounding.
"""

from __future__ import annotations

import json
import socket
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from tailpod.cli.main import app
from tailpod.config import load_settings
from tailpod.engines.tiny_checkpoint import build_checkpoint
from tailpod.ledger import Ledger
from tailpod.sandbox.podhost import free_port
from tests.unit.measure.perturb import perturbed_copy

pytestmark = [pytest.mark.engine, pytest.mark.timeout(1800)]
runner = CliRunner()


def processes_mentioning(text: str) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if text in cmdline:
            found.append(int(entry.name))
    return found


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("kl-models")
    ref = build_checkpoint(root / "bf16", "target")
    return {
        "ref": ref,
        "copy": perturbed_copy(ref, root / "copy", None),
        "q6": perturbed_copy(ref, root / "q6", 6),
        "q3": perturbed_copy(ref, root / "q3", 3),
    }


@pytest.fixture(scope="module")
def evaluation(engine_env: dict[str, str], checkpoints: dict[str, Path]) -> dict[str, Any]:
    port = free_port()
    result = runner.invoke(app, [
        "eval", "kl", "--provider", "local", "--reference", str(checkpoints["ref"]),
        "--candidate", str(checkpoints["copy"]), "--candidate", str(checkpoints["q6"]),
        "--candidate", str(checkpoints["q3"]), "--max-tokens", "12", "--top-k", "20",
        "--context-length", "512", "--port", str(port), "--json",
    ], catch_exceptions=False)  # fmt: skip
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout[result.stdout.index("{") :])
    return {"doc": doc, "port": port, "home": Path(engine_env["TAILPOD_HOME"]),
            "results": Path(engine_env["TAILPOD_RESULTS_DIR"])}  # fmt: skip


def test_the_reference_is_scored_on_its_own_greedy_tokens(evaluation: dict[str, Any]) -> None:
    doc = evaluation["doc"]
    ref = doc["reference"]
    assert doc["method"] == "vllm:prompt_logprobs" and doc["measured_from"] == "pod"
    assert doc["provider"] == "local" and doc["run_tag"] and doc["engine"]["name"] == "vllm"
    assert doc["engine"]["version"]  # from the engine's own startup log or /version
    assert ref["positions"] == 12 * len(doc["prompts"])
    # Prefill and decode kernels agree on the greedy token nearly everywhere (the noise floor).
    assert ref["top1_is_greedy_token"] >= 0.9
    assert ref["argv"] and "--enforce-eager" in ref["argv"]


def test_an_identical_copy_scores_zero(evaluation: dict[str, Any]) -> None:
    copy = evaluation["doc"]["candidates"][0]
    assert copy["label"] == "copy" and copy["skipped_prompts"] == []
    assert copy["kl"]["max"] <= 1e-6 and copy["kl"]["infinite"] == 0
    assert copy["top1_agreement"] == 1.0
    assert copy["diverged_prompts"] == 0


def test_rounded_weights_score_above_zero_and_grow_with_the_rounding(
    evaluation: dict[str, Any],
) -> None:
    _, q6, q3 = evaluation["doc"]["candidates"]
    assert (q6["label"], q3["label"]) == ("q6", "q3")
    assert q6["kl"]["mean"] > 1e-6
    assert q3["kl"]["mean"] > q6["kl"]["mean"]
    assert q3["kl"]["p90"] >= q6["kl"]["p90"]
    assert q3["top1_agreement"] < 1.0
    assert q3["top1_agreement"] <= q6["top1_agreement"]
    assert q3["diverged_prompts"] >= 1
    for c in (q6, q3):
        assert c["positions"] == evaluation["doc"]["reference"]["positions"]
        assert all(d["tokenizer_match"] for d in c["first_divergence"])


def test_the_run_directory_and_report(evaluation: dict[str, Any]) -> None:
    doc = evaluation["doc"]
    run_dir = evaluation["results"] / doc["run_id"]
    assert doc["run_id"] == f"{doc['run_tag']}-kl"
    run = json.loads((run_dir / "run.json").read_text())
    assert [a["label"] for a in run["arms"]] == ["reference", "copy", "q6", "q3"]
    assert all(a["startup"]["facts"]["kv_tokens"] > 0 for a in run["arms"])
    assert run["engine"]["version"] == doc["engine"]["version"]
    result = runner.invoke(app, ["report", str(run_dir)])
    assert result.exit_code == 0, result.output
    report = (run_dir / "report.md").read_text()
    assert "## KL vs reference" in report and "| q3 |" in report


def test_the_engine_it_started_is_down_and_proven(
    evaluation: dict[str, Any], checkpoints: dict[str, Path]
) -> None:
    ledger = Ledger(load_settings().state_dir)
    assert ledger.active() == []
    (record,) = ledger.all()
    assert record.status == "terminated"
    proof = evaluation["results"] / record.run_tag / "billing-proof.json"
    assert json.loads(proof.read_text())["proven"] is True
    with socket.socket() as s:
        assert s.connect_ex(("127.0.0.1", evaluation["port"])) != 0
    for path in checkpoints.values():
        assert processes_mentioning(str(path)) == []
