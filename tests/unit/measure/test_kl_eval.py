"""The laptop-side orchestration: arms in order on one pod, kl.json + run.json, the CLI, the report."""

from __future__ import annotations

import json
import tempfile
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from tailpod.agent_client.driver import ArmStart, PodAgent, SubprocessTransport
from tailpod.cli.main import app
from tailpod.config import load_settings
from tailpod.engines.base import EngineConfig
from tailpod.ledger import Ledger, PodRecord
from tailpod.measure.hosts import AgentSweepHost
from tailpod.measure.kl_eval import (
    EndpointLogprobSource,
    KlArm,
    PodLogprobSource,
    kl_run_id,
    label_arms,
    load_prompts,
    run_kl_eval,
    with_max_logprobs,
)
from tailpod.measure.plan import Arm
from tailpod.measure.sweep import RunContext, RunDirectory
from tailpod.results.io import load_run, write_run
from tailpod.results.report import write_report
from tailpod.sandbox.kl_engine import FakeEngine, FakeModel, serve
from tests.helpers.run_builder import build_run

runner = CliRunner()
PROMPTS = load_prompts(classes=["prose", "code"])[:3]
MODELS = {"ref": 0.0, "copy": 0.0, "weak": 0.4, "strong": 2.0}


@pytest.fixture()
def endpoints() -> Iterator[dict[str, str]]:
    with ExitStack() as stack:
        yield {name: stack.enter_context(serve(FakeEngine(FakeModel(noise=noise))))
               for name, noise in MODELS.items()}  # fmt: skip


def test_labels_are_unique_and_the_reference_comes_first() -> None:
    arms = label_arms("/m/bf16", ["/m/fp8/", "/x/fp8", "hub/org/Model NVFP4"])
    assert [a.label for a in arms] == ["reference", "fp8", "fp8-2", "Model-NVFP4"]
    assert arms[1].model == "/m/fp8/"


def test_vllm_gets_max_logprobs_only_past_its_default() -> None:
    cfg = EngineConfig(engine="vllm", model="m")
    assert with_max_logprobs(cfg, 20) == cfg
    assert with_max_logprobs(cfg, 64).extra_args == ("--max-logprobs=64",)
    assert with_max_logprobs(EngineConfig(engine="sglang", model="m"), 64).extra_args == ()


def test_run_ids_never_overwrite_an_earlier_evaluation(tmp_path: Path) -> None:
    assert kl_run_id(tmp_path, "tp-1") == "tp-1-kl"
    (tmp_path / "tp-1-kl").mkdir()
    (tmp_path / "tp-1-kl" / "kl.json").write_text("{}")
    assert kl_run_id(tmp_path, "tp-1") == "tp-1-kl-2"


def test_endpoints_kl_grows_with_the_perturbation(
    endpoints: dict[str, str], tmp_path: Path
) -> None:
    arms = [KlArm("reference", "ref", endpoints["ref"])] + [
        KlArm(name, name, endpoints[name]) for name in ("copy", "weak", "strong")
    ]
    run_dir = RunDirectory(tmp_path / "r")
    ctx = RunContext(run_id="r", provider="endpoints", model="ref", engine="vllm")
    lines: list[str] = []
    doc = run_kl_eval(EndpointLogprobSource("vllm"), arms, PROMPTS, run_dir, ctx, top_k=5,
                      max_tokens=6, log=lines.append)  # fmt: skip
    on_disk = json.loads((tmp_path / "r" / "kl.json").read_text())
    assert on_disk == json.loads(json.dumps(doc))
    assert doc["finished_at"] and doc["measured_from"] == "pod" and doc["engine"]["version"] == "0.0.fake"
    assert doc["reference"]["positions"] == 18 and doc["reference"]["top1_is_greedy_token"] == 1.0
    assert doc["method"] == "vllm:prompt_logprobs" and "lower bound" in doc["estimator"]
    by = {c["label"]: c for c in doc["candidates"]}
    assert by["copy"]["kl"]["max"] == 0.0 and by["copy"]["top1_agreement"] == 1.0
    assert by["copy"]["top_k"] == 5 and by["copy"]["estimate"].startswith("lower bound")
    assert 0 < by["weak"]["kl"]["mean"] < by["strong"]["kl"]["mean"]
    assert by["strong"]["top1_agreement"] < 1.0
    assert by["strong"]["kl"]["p99"] <= by["strong"]["kl"]["max"]
    for name in ("reference", "copy", "weak", "strong"):
        assert (tmp_path / "r" / f"logprobs-{name}.json").is_file()
    run = load_run(tmp_path / "r")  # a valid run directory, with the arms it served
    assert [a.label for a in run.meta.arms] == ["reference", "copy", "weak", "strong"]
    assert run.meta.finished_at and run.cells == []
    assert any("strong" in line for line in lines)


class RecordingAgent(PodAgent):
    """The real pod agent as a child process; every `probe logprobs` request is kept."""

    def __init__(self, state_dir: Path) -> None:
        super().__init__(SubprocessTransport(state_dir))
        self.requests: list[dict[str, Any]] = []

    def logprobs(self, request: dict[str, Any], timeout_s: float = 7200) -> dict[str, Any]:
        self.requests.append(request)
        return super().logprobs(request, timeout_s)


class FakePodHost(AgentSweepHost):
    """A pod whose engine 'relaunch' swaps the fake engine's model; the agent measures it."""

    measured_from = "pod"

    def __init__(self, engine: FakeEngine, url: str, ledger: Ledger | None = None,
                 run_tag: str | None = None) -> None:
        self.engine, self.url, self.ledger, self.run_tag = engine, url, ledger, run_tag
        self.restarts: list[EngineConfig] = []
        self._tmp = tempfile.TemporaryDirectory()
        self.agent = RecordingAgent(Path(self._tmp.name))
        self.measurer = self.agent

    @property
    def base_url(self) -> str:
        return self.url

    def restart(self, arm: Arm) -> ArmStart:
        self.restarts.append(arm.config)
        self.engine.model = FakeModel(noise=MODELS[Path(arm.config.model).name])
        if self.ledger is not None and self.run_tag:
            self.ledger.update(self.run_tag, engine=arm.config.to_json())
        return ArmStart(startup={"engine": "vllm", "facts": {"engine_version": "9.9"},
                                 "lines": ["x"]}, argv=["serve", arm.config.model], startup_s=1.0)


def test_pod_source_relaunches_per_arm_with_the_candidate_model(tmp_path: Path) -> None:
    engine = FakeEngine(FakeModel())
    with serve(engine) as url:
        host = FakePodHost(engine, url)
        base = EngineConfig(engine="vllm", model="/m/ref", served_name="fake", context_length=512)
        source = PodLogprobSource(host, base, top_k=32)
        arms = label_arms("/m/ref", ["/m/weak", "/m/strong"])
        doc = run_kl_eval(source, arms, PROMPTS, RunDirectory(tmp_path / "p"),
                          RunContext(run_id="p", provider="local", model="/m/ref", engine="vllm"),
                          top_k=32, max_tokens=5, log=lambda _: None)  # fmt: skip
    assert [c.model for c in host.restarts] == ["/m/ref", "/m/weak", "/m/strong"]
    assert all(c.spec.plain and c.context_length == 512 for c in host.restarts)
    assert all("--max-logprobs=32" in c.extra_args for c in host.restarts)
    assert all(r["top_k"] == 32 for r in host.agent.requests)
    assert host.agent.requests[0]["reference"] is None
    assert all(r["reference"] for r in host.agent.requests[1:])
    assert doc["reference"]["engine_version"] == "9.9" and doc["reference"]["argv"][1] == "/m/ref"
    assert [c["label"] for c in doc["candidates"]] == ["weak", "strong"]
    assert doc["candidates"][0]["kl"]["mean"] < doc["candidates"][1]["kl"]["mean"]
    run = json.loads((tmp_path / "p" / "run.json").read_text())
    assert [a["engine_config"]["model"] for a in run["arms"]] == ["/m/ref", "/m/weak", "/m/strong"]
    assert run["arms"][1]["startup"]["facts"]["engine_version"] == "9.9"


@pytest.fixture()
def results_env(tailpod_home: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    results = tailpod_home / "results"
    monkeypatch.setenv("TAILPOD_RESULTS_DIR", str(results))
    return results


def test_cli_on_a_running_pod_relaunches_and_restores_the_original(
    results_env: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings = load_settings()
    ledger = Ledger(settings.state_dir)
    original = EngineConfig(engine="vllm", model="/m/ref", served_name="fake")
    ledger.put(PodRecord(run_tag="tp-test", provider="local", status="running",
                         engine=original.to_json(), gpu="local CPU", price_per_hr=0.0))  # fmt: skip
    engine = FakeEngine(FakeModel())
    with serve(engine) as url:
        host = FakePodHost(engine, url, ledger, "tp-test")
        monkeypatch.setattr("tailpod.measure.hosts.sweep_host", lambda *a, **k: host)
        result = runner.invoke(app, ["eval", "kl", "--candidate", "/m/weak", "--candidate",
                                     "/m/copy", "--max-tokens", "4", "--prompt-classes", "code",
                                     "--top-k", "4"])  # fmt: skip
    assert result.exit_code == 0, result.output
    assert [c.model for c in host.restarts] == ["/m/ref", "/m/weak", "/m/copy", "/m/ref"]
    assert host.restarts[-1] == original  # --restore: the pod serves what it served before
    run_dir = results_env / "tp-test-kl"
    doc = json.loads((run_dir / "kl.json").read_text())
    assert doc["run_tag"] == "tp-test" and doc["provider"] == "local"
    assert doc["reference"]["model"] == "/m/ref"  # default: what the pod was serving
    assert {p["class"] for p in doc["prompts"]} == {"code"}
    assert "KL vs reference" in result.output and "weak" in result.output


def test_cli_against_running_endpoints_then_report(
    endpoints: dict[str, str], results_env: Path
) -> None:
    result = runner.invoke(app, [
        "eval", "kl", "--reference-url", endpoints["ref"], "--candidate-url", endpoints["weak"],
        "--candidate-url", endpoints["strong"], "--candidate", "weak-q", "--candidate", "strong-q",
        "--max-tokens", "5", "--top-k", "5", "--engine", "vllm", "--json",
    ])  # fmt: skip
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    assert [c["label"] for c in doc["candidates"]] == ["weak-q", "strong-q"]
    run_dir = results_env / doc["run_id"]
    report = runner.invoke(app, ["report", str(run_dir)])
    assert report.exit_code == 0, report.output
    text = (run_dir / "report.md").read_text()
    assert "## KL vs reference" in text and "| strong-q |" in text
    assert "## Throughput" not in text and not list(run_dir.glob("*.png"))
    mean = doc["candidates"][1]["kl"]["mean"]
    assert f"{mean:.3g}" in text


def test_report_of_a_benchmark_run_gains_a_kl_section(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tailpod.results import report

    # report.md is what this test reads; the PNGs are tests/unit/results/test_report.py's business.
    monkeypatch.setattr(report, "write_plots", lambda _an, _path: None)
    run = build_run({"plain": {1: [10.0, 11.0]}}, run_id="bench")
    run_dir = write_run(run, tmp_path / "bench")
    before = write_report([run_dir]).read_text()
    assert "KL vs reference" not in before
    kl_doc: dict[str, Any] = {
        "run_id": "bench", "top_k": 20, "max_tokens": 64, "method": "vllm:prompt_logprobs",
        "estimator": "E", "prompts": [{"id": "a"}],
        "reference": {"model": "bf16", "positions": 64, "top1_is_greedy_token": 0.99},
        "candidates": [{
            "label": "nvfp4", "model": "nvfp4", "kl": {"mean": 0.0123, "p90": 0.03, "p99": 0.2,
                                                     "max": 0.5, "infinite": 0},
            "top1_agreement": 0.95, "ref_mass_covered": {"mean": 0.9}, "prompts": 1,
            "diverged_prompts": 1, "first_divergence_median": 33,
            "by_class": {"prose": {"positions": 64, "kl_mean": 0.0123, "kl_p90": 0.03,
                                   "top1_agreement": 0.95}},
        }],
    }  # fmt: skip
    (run_dir / "kl.json").write_text(json.dumps(kl_doc))
    after = write_report([run_dir]).read_text()
    assert after.startswith(before.rstrip("\n")[:200])  # the benchmark report is unchanged
    assert "## Throughput" in after and "## KL vs reference" in after
    assert "| nvfp4 | `nvfp4` | 0.0123 | 0.03 | 0.2 | 0.5 | 95.0% | 90.0% | 1/1 (median at token 33) |" in after
    assert "| nvfp4 | prose | 64 | 0.0123 | 0.03 | 95.0% |" in after


def test_cli_refuses_what_it_cannot_do(results_env: Path) -> None:
    none = runner.invoke(app, ["eval", "kl", "--reference", "x"])
    assert none.exit_code != 0 and "--candidate" in none.output
    half = runner.invoke(app, ["eval", "kl", "--reference-url", "http://127.0.0.1:1"])
    assert half.exit_code != 0 and "--candidate-url" in half.output
    no_pod = runner.invoke(app, ["eval", "kl", "--candidate", "c"])
    assert no_pod.exit_code != 0 and "nothing is running" in no_pod.output
