"""`tailpod logs TAG`: the engine log (a local pod's file; a pod's through its agent), the
container log through the provider; `logs parse` refuses a file with no engine line."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tailpod.agent_client.driver import PodAgent, SubprocessTransport
from tailpod.cli.logs import _new_lines, engine_lines
from tailpod.cli.main import app
from tailpod.config import load_settings
from tailpod.ledger import Ledger, PodRecord
from tailpod.pods.engine_log import AgentEngineLog, LocalEngineLog
from tailpod.provision.base import PodSpec
from tailpod.provision.providers import get_provider

LINES = [f"INFO line {i:03d} of the engine" for i in range(300)]


def _engine_state(state_dir: Path, log: Path) -> None:
    state_dir.mkdir(parents=True, exist_ok=True)
    (state_dir / "engine.json").write_text(json.dumps({
        "pid": 999999, "pgid": 999999, "start_time": 0, "log": str(log), "log_offset": 0,
        "host": "127.0.0.1", "port": 1, "label": "plain", "health_path": "/health"}))


@pytest.fixture()
def local_pod(tailpod_home: Path, tmp_path: Path) -> str:
    settings = load_settings()
    log = tmp_path / "engine-plain.log"
    log.write_text("\n".join(LINES) + "\n")
    tag = "tp-logs-local"
    _engine_state(settings.state_dir / "local" / tag, log)
    Ledger(settings.state_dir).put(PodRecord(run_tag=tag, provider="local", status="running",
                                             pod_id=f"local:{tag}"))
    return tag


def test_logs_tag_prints_the_engine_logs_last_lines(local_pod: str) -> None:
    result = CliRunner().invoke(app, ["logs", local_pod])
    assert result.exit_code == 0, result.output
    assert result.output.splitlines() == LINES[-200:]
    five = CliRunner().invoke(app, ["logs", local_pod, "--engine", "-n", "5"])
    assert five.output.splitlines() == LINES[-5:]
    both = CliRunner().invoke(app, ["logs", local_pod, "--engine", "--container"])
    assert both.exit_code == 2


def test_logs_of_an_unknown_tag_is_a_usage_error(local_pod: str) -> None:
    result = CliRunner().invoke(app, ["logs", "tp-nope"])
    assert result.exit_code == 2, result.output


def test_follow_prints_new_lines_as_they_come(tmp_path: Path) -> None:
    log = tmp_path / "e.log"
    log.write_text("a\nb\n")
    steps = iter(["c\nd", "\ne\n"])

    def sleep(_s: float) -> None:
        try:
            with open(log, "a") as fh:
                fh.write(next(steps))
        except StopIteration:
            raise KeyboardInterrupt from None

    seen: list[str] = []
    with pytest.raises(KeyboardInterrupt):
        for line in engine_lines(LocalEngineLog(log), 10, True, sleep=sleep):
            seen.append(line)
    assert seen == ["a", "b", "c", "d", "e"]


def test_engine_log_through_the_agent_transport(tmp_path: Path) -> None:
    # the same calls a cloud pod's SSH transport carries: `engine status`, then wc and tail
    state = tmp_path / "agent-state"
    log = state / "engine-plain.log"
    state.mkdir()
    log.write_text("\n".join(LINES) + "\n")
    _engine_state(state, log)
    reader = AgentEngineLog(PodAgent(SubprocessTransport(state)))
    try:
        assert reader.path == str(log)
        assert list(engine_lines(reader, 7, False)) == LINES[-7:]
    finally:
        reader.close()


def test_new_lines_after_the_overlap() -> None:
    assert _new_lines(["a", "b", "c"], ["b", "c", "d", "e"]) == ["d", "e"]
    assert _new_lines(["a"], ["x", "y"]) == ["x", "y"]
    assert _new_lines(["a", "b"], ["a", "b"]) == []


def test_container_log_through_the_provider(cloud_env: dict[str, str]) -> None:
    settings = load_settings()
    provider = get_provider("runpod", settings)
    tag = "tp-logs-cloud"
    info = provider.create(PodSpec(
        run_tag=tag, gpu_preference=["A40"], image="img",
        start_command=["sh", "-c", "echo container-says-hello; echo second line; sleep 30"]))
    try:
        Ledger(settings.state_dir).put(PodRecord(run_tag=tag, provider="runpod",
                                                 status="running", pod_id=info.pod_id))
        deadline = time.time() + 20
        while time.time() < deadline:
            lines = provider.container_log(info.pod_id) or []  # type: ignore[attr-defined]
            if "second line" in lines:
                break
            time.sleep(0.2)
        result = CliRunner().invoke(app, ["logs", tag, "--container"])
        assert result.exit_code == 0, result.output
        out = result.output.splitlines()
        assert "container-says-hello" in out and "second line" in out
    finally:
        provider.terminate(info.pod_id)


def test_logs_parse_without_an_engine_line_warns_and_fails(tmp_path: Path,
                                                          engine_logs_dir: Path) -> None:
    junk = tmp_path / "not-an-engine.log"
    junk.write_text("hello\nthis is a shell transcript\n")
    result = CliRunner().invoke(app, ["logs", "parse", "--engine", "vllm", str(junk)])
    assert result.exit_code == 1, result.output
    assert "warning:" in result.stderr and "no line" in result.stderr
    assert json.loads(result.stdout)["lines"] == []
    real = engine_logs_dir / "vllm_v0_llama31_8b_3090_maxlen29k_2024-12.txt"
    ok = CliRunner().invoke(app, ["logs", "parse", "--engine", "vllm", str(real)])
    assert ok.exit_code == 0, ok.output
    assert json.loads(ok.stdout)["lines"]
