"""`status` says a run whose `up` was killed mid-step, with the command that settles it, exactly
once: where the provider's report holds the run (a rented pod, your own box) the provider's side
says it (cli/remote.py print_remote), and for a run it does not hold (this machine's) the pod rows
do. Which one speaks is read from the report, no longer from the kind (issue 37 item 11)."""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tailpod.cli.main import app
from tailpod.ledger import Ledger, PodRecord

TAG = "tp-20261206-100000-abcdef"


def _dead_owner(step: str) -> dict[str, object]:
    """An operation stamp whose process has exited (on this host, so it can be told)."""
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return {"step": step, "pid": proc.pid, "host": socket.gethostname(), "proc_start": None,
            "since": 0.0}


@pytest.mark.parametrize(("provider", "extra"), [
    ("local", {"pod_id": f"local:{TAG}"}),
    ("ssh", {"pod_id": f"box:{TAG}", "ssh": {"host": "203.0.113.7", "port": 22,
                                                "user": "me"}}),
])
def test_an_interrupted_run_no_provider_lists_is_said_once_with_its_settle(
        tailpod_home: Path, provider: str, extra: dict[str, object]) -> None:
    owner = _dead_owner("engine-start")
    Ledger(tailpod_home).put(PodRecord(run_tag=TAG, provider=provider, status="creating",
                                       operation=owner, **extra))  # type: ignore[arg-type]
    result = CliRunner().invoke(app, ["status", "--no-beat"], env={"COLUMNS": "250"})
    assert result.exit_code == 0, result.output
    said = [line for line in result.stdout.splitlines()
            if line.startswith(f"{TAG}: ") and "interrupted during engine-start" in line]
    assert len(said) == 1, result.stdout
    assert f"(pid {owner['pid']} on {owner['host']} is gone)" in said[0]
    assert said[0].endswith(f"settle it with: tailpod down {TAG}")
