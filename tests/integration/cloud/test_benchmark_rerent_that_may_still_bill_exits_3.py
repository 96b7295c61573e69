"""`benchmark --resume-on-preemption`: when the replacement pod's `up` ends with something that
may still bill (its bootstrap failed and its own teardown is not proven: BillingNotProven, exit 3
by docs/exit-codes.md), the benchmark exits 3 and names that pod, not exit 1 with "no new pod
could be rented"; `down --all` then settles it. Against the sandbox cloud, the pod's side of the
sweep scripted as in test_benchmark_resumes_on_a_new_spot_pod.py."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from tailpod.cli.main import app
from tailpod.errors import BillingNotProven
from tailpod.ledger import PodRecord
from tailpod.sandbox import Sandbox

from .test_benchmark_resumes_on_a_new_spot_pod import (
    Pods,
    _rent_spot_pod,
    _replacement_left_up,
)


class UnprovenReplacement(Pods):
    """The replacement is rented for real, then its bootstrap fails and its teardown is not
    proven, as pods/cloud.py's up says it then."""

    def install(self, monkeypatch: pytest.MonkeyPatch) -> None:
        super().install(monkeypatch)
        rent = self.steps.up

        def up(*args: Any, **kwargs: Any) -> PodRecord:
            record = rent(*args, **kwargs)
            raise BillingNotProven(f"bootstrap failed (engine died) and teardown is NOT proven: "
                                   f"{record.run_tag} may still bill",
                                   hint=f"run `tailpod down {record.run_tag}`")

        monkeypatch.setattr(self.steps, "up", up)


def test_a_replacement_that_may_still_bill_exits_3_naming_it(
        sandbox: Sandbox, tailpod_home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    first = _rent_spot_pod(sandbox, tailpod_home, monkeypatch)
    pods = UnprovenReplacement(sandbox, cut_at=2)
    res = pods.benchmark(monkeypatch, first.run_tag)
    assert res.exit_code == 3, res.output
    # the lost pod destroyed with its proof; the ledger knows what may bill
    new = _replacement_left_up(sandbox, tailpod_home, first.run_tag, pods)
    said = " ".join(res.output.split())
    assert f"{new.run_tag} may still bill" in said and f"tailpod down {new.run_tag}" in said, said
    assert "Traceback" not in res.output
    down = CliRunner().invoke(app, ["down", "--all"])
    assert down.exit_code == 0, down.output
    assert sandbox.billing_now() == []
