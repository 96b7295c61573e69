"""`benchmark --resume-on-preemption` rents the replacement at the price of the moment, after a
preemption (someone bid more): a spot pod rented with neither a price cap nor a bid of its own
would be replaced at any price, up to three times. The flag is refused on such a pod (exit 2,
before any wait, rental or write) unless TAILPOD_MAX_PRICE gives the replacement a cap; a pod
with a cap (test_benchmark_resumes_on_a_new_spot_pod.py) or a bid is accepted."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from tailpod.cli.main import app
from tailpod.engines.base import EngineConfig
from tailpod.ledger import Ledger, PodRecord
from tailpod.provision.base import PodSpec
from tailpod.provision.create import up_remote
from tailpod.sandbox import Sandbox
from tests.helpers.api_timings import fast_timings
from tests.helpers.lifecycle_policy import fast_policy

from .conftest import settings_for
from .test_benchmark_resumes_on_a_new_spot_pod import PREFERENCE, Pods, _env


def _uncapped_spot_pod(sandbox: Sandbox, home: Path, monkeypatch: pytest.MonkeyPatch,
                       bid: float | None) -> PodRecord:
    """`up --spot --gpu "RTX 4090" --gpu "RTX 3090"` with no --max-price (and `bid`)."""
    settings = settings_for(sandbox, home, **_env(sandbox, home, monkeypatch))
    ledger = Ledger(settings.state_dir)
    record, _info = up_remote(
        settings, ledger,
        PodSpec(run_tag="tp-spot-nocap", gpu_preference=list(PREFERENCE), image=settings.image,
                disk_gb=20, start_command=["sleep", "600"], spot=True, bid=bid),
        policy=fast_policy(), timings=fast_timings())
    return ledger.update(record.run_tag, status="running", operation={},
                         engine=EngineConfig(engine="vllm", model="org/tiny").to_json())


def test_an_uncapped_unbid_spot_pod_is_refused_before_anything(
        sandbox: Sandbox, tailpod_home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    first = _uncapped_spot_pod(sandbox, tailpod_home, monkeypatch, bid=None)
    monkeypatch.delenv("TAILPOD_MAX_PRICE", raising=False)
    pods = Pods(sandbox, cut_at=1)
    res = pods.benchmark(monkeypatch, first.run_tag)
    said = " ".join(res.output.split())
    assert res.exit_code == 2, res.output
    assert "no price cap" in said and "TAILPOD_MAX_PRICE" in said, said
    assert pods.hosts == {} and pods.steps.rented == []
    assert not (tailpod_home / "results" / "spot-run").exists()
    CliRunner().invoke(app, ["down", first.run_tag])
    assert sandbox.billing_now() == []


@pytest.mark.parametrize(("bid", "cap"), [(0.3, None), (None, "0.5")])
def test_a_bid_or_a_cap_for_the_replacement_is_enough(
        sandbox: Sandbox, tailpod_home: Path, monkeypatch: pytest.MonkeyPatch,
        bid: float | None, cap: str | None) -> None:
    first = _uncapped_spot_pod(sandbox, tailpod_home, monkeypatch, bid=bid)
    if cap is not None:
        monkeypatch.setenv("TAILPOD_MAX_PRICE", cap)
    pods = Pods(sandbox, cut_at=0)  # nothing is cut: the sweep runs whole on the pod
    res = pods.benchmark(monkeypatch, first.run_tag)
    assert res.exit_code == 0, res.output
    assert pods.steps.rented == []
    CliRunner().invoke(app, ["down", first.run_tag])
    assert sandbox.billing_now() == []


def test_a_cap_below_the_pods_bid_is_refused_before_anything(
        sandbox: Sandbox, tailpod_home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The replacement is bid as the pod was, under TAILPOD_MAX_PRICE when the pod had no cap of
    its own: a cap below that bid could rent nothing, found only after the lost pod is gone."""
    first = _uncapped_spot_pod(sandbox, tailpod_home, monkeypatch, bid=0.3)
    monkeypatch.setenv("TAILPOD_MAX_PRICE", "0.2")
    pods = Pods(sandbox, cut_at=1)
    res = pods.benchmark(monkeypatch, first.run_tag)
    said = " ".join(res.output.split())
    assert res.exit_code == 2, res.output
    assert "the bid $0.3/h is above the price cap $0.2/h" in said, said
    assert pods.hosts == {} and pods.steps.rented == []
    CliRunner().invoke(app, ["down", first.run_tag])
    assert sandbox.billing_now() == []
