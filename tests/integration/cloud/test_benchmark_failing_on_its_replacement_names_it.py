"""`benchmark --resume-on-preemption`: a sweep that fails on the replacement pod (rented after the
first pod lost its bid, and still billing) says which pod it failed on and that it is still up,
with its `tailpod down`; the pod the user asked for is gone by then, so an error that named only
the failure would leave the user's `down` of that pod to report nothing billing. Against the
sandbox cloud, the pod's side of the sweep scripted as in
test_benchmark_resumes_on_a_new_spot_pod.py."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from tailpod.cli.main import app
from tailpod.config import Settings
from tailpod.errors import TailpodError
from tailpod.ledger import Ledger, PodRecord
from tailpod.sandbox import Sandbox

from .test_benchmark_resumes_on_a_new_spot_pod import (
    Pods,
    _rent_spot_pod,
    _replacement_left_up,
)


class BrokenReplacement(Pods):
    """The first pod loses its bid in its second cell; the replacement's first cell fails."""

    def host(self, settings: Settings, ledger: Ledger, record: PodRecord, *a: Any) -> Any:
        if not self.hosts:
            return super().host(settings, ledger, record, *a)

        class Broken:
            measured_from = "pod"

            def __getattr__(self, name: str) -> Any:
                def fail(*_a: Any, **_k: Any) -> Any:
                    raise TailpodError("probe run failed (no-envelope): no result envelope")
                return fail

            def close(self) -> None:
                pass

        self.hosts[record.run_tag] = Broken()  # type: ignore[assignment]
        return self.hosts[record.run_tag]


def test_a_failure_on_the_replacement_names_it_and_its_down(
        sandbox: Sandbox, tailpod_home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    first = _rent_spot_pod(sandbox, tailpod_home, monkeypatch)
    pods = BrokenReplacement(sandbox, cut_at=2)
    res = pods.benchmark(monkeypatch, first.run_tag)
    assert res.exit_code == 1, res.output
    new = _replacement_left_up(sandbox, tailpod_home, first.run_tag, pods)
    said = " ".join(res.output.split())
    assert "probe run failed (no-envelope)" in said
    assert f"tailpod down {new.run_tag}" in said, said
    assert "Traceback" not in res.output
    down = CliRunner().invoke(app, ["down", new.run_tag])
    assert down.exit_code == 0, down.output
    assert sandbox.billing_now() == []
