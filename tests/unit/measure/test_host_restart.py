"""One restart for every sweep host (issue 24): the arm `up` left serving is reused from its start
in the ledger, anything else goes to the pod kind's relaunch, through the host's own session."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tailpod.agent_client.driver import ArmStart
from tailpod.config import load_settings
from tailpod.engines.base import EngineConfig
from tailpod.ledger import Ledger, PodRecord
from tailpod.measure.hosts import AgentSweepHost
from tailpod.measure.plan import Arm

SERVED = EngineConfig(engine="vllm", model="/m/tiny", served_name="tiny", port=8123)
OTHER = EngineConfig(engine="vllm", model="/m/other", served_name="tiny", port=8123)
RECORDED = {"startup": {"facts": {"kv": 1}}, "startup_s": 7.5, "argv": ["vllm", "serve"],
            "checkpoints": {"model": {"ref": "/m/tiny"}}}
RELAUNCHED = ArmStart(startup={}, argv=["relaunched"], startup_s=1.0)


class FakeKind:
    def __init__(self, healthy: bool | None) -> None:
        self.healthy = healthy
        self.relaunches: list[tuple[str, Any]] = []

    def engine_healthy(self, _settings: Any, _record: PodRecord) -> bool | None:
        return self.healthy

    def relaunch(self, _settings: Any, record: PodRecord, cfg: EngineConfig, _ledger: Ledger,
                 _progress: Any, agent: Any = None) -> ArmStart:
        self.relaunches.append((cfg.model, agent))
        return RELAUNCHED


def _host(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, provider: str,
          healthy: bool | None) -> tuple[AgentSweepHost, FakeKind]:
    settings = load_settings(env={"TAILPOD_HOME": str(tmp_path)}, dotenv_path=tmp_path / "no.env")
    ledger = Ledger(settings.state_dir)
    record = ledger.put(PodRecord(run_tag="tp-restart-1", provider=provider, status="running",
                                  engine=SERVED.to_json(),
                                  extra={"arms": {SERVED.spec.label(): RECORDED}}))
    kind = FakeKind(healthy)
    monkeypatch.setattr("tailpod.pods.kinds.kind_for",
                        lambda name: kind if name == provider else pytest.fail(name))
    beats: list[str] = []
    host = AgentSweepHost(settings, ledger, record, measurer=None)  # type: ignore[arg-type]
    host.keep_alive = lambda: beats.append("beat")  # type: ignore[method-assign]
    host.beats = beats  # type: ignore[attr-defined]
    return host, kind


@pytest.mark.parametrize("provider,healthy", [("runpod", None), ("local", True)])
def test_the_arm_up_left_serving_is_reused_from_the_ledger(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, provider: str, healthy: bool | None) -> None:
    host, kind = _host(tmp_path, monkeypatch, provider, healthy)
    started = host.restart(Arm("plain", SERVED))
    assert started == ArmStart(startup={"facts": {"kv": 1}}, argv=["vllm", "serve"],
                               startup_s=7.5, checkpoints={"model": {"ref": "/m/tiny"}})
    assert kind.relaunches == [] and host.beats == []  # type: ignore[attr-defined]


def test_another_arm_a_dead_engine_or_a_stopped_one_relaunch_through_the_session(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    host, kind = _host(tmp_path, monkeypatch, "runpod", None)
    session = object()
    host.pod_session = session  # type: ignore[assignment]
    assert host.restart(Arm("plain", OTHER)) is RELAUNCHED  # another arm
    host.engine_stopped = True  # bare_decode stopped the served engine
    assert host.restart(Arm("plain", SERVED)) is RELAUNCHED
    assert host.engine_stopped is False
    assert kind.relaunches == [("/m/other", session), ("/m/tiny", session)]
    assert host.beats == ["beat", "beat"]  # type: ignore[attr-defined]  # the pod hears each
    dead, dead_kind = _host(tmp_path / "dead", monkeypatch, "local", False)
    assert dead.restart(Arm("plain", SERVED)) is RELAUNCHED  # the ledger's arm no longer serves
    assert dead_kind.relaunches == [("/m/tiny", None)]  # local: no session, the engine is here
