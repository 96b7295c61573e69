"""newcomer-2026-12.md 2.8/2.9: a failed arm switch left a billing pod with no engine while the ledger
still said `running`, arm plain. Now the switch restores the last good arm, or records "no engine"
with the command that settles it, and the error says the same (pods/arm_switch.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tailpod.agent_client.driver import ArmStart
from tailpod.config import load_settings
from tailpod.engines.base import EngineConfig, SpecArm
from tailpod.errors import ConfigError, TailpodError
from tailpod.ledger import Ledger, PodRecord
from tailpod.measure.hosts import AgentSweepHost
from tailpod.measure.plan import Arm
from tailpod.pods.arm_switch import ArmSwitchFailed, switch_arm

TAG = "tp-switch-1"
PLAIN = EngineConfig(engine="vllm", model="/m/tiny", port=8123)
NGRAM = EngineConfig(engine="vllm", model="/m/tiny", port=8123, spec=SpecArm(2, "ngram"))
STARTED = ArmStart(startup={}, argv=["started"], startup_s=1.0)
SETTLE = f"tailpod up --relaunch {TAG} --spec-k 0"


class FlakyKind:
    """A cloud pod kind whose engine dies on start for the arms in `dies`; the ledger records an
    arm only once it serves, as pods/cloud.py relaunch_cloud does."""

    name = "cloud"
    no_engine_left = "the pod bills with no engine (its TTL and dead-man switch still cover it)"

    def __init__(self, dies: set[str]) -> None:
        self.dies = dies
        self.tried: list[str] = []

    def engine_healthy(self, _settings: Any, _record: PodRecord) -> bool | None:
        return None

    def relaunch(self, _settings: Any, record: PodRecord, cfg: EngineConfig, ledger: Ledger,
                 _progress: Any, agent: Any = None) -> ArmStart:
        self.tried.append(cfg.spec.label())
        if cfg.spec.label() in self.dies:
            raise TailpodError("the pod agent's engine relaunch failed: vllm exited during "
                               "start-up [Errno 111]")
        ledger.update(record.run_tag, event="engine-relaunched", engine=cfg.to_json())
        return STARTED


@pytest.fixture()
def pod(tmp_path: Path) -> tuple[Any, Ledger]:
    settings = load_settings(env={"TAILPOD_HOME": str(tmp_path)}, dotenv_path=tmp_path / "no.env")
    ledger = Ledger(settings.state_dir)
    ledger.put(PodRecord(run_tag=TAG, provider="runpod", status="running",
                         engine=PLAIN.to_json()))
    return settings, ledger


def use(monkeypatch: pytest.MonkeyPatch, kind: FlakyKind) -> None:
    monkeypatch.setattr("tailpod.pods.kinds.kind_for", lambda _provider: kind)


def record(ledger: Ledger) -> PodRecord:
    found = ledger.get(TAG)
    assert found is not None
    return found


def test_a_failed_switch_restores_the_last_good_arm(
        pod: tuple[Any, Ledger], monkeypatch: pytest.MonkeyPatch) -> None:
    settings, ledger = pod
    kind = FlakyKind(dies={"ngram-k2"})
    use(monkeypatch, kind)
    with pytest.raises(ArmSwitchFailed) as failed:
        switch_arm(settings, record(ledger), NGRAM, ledger, lambda _f, _line: None)
    assert kind.tried == ["ngram-k2", "plain"]
    assert failed.value.exit_code == 1 and not failed.value.no_engine
    assert "arm ngram-k2 failed to start" in failed.value.message
    assert "serves plain again" in failed.value.message
    assert record(ledger).extra.no_engine is None
    assert EngineConfig.from_json(record(ledger).engine) == PLAIN


def test_when_the_restore_fails_too_the_ledger_says_no_engine_and_how_to_settle(
        pod: tuple[Any, Ledger], monkeypatch: pytest.MonkeyPatch) -> None:
    settings, ledger = pod
    use(monkeypatch, FlakyKind(dies={"ngram-k2", "plain"}))
    with pytest.raises(ArmSwitchFailed) as failed:
        switch_arm(settings, record(ledger), NGRAM, ledger, lambda _f, _line: None)
    assert failed.value.exit_code == 3  # something still bills (docs/exit-codes.md)
    assert "bills with no engine" in failed.value.message
    assert SETTLE in (failed.value.hint or "") and f"tailpod down {TAG}" in (failed.value.hint or "")
    lost = record(ledger).extra.no_engine
    assert lost is not None and lost["arm"] == "ngram-k2"
    assert "restoring plain failed too" in lost["restore"]
    assert "no-engine" in [e["event"] for e in record(ledger).events]
    assert record(ledger).status == "running"  # still billing: down and the TTL still see it

    # the settle command: plain serves again and the state is cleared
    use(monkeypatch, FlakyKind(dies=set()))
    switch_arm(settings, record(ledger), PLAIN, ledger, lambda _f, _line: None)
    assert record(ledger).extra.no_engine is None


def test_an_arm_that_cannot_run_is_refused_before_the_engine_is_stopped(
        pod: tuple[Any, Ledger], monkeypatch: pytest.MonkeyPatch) -> None:
    settings, ledger = pod
    kind = FlakyKind(dies=set())
    use(monkeypatch, kind)
    sglang_eagle = EngineConfig(engine="sglang", model="/m/tiny", spec=SpecArm(2, "eagle"))
    with pytest.raises(ConfigError, match="arm eagle-k2 cannot run on sglang"):
        switch_arm(settings, record(ledger), sglang_eagle, ledger, lambda _f, _line: None)
    assert kind.tried == []


def test_the_sweep_does_not_reuse_a_pod_with_no_engine(
        pod: tuple[Any, Ledger], monkeypatch: pytest.MonkeyPatch) -> None:
    settings, ledger = pod
    use(monkeypatch, FlakyKind(dies={"ngram-k2", "plain"}))
    with pytest.raises(ArmSwitchFailed):
        switch_arm(settings, record(ledger), NGRAM, ledger, lambda _f, _line: None)
    kind = FlakyKind(dies={"plain"})
    use(monkeypatch, kind)
    host = AgentSweepHost(settings, ledger, record(ledger), measurer=None)  # type: ignore[arg-type]
    with pytest.raises(ArmSwitchFailed) as failed:
        host.restart(Arm("plain", PLAIN))  # the ledger's engine is plain, but none serves
    assert kind.tried == ["plain"]  # relaunched, not reused; nothing left to restore
    assert failed.value.exit_code == 3 and SETTLE in (failed.value.hint or "")


def test_ctrl_c_during_the_switch_leaves_no_engine_said(
        pod: tuple[Any, Ledger], monkeypatch: pytest.MonkeyPatch) -> None:
    settings, ledger = pod
    kind = FlakyKind(dies=set())

    def interrupted(*_args: Any, **_kw: Any) -> ArmStart:
        kind.tried.append("interrupted")
        raise KeyboardInterrupt

    kind.relaunch = interrupted  # type: ignore[method-assign]
    use(monkeypatch, kind)
    with pytest.raises(KeyboardInterrupt):
        switch_arm(settings, record(ledger), NGRAM, ledger, lambda _f, _line: None)
    assert kind.tried == ["interrupted"]  # no restore under Ctrl-C
    lost = record(ledger).extra.no_engine
    assert lost is not None and lost["arm"] == "ngram-k2" and "interrupted" in lost["restore"]


def test_the_error_names_the_engines_own_last_line_not_its_whole_traceback(
        pod: tuple[Any, Ledger], monkeypatch: pytest.MonkeyPatch) -> None:
    settings, ledger = pod
    kind = FlakyKind(dies=set())

    def traceback(*_args: Any, **_kw: Any) -> ArmStart:
        raise TailpodError("the pod agent's engine relaunch failed: exited during start-up\n"
                           "  Traceback (most recent call last):\n    File \"vllm/x.py\"\n"
                           "  NotImplementedError: Unsupported speculative method: 'eagle9'\n")

    kind.relaunch = traceback  # type: ignore[method-assign]
    use(monkeypatch, kind)
    with pytest.raises(ArmSwitchFailed) as failed:
        switch_arm(settings, record(ledger), NGRAM, ledger, lambda _f, _line: None)
    assert "Unsupported speculative method: 'eagle9'" in failed.value.message
    assert "Traceback" not in failed.value.message and "vllm/x.py" not in failed.value.message
