"""A sandbox that shuts down stops every pod's processes even when one pod's stop fails: the
others would outlive the sandbox and the test that started it (issue 38 item 9)."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

from tailpod.sandbox.cloud import SandboxCloud


class FailingFirst:
    def __init__(self) -> None:
        self.stopped: list[str] = []

    def allocate_ports(self, pod: object) -> dict[int, int]:
        return {}

    def start(self, pod: object) -> None:
        pass

    def stop(self, pod: SimpleNamespace) -> None:
        self.stopped.append(pod.key)
        if pod.key == "runpod:a":
            raise OSError("its sshd would not die")


def test_one_failing_stop_does_not_spare_the_other_pods(tmp_path: Path) -> None:
    host = FailingFirst()
    cloud = SandboxCloud(tmp_path, pod_host=host, run_commands=False)
    for key in ("runpod:a", "runpod:b", "vast:c"):
        cloud.pods[key] = SimpleNamespace(key=key)  # type: ignore[assignment]
    with pytest.raises(OSError, match="would not die"):
        cloud.shutdown()
    assert host.stopped == ["runpod:a", "runpod:b", "vast:c"]
