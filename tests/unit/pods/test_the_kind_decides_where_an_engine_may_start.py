"""Where an engine may start is the kind's decision (pods/base.py), not its callers': `eval kl
--provider local` starts an engine on this machine only when the ledger holds no run of that
provider (cli/eval.py branched on `engine_here` itself), and `benchmark --deploy` serves a lanes
deployment here, on a rented pod, or is refused on your own box (measure/deploy.py branched on
the kind's name and `engine_here`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from tailpod.cli.main import app
from tailpod.config import load_settings
from tailpod.errors import ConfigError
from tailpod.ledger import Ledger, PodRecord
from tailpod.pods.kinds import kind_for


@pytest.mark.parametrize(("provider", "held", "starts"), [
    ("local", [], True),
    ("local", ["runpod"], True),  # a rented pod is no engine of this machine
    ("local", ["local"], False),  # the held one is used
    ("runpod", [], False),  # nothing is rented as a side effect
    ("vastai", [], False),
    ("ssh", [], False),
])
def test_an_engine_starts_unasked_only_on_this_machine_and_only_when_none_is_held(
        tailpod_home: Path, provider: str, held: list[str], starts: bool) -> None:
    settings = load_settings(overrides={"provider": provider})
    ledger = Ledger(settings.state_dir)
    for i, other in enumerate(held):
        ledger.put(PodRecord(run_tag=f"tp-held-{i}", provider=other, status="running"))
    assert kind_for(provider).starts_engine_when_none_held(settings, ledger) is starts


def test_a_terminated_run_holds_nothing(tailpod_home: Path) -> None:
    settings = load_settings(overrides={"provider": "local"})
    ledger = Ledger(settings.state_dir)
    ledger.put(PodRecord(run_tag="tp-gone", provider="local", status="terminated"))
    assert kind_for("local").starts_engine_when_none_held(settings, ledger) is True


@pytest.mark.parametrize(("provider", "where"), [("local", "here"), ("runpod", "pod"),
                                                 ("vastai", "pod")])
def test_a_lanes_deployment_serves_here_or_on_a_rented_pod(provider: str, where: str) -> None:
    assert kind_for(provider).deploy_lanes_where() == where


def test_a_lanes_deployment_on_your_own_box_is_refused() -> None:
    with pytest.raises(ConfigError) as refused:
        kind_for("ssh").deploy_lanes_where()
    assert refused.value.message == ("--deploy of a lanes deployment runs on this machine or a "
                                     "rented pod, not on a ssh pod")


class _Started(Exception):
    pass


@pytest.mark.parametrize(("held", "started"), [(False, True), (True, False)])
def test_eval_kl_starts_a_local_engine_only_when_none_is_held(
        tailpod_home: Path, monkeypatch: pytest.MonkeyPatch, held: bool, started: bool) -> None:
    calls: list[str] = []

    def up_here(*_a: Any, **_k: Any) -> PodRecord:
        calls.append("up")
        raise ConfigError("stop here: an engine would start")

    def on_pod(_settings: Any, _ledger: Any, record: PodRecord, *_a: Any, **_k: Any) -> Any:
        calls.append(f"pod {record.run_tag}")
        raise ConfigError("stop here: measured on the held run")

    monkeypatch.setattr("tailpod.cli.eval._up_here", up_here)
    monkeypatch.setattr("tailpod.measure.kl_eval.kl_on_pod", on_pod)
    if held:
        Ledger(load_settings().state_dir).put(
            PodRecord(run_tag="tp-held", provider="local", status="running"))
    result = CliRunner().invoke(app, ["eval", "kl", "--provider", "local", "--reference", "r",
                                      "--candidate", "c"])
    assert result.exit_code == 2, result.output
    assert calls == (["up"] if started else ["pod tp-held"])
