"""What differs between kinds is said by the kind (issue 37 item 1): `--volume` on your own box
is refused before the box is reached or anything recorded (it was silently ignored: only this
machine refused it), and an arm switch that leaves no engine says what is left on that kind:
your own box has no TTL and no dead-man switch, and bills nothing through tailpod."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from tailpod.agent_client.driver import ArmStart
from tailpod.cli.main import app
from tailpod.config import load_settings
from tailpod.engines.base import EngineConfig, SpecArm
from tailpod.errors import TailpodError
from tailpod.ledger import Ledger, PodRecord
from tailpod.pods.arm_switch import ArmSwitchFailed, switch_arm
from tailpod.pods.kinds import kind_for

NGRAM = EngineConfig(engine="vllm", model="/m/tiny", port=8123, spec=SpecArm(2, "ngram"))


@pytest.mark.parametrize("provider", ["ssh", "local"])
def test_volume_on_a_kind_that_mounts_none_is_refused_first(tailpod_home: Path,
                                                            provider: str) -> None:
    # 127.0.0.1:1 refuses at once: the old path reached the box and said it could not
    result = CliRunner().invoke(app, ["up", "--provider", provider, "--host", "me@127.0.0.1:1",
                                      "--model", "m", "--volume", "vol-1"])
    assert result.exit_code == 2, result.output
    assert "--volume is for cloud pods" in result.output
    assert "cannot reach" not in result.output and "127.0.0.1" not in result.output
    assert Ledger(load_settings().state_dir).all() == []


def _dies(*_a: Any, **_k: Any) -> ArmStart:
    raise TailpodError("the pod agent's engine relaunch failed: vllm exited during start-up")


@pytest.mark.parametrize(("provider", "left"), [
    ("runpod", "the pod bills with no engine (its TTL and dead-man switch still cover it)"),
    ("local", "this machine serves no engine"),
    ("ssh", "your box serves no engine; it bills nothing through tailpod"),
])
def test_no_engine_says_what_is_left_on_each_kind(
        tailpod_home: Path, monkeypatch: pytest.MonkeyPatch, provider: str, left: str) -> None:
    settings = load_settings()
    ledger = Ledger(settings.state_dir)
    record = ledger.put(PodRecord(run_tag="tp-left", provider=provider, status="running"))
    monkeypatch.setattr(type(kind_for(provider)), "relaunch", _dies)
    with pytest.raises(ArmSwitchFailed) as failed:
        switch_arm(settings, record, NGRAM, ledger, lambda _f, _line: None)
    assert failed.value.no_engine
    assert failed.value.message.endswith(f"Now {left}")


def test_lanes_on_your_own_box_are_refused_by_its_kind_before_anything(
        tailpod_home: Path) -> None:
    result = CliRunner().invoke(app, ["up", "--provider", "ssh", "--host", "me@127.0.0.1:1",
                                      "--model", "m", "--lanes", "spec:2,plain",
                                      "--admission-limit", "1"])
    assert result.exit_code == 2, result.output
    assert "--lanes runs on this machine or a rented pod, not on a ssh pod (ssh)" in result.output
    assert "cannot reach" not in result.output
    assert Ledger(load_settings().state_dir).all() == []
