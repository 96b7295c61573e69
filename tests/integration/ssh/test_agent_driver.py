"""The laptop-side driver against a real OpenSSH sshd standing in for a cloud pod: the agent is
uploaded once per pod (by content hash), every call of a pod goes over ONE SSH session, and a
benchmark cell (relaunch between arms included) uploads nothing the pod already holds.

Sessions are counted where they happen: sshd's own log ("Accepted publickey" per login).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

from tailpod.agent_client.build import build_agent
from tailpod.agent_client.driver import AgentError
from tailpod.config import Settings, load_settings
from tailpod.engines.base import EngineConfig, LaunchPlan
from tailpod.engines.vllm import VllmAdapter
from tailpod.ledger import Ledger, PodRecord
from tailpod.measure.hosts import RemoteSweepHost
from tailpod.measure.plan import Arm, Cell, SweepPlan
from tailpod.sandbox.sshd import SshdHost, free_port

from .conftest import open_agent

pytestmark = pytest.mark.sshd
RUN_TAG = "tp-agent-driver"


def logins(host: SshdHost) -> int:
    return host.log_path.read_text(errors="replace").count("Accepted publickey")


@pytest.fixture()
def settings(tmp_path: Path, user_key: Path) -> Settings:
    env = {"TAILPOD_HOME": str(tmp_path / "home"), "TAILPOD_SSH_KEY": str(user_key)}
    return load_settings(env=env, dotenv_path=tmp_path / "absent.env")


def test_the_agent_is_uploaded_once_per_pod_under_its_content_hash(
    agent_pod: tuple[SshdHost, Path], settings: Settings
) -> None:
    host, state = agent_pod
    built = build_agent()
    with open_agent(settings, host) as agent:
        assert agent.version()["schema_version"] == 1
        assert agent.engine_status() == {"running": False, "healthy": False, "state": None}
        uploads = list(agent.transport.uploads)  # type: ignore[attr-defined]
    assert uploads == [f"{state}/{built.name}"]
    assert (state / built.name).read_bytes() == built.path.read_bytes()
    assert logins(host) == 1  # three calls, one session
    with open_agent(settings, host) as again:  # a later session: the pod holds it already
        again.version()
        assert again.transport.uploads == []  # type: ignore[attr-defined]
    assert logins(host) == 2


def test_a_failed_verb_raises_its_kind_and_message(agent_pod: tuple[SshdHost, Path],
                                                   settings: Settings) -> None:
    host, _state = agent_pod
    with open_agent(settings, host) as agent, pytest.raises(AgentError) as info:
        agent.call("engine status", payload={"state_dir": "/x", "no_such_key": 1})
    assert info.value.kind == "usage" and info.value.exit_status == 2
    assert "no_such_key" in info.value.message


class SyntheticAdapter(VllmAdapter):
    """vLLM's adapter, whose launch plan serves the synthetic OpenAI server instead."""

    def __init__(self, port: int) -> None:
        self.port = port

    def launch_plan(self, cfg: EngineConfig, python: str = "python3", **_: Any) -> LaunchPlan:
        argv = [sys.executable, "-m", "tailpod.sandbox.synthetic_server", "--port",
                str(self.port), "--model", cfg.served_name, "--rate", "2000",
                "--fixed-tokens", "8"]  # fmt: skip
        return LaunchPlan(argv=argv)


class ForgetfulLedger(Ledger):
    """Keeps everything but what a relaunch writes into `extra`: the relaunch's facts must come
    back from the call itself, never from the ledger."""

    def update(self, run_tag: str, **fields: Any) -> PodRecord:
        if fields.get("event") == "engine-relaunched":
            fields.pop("extra", None)
        return super().update(run_tag, **fields)


def test_a_cloud_benchmark_cell_uploads_nothing_and_uses_one_session(
    agent_pod: tuple[SshdHost, Path], settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    host, state = agent_pod
    port = free_port()
    monkeypatch.setattr("tailpod.pods.cloud.get_adapter", lambda _e: SyntheticAdapter(port))
    with open_agent(settings, host) as agent:  # `up` left the agent on the pod
        agent.version()
    before = logins(host)

    ledger = ForgetfulLedger(settings.state_dir)
    served = EngineConfig(engine="vllm", model="/m/other", served_name="tiny", port=port)
    ledger.put(PodRecord(run_tag=RUN_TAG, provider="runpod", status="running",
                         ssh={"host": host.host, "port": host.port, "user": host.user},
                         engine=served.to_json()))  # fmt: skip
    arm = Arm("plain", EngineConfig(engine="vllm", model="/m/tiny", served_name="tiny", port=port))
    plan = SweepPlan(arms=[arm], concurrency=[2], reps=1, prompt_classes=["prose"],
                     max_tokens=8, requests_per_cell=4)  # fmt: skip
    said: list[str] = []
    sweep = RemoteSweepHost(settings, ledger, ledger.get(RUN_TAG),  # type: ignore[arg-type]
                            lambda _f, line: said.append(line))
    # The SSH wait is said before it starts (it can last 60 s; issue 27: it was silent).
    assert said and said[0].startswith("connecting to ") and "over SSH" in said[0]
    try:
        started = sweep.restart(arm)  # another arm serves: the relaunch, over the same session
        rows = sweep.run_cells(arm, [Cell("plain", 2, 3, "prose")], plan, "r1")
        sweep.pod.engine_stop()
    finally:
        sweep.close()

    assert started.startup_s > 0 and started.argv[:3] == [sys.executable, "-m",
                                                          "tailpod.sandbox.synthetic_server"]
    assert started.checkpoints["model"]["ref"] == "/m/tiny"
    assert sweep.pod.transport.uploads == []  # type: ignore[attr-defined]
    assert logins(host) - before == 1
    cell = [r for r in rows if r["kind"] == "cell"]
    assert len(cell) == 1 and cell[0]["cell"] == "plain|c2|r3|prose" and cell[0]["rep"] == 3
    assert cell[0]["requests"] == 4 and cell[0]["failed"] == 0
    assert all(r["rep"] == 3 for r in rows)
    record = json.loads(json.dumps(ledger.get(RUN_TAG).engine))  # type: ignore[union-attr]
    assert record["model"] == "/m/tiny"  # the ledger still learns which arm serves
